"""Every rule of StackConfig.validate reached through it (a table of cases) and its outcome asserted: the key
named, the fix said in fragments (one whole message pinned: the form every refusal takes);
plus the grammar fallback, unread keys and from_pulumi's warnings (the branches test_config.py did not reach)."""

from __future__ import annotations

import pytest

from ray_efa_eks.components.config import config as c
from ray_efa_eks.components.config import values as v
from ray_efa_eks.components.config.config import REFUSED, ConfigError, StackConfig

ARN = "arn:aws:iam::123456789012:role/a"


@pytest.mark.parametrize(
    "kw, key, says",
    [
        (dict(region="nowhere-1"), "aws:region", "is not an AWS region name"),
        (dict(gpuInstanceType=next(iter(REFUSED))), "gpuInstanceType", "not supported: "),
        (dict(gpuInstanceType="m7i.xlarge"), "gpuInstanceType", "has no GPU; pick one of g4dn.12xlarge"),
        (dict(gpuWorkersToDelete=["w1"], gpuScaleToZero=True), "gpuWorkersToDelete", "is for the fixed GPU fleet"),
        (dict(kubernetesVersion="1"), "kubernetesVersion", "must be MAJOR.MINOR"),
        (dict(kubernetesVersion="1.3"), "kubernetesVersion", 'quote it, kubernetesVersion: "1.30"'),
        (dict(kubernetesVersion="1.20"), "kubernetesVersion", "EKS creates no cluster on it"),
        (dict(rayTokenAuth=True, rayVersion="2.51.9"), "rayTokenAuth", "needs Ray >= 2.52 (rayVersion is 2.51.9)"),
        (dict(clusterAdminArns=[ARN], clusterViewerArns=[ARN]), "clusterViewerArns", "is also in clusterAdminArns"),
        (dict(kuberayChartVersion="1.5.1"), "kuberayChartVersion", "is older than 1.6.0"),
        (dict(gpuCapacity="capacity-block"), "gpuCapacityReservationId", "is not set: gpuCapacity capacity-block"),
        (
            dict(nodeAgentImage="public.ecr.aws/x/agent:1.0"),
            "nodeAgentImage",
            "nodeAgentImage = 'public.ecr.aws/x/agent:1.0' is invalid: pin it by digest (IMAGE@sha256:<64 hex>): the "
            "agent removes the startup taint, so every node must run the bits that were checked",
        ),
        (dict(gpuRootVolumeGiB=100, gpuRootVolumeIops=50001), "gpuRootVolumeIops", "at most 50000"),
        # team queues (components/queues/team_queues.py): each team once, whole nodes, a bucket for their prefixes
        (dict(jobQueues=["a:4gpus", "a:4gpus"], checkpointBucket=True), "jobQueues", "'a' is listed twice"),
        (dict(jobQueues=["a:6gpus"], checkpointBucket=True), "jobQueues", "not a whole number of 4-GPU nodes"),
        (
            dict(jobQueues=["a:4gpus"], checkpointBucket=False),
            "jobQueues",
            "jobQueues = ['a:4gpus'] is invalid: each team's jobs checkpoint under the team's own prefix of the "
            "stack's bucket: set checkpointBucket: true, or remove jobQueues",
        ),
        # the placement group, the region and the AZ reach the capacity rules (components/nodes/capacity.py)
        (
            dict(gpuPlacementGroupName="pg-1"),
            "gpuPlacementGroupName",
            "only for gpuCapacity reservation (the stack creates",
        ),
        (
            dict(
                gpuCapacity="reservation",
                availabilityZone="us-east-1a",
                gpuCapacityReservationId="arn:aws:resource-groups:eu-west-1:123456789012:group/odcr-pool",
            ),
            "gpuCapacityReservationId",
            "the resource group is in eu-west-1, the stack in us-east-1; use a group of",
        ),
    ],
)
def test_each_rule_names_its_key_and_fix(kw, key, says):
    with pytest.raises(ConfigError) as e:
        StackConfig(**kw).validate()
    assert e.value.key == key and says in str(e.value)


def test_the_boundaries_of_the_rules_pass():
    StackConfig(rayTokenAuth=True, rayVersion="2.52.0").validate()
    StackConfig(rayTokenAuth=False, rayVersion="2.40.0").validate()
    StackConfig(gpuWorkersToDelete=["w1"], gpuScaleToZero=False).validate()
    StackConfig(gpuRootVolumeGiB=100, gpuRootVolumeIops=50000).validate()  # 500 IOPS per GiB, exactly
    StackConfig(jobQueues=["a:8gpus", "b:1nodes"], checkpointBucket=True).validate()
    StackConfig(clusterAdminArns=[ARN], clusterViewerArns=[ARN.replace("role/a", "role/b")]).validate()
    cfg = StackConfig()
    assert cfg.gpu_type.name == cfg.gpuInstanceType and cfg.system_type.name == cfg.systemInstanceType


def test_an_unset_value_says_not_set():
    assert (
        str(ConfigError("gpuCapacityReservationId", None, "set it"))
        == "ray-efa-eks:gpuCapacityReservationId is not set: set it"
    )


@pytest.mark.parametrize(
    "key, grammar",
    [
        ("efa", v.Bool),
        ("gpuNodeCount", v.Int),
        ("clusterAdminArns", v.ListOf),
        ("availabilityZone", v.OrUnset),
        ("gpuInstanceType", v.Text),
    ],
)
def test_a_key_without_its_own_grammar_gets_its_defaults_type(monkeypatch, key, grammar):
    monkeypatch.delitem(c.GRAMMARS, key)
    assert type(c.grammar(key)) is grammar
    assert type(c.grammar("noSuchKey")) is v.OrUnset


def test_a_float_default_gets_the_float_grammar(monkeypatch):
    monkeypatch.delitem(c.GRAMMARS, "efaCheckMinBusbwGbps")
    assert type(c.grammar("efaCheckMinBusbwGbps")) is v.Float


def test_unread_keys_name_the_key_meant():
    got = dict(
        c.unread_keys(
            [
                "aws:gpuNodeCount",
                "ray-efa-ek:gpuNodeCont",
                "aws:region",
                "gpuNodeCount",
                "ray-efa-eks:efa",
                "kubernetes:context",
                "ray-efa-ekz:zzzzzz",
            ]
        )
    )
    assert got == {
        "aws:gpuNodeCount": "the aws namespace holds no gpuNodeCount; this stack reads ray-efa-eks:gpuNodeCount",
        "ray-efa-ek:gpuNodeCont": "namespace 'ray-efa-ek' is not 'ray-efa-eks'; did you mean ray-efa-eks:gpuNodeCount?",
        "ray-efa-ekz:zzzzzz": "namespace 'ray-efa-ekz' is not 'ray-efa-eks'; did you mean ray-efa-eks:zzzzzz?",
    }


def test_from_pulumi_warns_of_unread_keys_and_reads_ours(monkeypatch):
    import pulumi
    from pulumi.runtime import config as rc

    monkeypatch.setattr(rc, "get_config_env", lambda: {"aws:gpuNodeCount": "3"})
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: warned.append(msg))
    token = rc.CONFIG.set({"ray-efa-eks:gpuNodeCount": "4", "aws:region": "eu-west-1"})
    try:
        cfg = StackConfig.from_pulumi()
    finally:
        rc.CONFIG.reset(token)
    assert cfg.gpuNodeCount == 4 and cfg.region == "eu-west-1"
    assert warned == [
        "config aws:gpuNodeCount is never read by this program: the aws namespace holds no "
        "gpuNodeCount; this stack reads ray-efa-eks:gpuNodeCount"
    ]


# -- every refusal of validate() in full: the key, the bad value and the fix, word for word (mutmut survivors) --------

CR = "cr-0123456789abcdef0"
GPU_TYPES = ", ".join(sorted(n for n, t in c.CATALOGUE.items() if t.gpus))
ALL_TYPES = ", ".join(sorted(c.CATALOGUE))


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(region="nowhere-1"),
            "aws:region = 'nowhere-1' is invalid: is not an AWS region name; set aws:region to one "
            "such as us-east-1 or eu-west-1 (aws ec2 describe-regions lists yours)",
        ),
        (
            dict(gpuInstanceType="p3dn.24xlarge"),
            "ray-efa-eks:gpuInstanceType = 'p3dn.24xlarge' is invalid: not supported: "
            f"{REFUSED['p3dn.24xlarge']}; pick a supported type (docs/instance-types.md)",
        ),
        (
            dict(gpuInstanceType="g9.mega"),
            f"ray-efa-eks:gpuInstanceType = 'g9.mega' is invalid: unknown instance type; supported: {ALL_TYPES}",
        ),
        (
            dict(gpuInstanceType="m7i.xlarge"),
            f"ray-efa-eks:gpuInstanceType = 'm7i.xlarge' is invalid: has no GPU; pick one of {GPU_TYPES}",
        ),
        (
            dict(systemInstanceType="t9.tiny"),
            f"ray-efa-eks:systemInstanceType = 't9.tiny' is invalid: unknown instance type; supported: {ALL_TYPES}",
        ),
        (
            dict(gpuWorkersToDelete=["w1"]),
            "ray-efa-eks:gpuWorkersToDelete = ['w1'] is invalid: is for the fixed GPU fleet; "
            "with gpuScaleToZero Ray's autoscaler removes idle workers itself (it owns workersToDelete): remove it, or set "
            "gpuScaleToZero: false",
        ),
        (
            dict(kuberayChartVersion="1.5.1"),
            "ray-efa-eks:kuberayChartVersion = '1.5.1' is invalid: is older than 1.6.0, "
            "whose RayCluster CRD is the first with spec.upgradeStrategy (the stack sets Recreate; an older CRD drops it and "
            "no pod would ever be recreated); use 1.6.0 or newer, e.g. 1.7.0",
        ),
        (
            dict(gpuNodeCount=1),
            "ray-efa-eks:gpuNodeCount = 1 is invalid: EFA with one node has no peer; use >= 2, 0 to "
            "park, or set allowSingleEfaNode: true",
        ),
        (
            dict(availabilityZone="us-west-2a"),
            "ray-efa-eks:availabilityZone = 'us-west-2a' is invalid: is not an AZ of "
            "region us-east-1 (expected us-east-1a, us-east-1b, ...)",
        ),
        (
            dict(gpuCapacity="capacity-block", gpuCapacityReservationId=CR, availabilityZone="us-east-1a"),
            "ray-efa-eks:gpuCapacity = 'capacity-block' is invalid: EC2 sells no Capacity Blocks of g6.12xlarge; use one of "
            + ", ".join(sorted(n for n, t in c.CATALOGUE.items() if t.capacity_blocks))
            + ", or gpuCapacity reservation/on-demand",
        ),
        (
            dict(
                gpuInstanceType="p5.48xlarge",
                gpuCapacity="capacity-block",
                gpuCapacityReservationId=CR,
                availabilityZone="us-east-1a",
                gpuScaleToZero=True,
            ),
            "ray-efa-eks:gpuScaleToZero = True is invalid: a Capacity Block is paid up front and its nodes stay fixed (EC2 "
            "holds the instances for the block); remove gpuScaleToZero or set it false",
        ),
        (
            dict(kubernetesVersion="1"),
            f"ray-efa-eks:kubernetesVersion = '1' is invalid: must be MAJOR.MINOR, e.g. {c.DEFAULT_VERSION}",
        ),
        (
            dict(kubernetesVersion="1.3"),
            "ray-efa-eks:kubernetesVersion = '1.3' is invalid: EKS has no Kubernetes 1.3; YAML "
            'reads an unquoted 1.30 as the number 1.3: quote it, kubernetesVersion: "1.30"',
        ),
        (
            dict(kubernetesVersion="1.20"),
            "ray-efa-eks:kubernetesVersion = '1.20' is invalid: " + c.version_problem("1.20"),
        ),
        (
            dict(rayVersion="2.51.9"),
            "ray-efa-eks:rayTokenAuth = True is invalid: needs Ray >= 2.52 (rayVersion is "
            "2.51.9); use a newer dlcImage/rayVersion or set rayTokenAuth: false",
        ),
        (
            dict(clusterAdminArns=[ARN, ARN + "z"], clusterViewerArns=[ARN + "z", ARN]),
            "ray-efa-eks:clusterViewerArns = "
            f"'{ARN}' is invalid: is also in clusterAdminArns (one access entry per principal; admin already includes view): "
            "list it in one of the two",
        ),
        (
            dict(gpuRootVolumeGiB=100, gpuRootVolumeIops=50001),
            "ray-efa-eks:gpuRootVolumeIops = 50001 is invalid: EC2 "
            "refuses gp3 IOPS 50001 on 100 GiB is above 500 IOPS per GiB (at most 50000) "
            "(https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html); lower gpuRootVolumeIops or raise "
            "gpuRootVolumeGiB to at least 101",
        ),
        (
            dict(gpuRootVolumeIops=7999, gpuRootVolumeThroughputMiBps=2000),
            "ray-efa-eks:gpuRootVolumeThroughputMiBps = 2000 "
            "is invalid: EC2 refuses gp3 throughput 2000 MiB/s with 7999 IOPS is above 0.25 MiB/s per provisioned IOPS (at "
            "most 1999 MiB/s; 2000 needs 8000 IOPS) (https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html); "
            "lower gpuRootVolumeThroughputMiBps or raise gpuRootVolumeIops to at least 8000",
        ),
        (
            dict(endpointPublicAccessCidrs=[]),
            "ray-efa-eks:endpointPublicAccessCidrs = [] is invalid: is empty while "
            "endpointPublicAccess is true; list CIDRs or set endpointPublicAccess: false",
        ),
    ],
)
def test_each_refusal_in_full(kw, message):
    with pytest.raises(ConfigError) as e:
        StackConfig(**kw).validate()
    assert str(e.value) == message


def test_gpu_type_without_efa_in_full(monkeypatch):
    from ray_efa_eks.components.nodes.instances import InstanceType

    monkeypatch.setitem(c.CATALOGUE, "g4dn.xlarge", InstanceType("g4dn.xlarge", 4, 16384, 1, "T4", 15360, False, 0, 1))
    with pytest.raises(ConfigError) as e:
        StackConfig(gpuInstanceType="g4dn.xlarge").validate()
    # the one whole message pinned: its form (namespaced key = value is invalid: fix) is what every refusal says
    assert str(e.value) == (
        "ray-efa-eks:gpuInstanceType = 'g4dn.xlarge' is invalid: does not support EFA; pick an EFA "
        "type or set efa: false"
    )
    StackConfig(gpuInstanceType="g4dn.xlarge", efa=False).validate()


def test_the_iops_refusal_rounds_the_least_size_up():
    """60000 IOPS need 120 GiB exactly; 60001 need 121 (a ceiling, never a fraction)."""
    for iops, gib in ((60000, 120), (60001, 121)):
        with pytest.raises(ConfigError) as e:
            StackConfig(gpuRootVolumeGiB=100, gpuRootVolumeIops=iops).validate()
        assert str(e.value).endswith(f"raise gpuRootVolumeGiB to at least {gib}")


@pytest.mark.parametrize(
    "kw, message",
    [
        # a list whose item is refused names the item; an item that is None still shows the list, never "is not set"
        (
            dict(endpointPublicAccessCidrs=["203.0.113.0/24", "::/0"]),
            "ray-efa-eks:endpointPublicAccessCidrs = '::/0' is "
            "invalid: is IPv6: EKS takes no IPv6 CIDR blocks for the public endpoint of an IPv4 cluster (EKS API "
            "VpcConfigRequest.publicAccessCidrs), and this cluster is IPv4; list IPv4 CIDRs such as 203.0.113.0/24",
        ),
        (
            dict(clusterAdminArns=[None]),
            "ray-efa-eks:clusterAdminArns = [None] is invalid: must be an IAM role or user ARN "
            "such as arn:aws:iam::123456789012:role/platform-admins",
        ),
        (dict(gpuNodeCount=-1), "ray-efa-eks:gpuNodeCount = -1 is invalid: must be >= 0 (0 parks the GPU nodes)"),
    ],
)
def test_a_grammar_refusal_in_validate_names_the_offending_value(kw, message):
    with pytest.raises(ConfigError) as e:
        StackConfig(**kw).validate()
    assert str(e.value) == message


@pytest.mark.parametrize(
    "values, message",
    [
        (
            {"gpuWorkersToDelete": [True]},
            "ray-efa-eks:gpuWorkersToDelete = True is invalid: must be text, not bool; "
            "must be a DNS-1123 subdomain: lowercase labels of letters, digits and '-' joined by '.', e.g. ray-train",
        ),
        (
            {"gpuWorkersToDelete": [None]},
            "ray-efa-eks:gpuWorkersToDelete = [None] is invalid: must be text, not NoneType; "
            "must be a DNS-1123 subdomain: lowercase labels of letters, digits and '-' joined by '.', e.g. ray-train",
        ),
        ({"gpuNodeCount": "two"}, "ray-efa-eks:gpuNodeCount = 'two' is invalid: must be a whole number, e.g. 2"),
    ],
)
def test_a_refusal_while_reading_names_the_offending_value(values, message):
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping(values)
    assert str(e.value) == message


def test_an_unknown_key_names_the_nearest_and_every_known_key():
    known = ", ".join(sorted(k for k in c.KEYS if k != "region"))
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({"gpuNodeCont": 2})
    assert (e.value.key, e.value.value) == ("gpuNodeCont", 2)
    assert "unknown key; did you mean gpuNodeCount?" in e.value.fix and f"(known keys: {known})" in e.value.fix
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({"zzzz": 2})
    assert e.value.key == "zzzz" and "did you mean" not in e.value.fix and f"(known keys: {known})" in e.value.fix
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({"region": "eu-west-1"})  # the region is aws:region, never a key of ours
    assert e.value.key == "region" and "unknown key" in e.value.fix


def test_token_auth_reads_only_major_minor_of_a_release_candidate():
    """rayVersion 2.59.0rc1 passes its grammar; the Ray >= 2.52 rule compares (2, 59), never the patch "0rc1"."""
    StackConfig(rayTokenAuth=True, rayVersion="2.59.0rc1").validate()


@pytest.mark.parametrize(
    "key, want",
    [
        ("efa", v.Bool()),
        ("gpuNodeCount", v.Int(-(2**31), 2**31 - 1, example=2)),
        ("efaCheckMinBusbwGbps", v.Float(-1e300, 1e300, example=0.0)),
        ("clusterAdminArns", v.ListOf()),
        ("availabilityZone", v.OrUnset(inner=v.Text())),
        ("gpuInstanceType", v.Text()),
    ],
)
def test_the_fallback_grammar_in_full(monkeypatch, key, want):
    """A key without a GRAMMARS entry gets exactly the plain grammar of its default's type: an Int bounded to 32 bits
    with the default as its example, an unbounded-in-practice Float, a list of text, unset-or-text."""
    monkeypatch.delitem(c.GRAMMARS, key)
    assert c.grammar(key) == want
    assert c.grammar("noSuchKey") == v.OrUnset(inner=v.Text())


def test_from_pulumi_defaults_the_region_to_us_east_1(monkeypatch):
    from pulumi.runtime import config as rc

    monkeypatch.setattr(rc, "get_config_env", lambda: {})
    token = rc.CONFIG.set({"ray-efa-eks:gpuNodeCount": "0"})
    try:
        cfg = StackConfig.from_pulumi()
    finally:
        rc.CONFIG.reset(token)
    assert cfg.region == "us-east-1" and cfg.gpuNodeCount == 0


def test_a_namespace_three_quarters_like_ours_is_still_meant_for_us():
    """difflib's ratio 2*M/T: 'ray-efa-exxxx' (13 characters) shares 9 with 'ray-efa-eks' (11): 18/24 = 0.75, the
    threshold itself, is warned; one character less in common ('ray-efa-xxxxx', 8: 16/24) is another namespace."""
    import difflib

    assert difflib.SequenceMatcher(None, "ray-efa-exxxx", c.NAMESPACE).ratio() == 0.75
    assert dict(c.unread_keys(["ray-efa-exxxx:zzz", "ray-efa-xxxxx:zzz"])) == {
        "ray-efa-exxxx:zzz": "namespace 'ray-efa-exxxx' is not 'ray-efa-eks'; did you mean ray-efa-eks:zzz?"
    }


def test_a_namespace_in_capitals_is_compared_in_lowercase():
    assert dict(c.unread_keys(["RAY-EFA-EK:efaa"])) == {
        "RAY-EFA-EK:efaa": "namespace 'RAY-EFA-EK' is not 'ray-efa-eks'; did you mean ray-efa-eks:efa?"
    }


RG = "arn:aws:resource-groups:{}:123456789012:group/odcr-pool"


def test_validate_hands_capacity_every_argument_it_judges():
    """The passing side of the capacity rows of ``test_each_rule_names_its_key_and_fix``: a reservation's placement
    group, and a resource group of the stack's own region (its AZ's region too)."""
    odcr = dict(gpuCapacity="reservation", availabilityZone="us-east-1a")
    StackConfig(**odcr, gpuCapacityReservationId=RG.format("us-east-1")).validate()
    StackConfig(**odcr, gpuCapacityReservationId=CR, gpuPlacementGroupName="pg-1").validate()
    eu = StackConfig(
        **{**odcr, "availabilityZone": "eu-west-1a"},
        region="eu-west-1",
        gpuCapacityReservationId=RG.format("eu-west-1"),
    )
    eu.validate()


@pytest.mark.parametrize(
    "key, fix", [("gpuInstanceTipe", "unknown key; did you mean gpuInstanceType?"), ("qqqq", "unknown key")]
)
def test_an_unknown_key_is_refused_with_the_nearest_known_one(key, fix):
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({key: "1"})
    assert e.value.key == key and f"is invalid: {fix} (known keys: " in str(e.value)
