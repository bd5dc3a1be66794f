"""The offline runner refuses, at the resource, what EKS, EC2 and IAM refuse (tools/aws_rules.py).

Each rule: a small program declaring the refused shape fails under the runner with the rule's id and source named,
and the same program with the accepted shape passes; the stack's own shapes pass in every capacity mode.
"""

from __future__ import annotations

import base64
import json
import textwrap

import pytest

from ray_efa_eks.components.nodes.launch_template import node_config_user_data
from ray_efa_eks.tools import aws_rules
from ray_efa_eks.tools.aws_rules import AwsRejected
from ray_efa_eks.tools.mock_account import EksCluster, MockAccount
from ray_efa_eks.tools.mockrun import run_program

PROGRAM = textwrap.dedent('''
    import json
    import pulumi
    import pulumi_aws as aws
    import pulumi_eks as eks

    c = pulumi.Config("t")
    shape = json.loads(c.require("shape"))
    if "lt" in shape:
        lt = aws.ec2.LaunchTemplate("lt", **shape["lt"])
        ref = {"id": lt.id, "version": "1"}
    else:
        ref = None
    if "mng" in shape:
        eks.ManagedNodeGroup("mng", cluster="ray", node_role="arn:aws:iam::123456789012:role/n",
                             subnet_ids=["subnet-a"], launch_template=ref, **shape["mng"])
    if "zone" in shape:
        sub = aws.ec2.Subnet("sub", vpc_id="vpc-1", cidr_block="10.0.0.0/20", availability_zone=shape["zone"])
        ok = aws.ec2.Subnet("ok", vpc_id="vpc-1", cidr_block="10.0.16.0/20", availability_zone="us-east-1b")
        eks.Cluster("eks", vpc_id="vpc-1", private_subnet_ids=[sub.id, ok.id], skip_default_node_group=True)
    if "principal" in shape:  # the cluster is created in this run, by whoever runs it
        cluster = eks.Cluster("ray-eks", name="ray", authentication_mode="API", skip_default_node_group=True)
        aws.eks.AccessEntry("entry", cluster_name="ray", principal_arn=shape["principal"], type="STANDARD",
                            opts=pulumi.ResourceOptions(depends_on=[cluster]))
    if "version" in shape:  # a control plane EKS runs at shape["live"], updated to shape["version"]
        cluster = eks.Cluster("ray-eks", name="ray", version=shape["version"], skip_default_node_group=True)
        if "ng_version" in shape:
            eks.ManagedNodeGroup("ng", cluster=cluster, node_role="arn:aws:iam::123456789012:role/n",
                                 subnet_ids=["subnet-a"], version=shape["ng_version"])
    if "trust" in shape:
        aws.iam.Role("role", assume_role_policy=json.dumps(shape["trust"]))
''')

CLUSTER = "arn:aws:eks:us-east-1:123456789012:cluster/ray"
NI = {"network_card_index": 0, "device_index": 0, "interface_type": "efa", "security_groups": ["sg-1"]}


def _trust(condition: dict | None, actions=("sts:AssumeRole", "sts:TagSession")) -> dict:
    st = {"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": list(actions)}
    if condition is not None:
        st["Condition"] = condition
    return {"Version": "2012-10-17", "Statement": [st]}


SCOPED = {
    "StringEquals": {
        "aws:SourceAccount": "123456789012",
        "aws:RequestTag/eks-cluster-arn": CLUSTER,
        "aws:RequestTag/kubernetes-namespace": "ray",
        "aws:RequestTag/kubernetes-service-account": "ray-train",
    }
}


def _gp3(size: int | None, iops: int | None, throughput: int | None, kind: str = "gp3") -> dict:
    ebs = {"volume_type": kind, "volume_size": size, "iops": iops, "throughput": throughput}
    return {"device_name": "/dev/xvda", "ebs": {k: v for k, v in ebs.items() if v is not None}}


# rule id -> (refused shape, accepted shape)
CASES = {
    "capacity-block-type-in-template": (
        {"lt": {}, "mng": {"capacity_type": "CAPACITY_BLOCK", "instance_types": ["p5.48xlarge"]}},
        {"lt": {"instance_type": "p5.48xlarge"}, "mng": {"capacity_type": "CAPACITY_BLOCK"}},
    ),
    "instance-type-in-one-place": (
        {"lt": {"instance_type": "g6.12xlarge"}, "mng": {"instance_types": ["g6.12xlarge"]}},
        {"lt": {}, "mng": {"instance_types": ["g6.12xlarge"]}},
    ),
    "no-subnet-in-launch-template": (
        {"lt": {"network_interfaces": [{**NI, "subnet_id": "subnet-a"}]}, "mng": {"instance_types": ["p5.48xlarge"]}},
        {"lt": {"network_interfaces": [NI]}, "mng": {"instance_types": ["p5.48xlarge"]}},
    ),
    "interface-security-groups": (
        {
            "lt": {"network_interfaces": [NI], "vpc_security_group_ids": ["sg-1"]},
            "mng": {"instance_types": ["p5.48xlarge"]},
        },
        {"lt": {"vpc_security_group_ids": ["sg-1"]}, "mng": {"instance_types": ["p5.48xlarge"]}},
    ),
    "user-data-mime-multipart": (
        {
            "lt": {"user_data": base64.b64encode(b"#!/bin/bash\necho hi\n").decode()},
            "mng": {"instance_types": ["g6.12xlarge"]},
        },
        {
            "lt": {"user_data": node_config_user_data({"FastImagePull": True})},
            "mng": {"instance_types": ["g6.12xlarge"]},
        },
    ),
    "gp3-limits": (
        {"lt": {"block_device_mappings": [_gp3(200, 3000, 1000)]}},  # 1000 MiB/s needs 4000 IOPS
        {"lt": {"block_device_mappings": [_gp3(200, 16000, 1000)]}},
    ),
    "cluster-subnets-in-azs": ({"zone": "us-east-1-atl-2a"}, {"zone": "us-east-1a"}),
    "one-entry-per-principal": (
        {"principal": "arn:aws:iam::123456789012:user/mock"},
        {"principal": "arn:aws:iam::123456789012:role/Admin"},
    ),
    "one-minor-at-a-time": ({"live": "1.33", "version": "1.35"}, {"live": "1.33", "version": "1.34"}),
    "node-group-not-above-control-plane": (
        {"live": "1.34", "version": "1.34", "ng_version": "1.35"},
        {"live": "1.34", "version": "1.35", "ng_version": "1.35"},
    ),
    "pod-identity-trust": (
        {"trust": _trust({"StringEquals": {**SCOPED["StringEquals"], "aws:RequestTag/kubernetes-cluster": "ray"}})},
        {"trust": _trust(SCOPED)},
    ),
}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("aws-rules") / "__main__.py"
    path.write_text(PROGRAM)
    return path


def _run(program, shape: dict, **kw):
    if "live" in shape:  # an account where EKS already runs cluster "ray" at that version
        kw.setdefault("account", MockAccount(clusters={"ray": EksCluster("ray", shape["live"], False, "x")}))
    return run_program({"t:shape": json.dumps(shape)}, program=program, **kw)


def test_every_rule_has_a_case_and_a_source():
    assert set(CASES) == set(aws_rules.RULE_IDS)
    for rule in aws_rules.RULES:
        assert rule.source_url.startswith("https://docs.aws.amazon.com/") and rule.source_title


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_runner_refuses_the_shape_aws_refuses(program, rule_id):
    bad, good = CASES[rule_id]
    rule = next(r for r in aws_rules.RULES if r.id == rule_id)
    with pytest.raises(AwsRejected) as e:
        _run(program, bad)
    assert e.value.rule.id == rule_id
    assert rule.source_url in str(e.value) and rule.source_title in str(e.value)
    assert rule.resource_type in e.value.resource, "refused at the resource AWS refuses"
    _run(program, good)  # the accepted shape registers
    _run(program, bad, strict=False)  # the plain SDK mocks would have accepted it


@pytest.mark.parametrize(
    "trust",
    [
        _trust(SCOPED, actions=("sts:AssumeRole",)),  # no sts:TagSession: Pod Identity's request is denied
        _trust({"StringEquals": {"aws:RequestTag/eks-cluster-id": "x"}}),  # a session tag Pod Identity never adds
        _trust({"StringLike": {"AWS:REQUESTTAG/kubernetes-pod-namespace": "ray"}}),  # key names are case-insensitive
    ],
)
def test_pod_identity_trust_variants_refused(program, trust):
    with pytest.raises(AwsRejected, match="pod-identity-trust"):
        _run(program, {"trust": trust})


ORG = {"StringEquals": {**SCOPED["StringEquals"], "aws:SourceOrgID": "o-a1b2c3d4e5"}}


@pytest.mark.parametrize(
    "trust,warned",
    [
        (_trust(ORG), set()),  # aws:SourceOrgID: EKS passes it (EKS best practices guide)
        (_trust(None), {"pod-identity-trust-scoped"}),  # the pod-id-role page's minimal trust policy
        (_trust({"StringEquals": {"aws:RequestTag/kubernetes-namespace": "ray"}}), {"pod-identity-trust-scoped"}),
        (_trust({**SCOPED, "ArnEquals": {"aws:SourceArn": CLUSTER}}), {"pod-identity-trust-keys"}),  # undocumented
        (_trust({**SCOPED, "StringEqualsIfExists": {"aws:RequestTag/other": "x"}}), set()),  # IfExists: absent passes
    ],
    ids=["source-org-id", "minimal", "namespace-only", "source-arn", "if-exists"],
)
def test_pod_identity_trust_aws_accepts_and_the_layout_rules_warn(program, trust, warned):
    """AWS accepts these policies (IAM creates the role; Pod Identity's AssumeRole is not known to fail), so the
    runner does not refuse them; a preference (scoping, undocumented keys) is a layout-rule warning, not an error."""
    from ray_efa_eks.tools import layout, rules

    run = _run(program, {"trust": trust})
    found = rules.check(layout.from_mockrun(run))
    assert {v.rule for v in found} == warned
    assert all(v.severity == rules.WARNING for v in found) and not rules.errors(found)
    assert all("(warning)" in v.line() for v in found)
    # the plan shows a warning and does not fail on it (exit 0: nothing AWS refuses)
    from ray_efa_eks.tools.plan_render import render_text
    from ray_efa_eks.tools.plan_run import make_plan

    plan = make_plan(layout.from_mockrun(run), source="t", stack="dev", region="us-east-1")
    assert plan.exit_code == 0 and plan.errors == []
    text = render_text(plan)
    assert all(f"[{rule} (warning)]" in text for rule in warned)
    assert ("warnings (AWS accepts these)" in text) == bool(warned)


def test_assumed_role_deployer_is_the_creator(program):
    role = "arn:aws:iam::123456789012:role/Deployer"
    with pytest.raises(AwsRejected, match="one-entry-per-principal"):
        _run(program, {"principal": role}, caller_arn="arn:aws:sts::123456789012:assumed-role/Deployer/ci-session")


def test_the_creator_is_who_created_the_cluster_not_who_runs_the_update(program):
    """A creates the cluster (EKS holds A's entry); B's later run asking for an entry for A is refused, and B's own
    entry is accepted: the mock no longer takes the caller for the creator."""
    a, b = "arn:aws:iam::123456789012:role/A", "arn:aws:iam::123456789012:role/B"
    acct = MockAccount()
    _run(program, {"principal": b}, caller_arn=a, account=acct)  # A creates "ray", an entry for B
    assert acct.clusters["ray"].creator_arn == a and set(acct.clusters["ray"].entries) == {a, b}
    _run(program, {"principal": b}, caller_arn=b, account=acct)  # B runs the same program: nothing new
    with pytest.raises(AwsRejected, match="one-entry-per-principal") as e:
        _run(program, {"principal": a}, caller_arn=b, account=acct)  # B asks for A's entry: EKS already holds it
    assert "created by arn:aws:iam::123456789012:role/A" in str(e.value)


@pytest.mark.parametrize(
    "zone,mapping,refused",
    [
        ("us-east-1e", {}, True),  # moto's account: us-east-1e is use1-az3
        ("us-east-1a", {}, False),
        ("us-east-1a", {"us-east-1a": "use1-az3", "us-east-1e": "use1-az6"}, True),  # another account's mapping
        ("us-east-1e", {"us-east-1a": "use1-az3", "us-east-1e": "use1-az6"}, False),
    ],
)
def test_cluster_subnets_are_judged_by_zone_id_not_name(program, zone, mapping, refused):
    """EKS refuses control-plane subnets in zone ID use1-az3 (network-reqs), whatever that AZ is called here."""
    acct = MockAccount(zone_ids=mapping)
    if refused:
        with pytest.raises(AwsRejected, match="cluster-subnets-in-azs") as e:
            _run(program, {"zone": zone}, account=acct)
        assert "use1-az3" in str(e.value)
    else:
        _run(program, {"zone": zone}, account=acct)


@pytest.mark.parametrize(
    "size,iops,throughput,kind,refused",
    [
        (200, None, None, "gp3", None),  # the baseline: 3000 IOPS, 125 MiB/s
        (200, None, 750, "gp3", None),  # 0.25 x the 3000 baseline: the most it carries
        (200, None, 751, "gp3", "0.25 MiB/s per provisioned IOPS"),
        (200, 8000, 2000, "gp3", None),  # the throughput maximum at the least IOPS it needs
        (200, 7999, 2000, "gp3", "at most 1999 MiB/s"),
        (200, 16000, 2001, "gp3", "outside 125..2000"),
        (200, 16000, 124, "gp3", "outside 125..2000"),
        (200, 2999, None, "gp3", "outside 3000..80000"),
        (160, 80000, 2000, "gp3", None),  # 500 IOPS per GiB: 160 GiB reaches 80,000
        (159, 80000, 2000, "gp3", "500 IOPS per GiB"),
        (200, 80001, None, "gp3", "outside 3000..80000"),
        (200, None, 500, "gp2", "for gp3 volumes only"),
        (65536, None, None, "gp3", None),  # EC2's gp3 size limit (VolumeSize "gp3: 1 - 65,536 GiB")
        (65537, None, None, "gp3", "outside 1..65536"),
        (None, 16000, 1000, "gp3", None),  # no size: the AMI snapshot's; the per-GiB ratio is not judged
    ],
    ids=lambda v: str(v),
)
def test_gp3_limits_at_their_edges(program, size, iops, throughput, kind, refused):
    """EC2's gp3 limits (LaunchTemplateEbsBlockDeviceRequest; EBS user guide, General Purpose SSD volumes), each at
    the value EC2 still accepts and the next one it refuses."""
    shape = {"lt": {"block_device_mappings": [_gp3(size, iops, throughput, kind)]}}
    if refused is None:
        _run(program, shape)
    else:
        with pytest.raises(AwsRejected, match="gp3-limits") as e:
            _run(program, shape)
        assert refused in str(e.value)


def test_user_data_with_an_ami_id_is_not_merged_so_any_form_passes(program):
    """With an imageId EKS merges no user data (launch-templates.html): the rule is silent there."""
    _run(
        program,
        {
            "lt": {"image_id": "ami-0123456789abcdef0", "user_data": base64.b64encode(b"#!/bin/bash\n").decode()},
            "mng": {"instance_types": ["g6.12xlarge"]},
        },
    )
