"""Every condition of every AWS rule (tools/aws_rules.py) with its outcome asserted, called directly.

test_aws_rules.py proves each rule through the offline runner with a real program; here each rule function gets the
smallest inputs that reach one condition, and the test asserts what it answers (the problem's key words, or None),
so branch coverage and mutation testing see the decision itself. No Pulumi engine: milliseconds.
"""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

import pytest

from ray_efa_eks.tools import aws_rules as ar
from ray_efa_eks.tools.aws_rules import Account, AwsRejected


def rec(type_: str, name: str, **inputs):
    return SimpleNamespace(type=type_, name=name, inputs=inputs)


def acct_with(*records, **kw) -> Account:
    by_id = {r.name: r for r in records}
    return Account(resources_by_id=by_id.get, **kw)


def lt(**inputs):
    return rec(ar.LAUNCH_TEMPLATE, "lt", **inputs)


def mng(**inputs):
    return {"launchTemplate": {"id": "lt", "version": "1"}, **inputs}


# -- helpers ---------------------------------------------------------------------------------------------------------

def test_types_keeps_only_non_empty_strings_of_a_list():
    assert ar._types(["a", "", 3, None, "b"]) == ["a", "b"]
    assert ar._types("g6.12xlarge") == []  # not a list: nothing
    assert ar._types(None) == []
    assert ar._types([]) == []


def test_template_is_found_only_through_a_launch_template_id():
    t = lt(instanceType="g6.12xlarge")
    a = acct_with(t, rec(ar.SUBNET, "sub"))
    assert ar._template({"launchTemplate": {"id": "lt"}}, a) is t
    assert ar._template({"launchTemplate": {"id": "sub"}}, a) is None  # an id of another type
    assert ar._template({"launchTemplate": {"id": "nope"}}, a) is None  # unknown id
    assert ar._template({"launchTemplate": {}}, a) is None  # no id
    assert ar._template({"launchTemplate": "lt"}, a) is None  # not a mapping
    assert ar._template({}, a) is None


def test_account_cluster_prefers_this_runs_request_then_the_world():
    live, pending = object(), object()
    world = SimpleNamespace(clusters={"ray": live})
    assert Account(world=world).cluster("ray") is live
    assert Account(world=world, pending_clusters={"ray": pending}).cluster("ray") is pending
    assert Account(world=world).cluster("other") is None
    assert Account().cluster("ray") is None  # nothing deployed before
    assert Account().resources_by_id("x") is None and Account().by_urn("u") is None


def test_rule_line_and_rejection_name_the_rule_and_its_source():
    rule = ar.RULES[0]
    assert rule.line() == (f"[{rule.id}] {rule.service} refuses {rule.refuses} ({rule.source_title}: "
                           f"{rule.source_url})")
    e = AwsRejected(rule, "eks:index:ManagedNodeGroup gpu", "the problem")
    assert (e.rule, e.resource, e.problem) == (rule, "eks:index:ManagedNodeGroup gpu", "the problem")
    assert str(e) == (f"EKS would refuse eks:index:ManagedNodeGroup gpu: the problem [aws-rule {rule.id}; source: "
                      f"{rule.source_title} <{rule.source_url}>]")
    assert ar.RULE_IDS == tuple(r.id for r in ar.RULES) and len(set(ar.RULE_IDS)) == len(ar.RULES)


# -- capacity blocks and instance types ------------------------------------------------------------------------------

def test_capacity_block_type_each_condition():
    with_type, without = acct_with(lt(instanceType="p5.48xlarge")), acct_with(lt())
    assert ar._capacity_block_type("g", mng(capacityType="ON_DEMAND", instanceTypes=["p5.48xlarge"]), without) is None
    p = ar._capacity_block_type("g", mng(capacityType="CAPACITY_BLOCK", instanceTypes=["p5.48xlarge"]), with_type)
    assert p and "instanceTypes ['p5.48xlarge']" in p and "launch template only" in p
    p = ar._capacity_block_type("g", {"capacityType": "CAPACITY_BLOCK"}, with_type)
    assert p == "capacityType CAPACITY_BLOCK needs a custom launch template"
    p = ar._capacity_block_type("g", mng(capacityType="CAPACITY_BLOCK"), without)
    assert p == "capacityType CAPACITY_BLOCK and launch template lt has no instanceType"
    assert ar._capacity_block_type("g", mng(capacityType="CAPACITY_BLOCK"), with_type) is None
    assert ar._capacity_block_type("g", mng(capacityType="CAPACITY_BLOCK", instanceTypes=[]), with_type) is None


def test_type_in_one_place_each_condition():
    a = acct_with(lt(instanceType="g6.12xlarge"))
    p = ar._type_in_one_place("g", mng(instanceTypes=["g6.12xlarge"]), a)
    assert p == ("instance type both in launch template lt (g6.12xlarge) and in the node group's instanceTypes "
                 "['g6.12xlarge']")
    assert ar._type_in_one_place("g", mng(), a) is None  # only in the template
    assert ar._type_in_one_place("g", mng(instanceTypes=["g6.12xlarge"]), acct_with(lt())) is None  # only the group
    assert ar._type_in_one_place("g", {"instanceTypes": ["g6.12xlarge"]}, a) is None  # no template


def test_no_subnet_in_template_names_the_card_of_each_interface_with_a_subnet():
    assert ar._no_subnet_in_template("g", {}, acct_with()) is None
    assert ar._no_subnet_in_template("g", mng(), acct_with(lt())) is None
    nis = [{"networkCardIndex": 0}, {"subnetId": "subnet-1"}, "junk", {"networkCardIndex": 3, "subnetId": "s"}]
    p = ar._no_subnet_in_template("g", mng(), acct_with(lt(networkInterfaces=nis)))
    assert p == "launch template lt sets SubnetId on network interface(s) of card [1, 3]"  # index when no card
    assert ar._no_subnet_in_template("g", mng(), acct_with(lt(networkInterfaces=[{"networkCardIndex": 0}]))) is None


@pytest.mark.parametrize("top", ["vpcSecurityGroupIds", "securityGroupNames"])
def test_top_level_security_groups_next_to_interfaces(top):
    ni = [{"networkCardIndex": 0, "securityGroups": ["sg-1"]}]
    p = ar._no_top_level_sgs_with_interfaces("g", mng(), acct_with(lt(networkInterfaces=ni, **{top: ["sg-2"]})))
    assert p == (f"launch template lt has network interfaces and top-level {top}: put the security groups on the "
                 "interfaces")
    both = lt(networkInterfaces=ni, vpcSecurityGroupIds=["a"], securityGroupNames=["b"])
    assert "top-level vpcSecurityGroupIds, securityGroupNames:" in ar._no_top_level_sgs_with_interfaces(
        "g", mng(), acct_with(both))
    assert ar._no_top_level_sgs_with_interfaces("g", mng(), acct_with(lt(networkInterfaces=ni))) is None
    assert ar._no_top_level_sgs_with_interfaces("g", mng(), acct_with(lt(**{top: ["sg-2"]}))) is None  # no interfaces
    assert ar._no_top_level_sgs_with_interfaces("g", {}, acct_with()) is None  # no template


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


MIME = ('MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n--B\nContent-Type: text/x-shellscript\n\n'
        'echo hi\n--B--\n')


def test_user_data_mime_each_condition():
    assert ar._user_data_mime("g", {}, acct_with()) is None  # no template
    assert ar._user_data_mime("g", mng(), acct_with(lt())) is None  # no user data
    plain_script = _b64("#!/bin/bash\necho hi\n")
    assert ar._user_data_mime("g", mng(), acct_with(lt(userData=plain_script, imageId="ami-1"))) is None  # own AMI
    assert ar._user_data_mime("g", mng(), acct_with(lt(userData=_b64(MIME)))) is None
    p = ar._user_data_mime("g", mng(), acct_with(lt(userData=plain_script)))
    assert p == "launch template lt's user data is not a MIME multi-part archive (EKS merges it with its own bootstrap)"
    assert ar._user_data_mime("g", mng(), acct_with(lt(userData="not base64!"))) == "launch template lt's userData is not base64"
    assert ar._user_data_mime("g", mng(), acct_with(lt(userData=base64.b64encode(b"\xff\xfe").decode()))) == (
        "launch template lt's userData is not base64")  # base64 of bytes that are not text


# -- gp3 volumes -----------------------------------------------------------------------------------------------------

def test_whole_reads_the_engines_numbers_only():
    assert ar._whole(3000) == 3000 and ar._whole(3000.0) == 3000 and ar._whole(" 125 ") == 125
    assert ar._whole(True) is None and ar._whole(False) is None  # a bool is not a number here
    assert ar._whole(3000.5) is None and ar._whole("3e3") is None and ar._whole("-5") is None
    assert ar._whole(None) is None and ar._whole([1]) is None


def vol(**ebs):
    return {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": ebs}]}


def test_gp3_volumes_each_condition():
    assert ar._gp3_volumes("lt", {}, acct_with()) is None
    assert ar._gp3_volumes("lt", {"blockDeviceMappings": ["junk", {"deviceName": "x"}, {"ebs": "x"}]},
                           acct_with()) is None  # no ebs mapping: nothing to judge
    assert ar._gp3_volumes("lt", vol(volumeType="gp2", volumeSize=100), acct_with()) is None
    assert ar._gp3_volumes("lt", vol(volumeType="gp2", throughput=125), acct_with()) == (
        "/dev/xvda: throughput is for gp3 volumes only (volumeType 'gp2')")
    assert ar._gp3_volumes("lt", {"blockDeviceMappings": [{"ebs": {"throughput": 125}}]}, acct_with()) == (
        "?: throughput is for gp3 volumes only (volumeType None)")
    assert ar._gp3_volumes("lt", vol(volumeType="gp3", volumeSize=100, iops=3000, throughput=125), acct_with()) is None
    assert ar._gp3_volumes("lt", vol(volumeType="gp3", volumeSize=100, iops=2999.0), acct_with()) == (
        "/dev/xvda: gp3 IOPS 2999 is outside 3000..80000")
    # per-GiB ratio: 100 GiB allows 50,000 IOPS, not 50,001
    assert ar._gp3_volumes("lt", vol(volumeType="gp3", volumeSize=100, iops=50000), acct_with()) is None
    assert "above 500 IOPS per GiB" in ar._gp3_volumes("lt", vol(volumeType="gp3", volumeSize=100, iops=50001),
                                                       acct_with())
    # no size (the AMI snapshot's): the ratio cannot be judged, the range still is
    assert ar._gp3_volumes("lt", vol(volumeType="gp3", iops=80000), acct_with()) is None
    assert ar._gp3_volumes("lt", vol(volumeType="gp3", iops=80001), acct_with()) == (
        "/dev/xvda: gp3 IOPS 80001 is outside 3000..80000")
    # the first bad mapping is named; a good one before it is passed over
    two = {"blockDeviceMappings": [{"deviceName": "a", "ebs": {"volumeType": "gp3", "volumeSize": 10}},
                                   {"deviceName": "b", "ebs": {"volumeType": "gp3", "throughput": 2001}}]}
    assert ar._gp3_volumes("lt", two, acct_with()).startswith("b: gp3 throughput 2001 MiB/s is outside")


# -- clusters and access entries -------------------------------------------------------------------------------------

def test_eks_unsupported_zone_ids_per_region():
    assert ar.eks_unsupported_zone_ids("us-east-1") == frozenset({"use1-az3"})
    assert ar.eks_unsupported_zone_ids("eu-west-1") == frozenset()


def sub(name, az):
    return rec(ar.SUBNET, name, availabilityZone=az)


def test_cluster_subnets_in_azs_each_condition():
    subs = [sub("local", "us-east-1-bos-1a"), sub("az3", "us-east-1c"), sub("ok", "us-east-1b"), sub("noaz", None),
            rec(ar.LAUNCH_TEMPLATE, "notsub", availabilityZone="us-east-1-bos-1a")]
    a = acct_with(*subs, zone_types={"us-east-1-bos-1a": "local-zone", "us-east-1b": "availability-zone",
                                     "us-east-1c": "availability-zone"},
                  zone_ids={"us-east-1c": "use1-az3", "us-east-1b": "use1-az2"}, region="us-east-1")
    assert ar._cluster_subnets_in_azs("eks", {"privateSubnetIds": ["ok", "noaz", "notsub", "unknown"]}, a) is None
    p = ar._cluster_subnets_in_azs("eks", {"publicSubnetIds": ["local"], "privateSubnetIds": ["ok"],
                                           "subnetIds": ["az3"]}, a)
    assert p == ("cluster subnets outside availability zones EKS supports: local in us-east-1-bos-1a (local-zone), "
                 "az3 in us-east-1c, zone ID use1-az3, where EKS creates no control plane "
                 "(UnsupportedAvailabilityZoneException)")
    # the same zone ID in another region is supported; an AZ with no known type is judged by its zone ID alone
    other = acct_with(sub("az3", "us-east-1c"), zone_ids={"us-east-1c": "use1-az3"}, region="eu-west-1")
    assert ar._cluster_subnets_in_azs("eks", {"subnetIds": ["az3"]}, other) is None
    untyped = acct_with(sub("az3", "us-east-1c"), zone_ids={"us-east-1c": "use1-az3"}, region="us-east-1")
    assert "zone ID use1-az3" in ar._cluster_subnets_in_azs("eks", {"subnetIds": ["az3"]}, untyped)


def cluster_world(entries: dict, creator="arn:aws:iam::1:role/creator"):
    c = SimpleNamespace(entries=entries, creator_arn=creator)
    return SimpleNamespace(clusters={"ray": c})


def test_one_entry_per_principal_each_condition():
    me = "urn:pulumi:dev::p::aws:eks/accessEntry:AccessEntry::mine"
    inputs = {"principalArn": "arn:aws:iam::1:role/admin", "clusterName": "ray"}
    assert ar._one_entry_per_principal("e", inputs, Account()) is None  # no cluster known
    assert ar._one_entry_per_principal("e", inputs, Account(world=cluster_world({}))) is None  # no entry yet
    own = Account(world=cluster_world({"arn:aws:iam::1:role/admin": me}), urn=me)
    assert ar._one_entry_per_principal("e", inputs, own) is None  # its own: an update
    other = Account(world=cluster_world({"arn:aws:iam::1:role/admin": "urn:pulumi:dev::p::x::theirs"}), urn=me)
    assert ar._one_entry_per_principal("e", inputs, other) == (
        "an access entry for arn:aws:iam::1:role/admin on cluster ray, which already has one (the entry theirs made):"
        " CreateAccessEntry answers 409 ResourceInUseException")
    creator = Account(world=cluster_world({"arn:aws:iam::1:role/admin": None}), urn=me)
    p = ar._one_entry_per_principal("e", inputs, creator)
    assert "EKS's own entry for the principal that created the cluster" in p
    assert "created by arn:aws:iam::1:role/creator" in p and p.endswith("409 ResourceInUseException")


def test_cluster_version_step_each_condition():
    world = SimpleNamespace(clusters={"ray": SimpleNamespace(version="1.33")})
    assert ar._cluster_version_step("ray", {"version": "1.35"}, Account()) is None  # nothing deployed
    assert ar._cluster_version_step("new", {"version": "1.35"}, Account(world=world)) is None  # not live
    assert ar._cluster_version_step("ray", {"version": None}, Account(world=world)) is None
    assert ar._cluster_version_step("ray", {"version": ""}, Account(world=world)) is None
    assert ar._cluster_version_step("ray", {"version": "1.34"}, Account(world=world)) is None  # one step
    assert "one minor version at a time" in ar._cluster_version_step("ray", {"version": "1.35"}, Account(world=world))
    # the live cluster is found by its EKS name first, the resource name otherwise
    assert "cannot downgrade" in ar._cluster_version_step("res", {"name": "ray", "version": "1.32"},
                                                          Account(world=world))


def test_version_key():
    assert ar._version_key("1.34") == (1, 34) and ar._version_key("1.34.2") == (1, 34)
    assert ar._version_key(1.3) == (1, 3)
    assert ar._version_key("latest") == ()


def test_node_group_not_above_control_plane_each_condition():
    plane = rec(ar.EKS_CLUSTER, "eks", version="1.34")
    urns = {"urn:eks": plane}
    a = Account(by_urn=urns.get)
    ref = SimpleNamespace(urn="urn:eks")
    assert ar._node_group_not_above_control_plane("g", {"version": "1.35", "cluster": ref}, a) == (
        "node group version 1.35 is newer than the control plane's 1.34")
    assert ar._node_group_not_above_control_plane("g", {"version": "1.35", "cluster": "urn:eks"}, a) == (
        "node group version 1.35 is newer than the control plane's 1.34")  # a plain URN
    assert ar._node_group_not_above_control_plane("g", {"version": "1.34", "cluster": ref}, a) is None  # equal
    assert ar._node_group_not_above_control_plane("g", {"version": "1.33", "cluster": ref}, a) is None  # older
    assert ar._node_group_not_above_control_plane("g", {"version": "1.35", "cluster": "ray"}, a) is None  # unknown
    assert ar._node_group_not_above_control_plane("g", {"cluster": ref}, a) is None  # no version asked
    assert ar._node_group_not_above_control_plane("g", {"version": "x", "cluster": ref}, a) is None  # unreadable
    odd = Account(by_urn={"u": rec(ar.EKS_CLUSTER, "eks", version="new")}.get)
    assert ar._node_group_not_above_control_plane("g", {"version": "1.35", "cluster": "u"}, odd) is None
    unset = Account(by_urn={"u": rec(ar.EKS_CLUSTER, "eks")}.get)
    assert ar._node_group_not_above_control_plane("g", {"version": "1.35", "cluster": "u"}, unset) is None


# -- Pod Identity trust ----------------------------------------------------------------------------------------------

def st(effect="Allow", service="pods.eks.amazonaws.com", actions=("sts:AssumeRole", "sts:TagSession"), cond=None):
    out = {"Effect": effect, "Principal": {"Service": service}, "Action": list(actions)}
    if cond is not None:
        out["Condition"] = cond
    return out


def test_pod_identity_statements_each_shape():
    good = st()
    assert ar.pod_identity_statements(None) == [] and ar.pod_identity_statements({"Statement": []}) == []
    assert ar.pod_identity_statements("{not json") == []
    assert ar.pod_identity_statements("[1]") == []  # not an object
    assert ar.pod_identity_statements(json.dumps({"Statement": good})) == [good]  # one statement, not a list
    assert ar.pod_identity_statements(json.dumps({"Statement": [good, "junk", st(effect="Deny"),
                                                                st(service="ec2.amazonaws.com")]})) == [good]
    listed = st(service=["ec2.amazonaws.com", "pods.eks.amazonaws.com"])
    assert ar.pod_identity_statements(json.dumps({"Statement": [listed]})) == [listed]
    aws_principal = {"Effect": "Allow", "Principal": "*", "Action": "sts:AssumeRole"}
    assert ar.pod_identity_statements(json.dumps({"Statement": [aws_principal, {"Effect": "Allow"}]})) == []
    assert ar.pod_identity_statements(json.dumps({"Version": "2012-10-17"})) == []


def test_condition_keys_required_only_skips_ifexists_and_null():
    s = st(cond={"StringEquals": {"aws:SourceAccount": "1"}, "StringEqualsIfExists": {"aws:RequestTag/x": "y"},
                 "Null": {"aws:RequestTag/z": "false"}, "Bool": None})
    assert ar.condition_keys(s) == {"aws:sourceaccount", "aws:requesttag/x", "aws:requesttag/z"}
    assert ar.condition_keys(s, required_only=True) == {"aws:sourceaccount"}
    assert ar.condition_keys(st()) == set()


def trust(*sts) -> dict:
    return {"assumeRolePolicy": json.dumps({"Version": "2012-10-17", "Statement": list(sts)})}


def test_pod_identity_trust_each_condition():
    a = Account()
    assert ar._pod_identity_trust("r", trust(st()), a) is None
    assert ar._pod_identity_trust("r", {}, a) is None
    assert ar._pod_identity_trust("r", trust(st(actions=("sts:AssumeRole",))), a) == (
        "a Pod Identity trust statement without ['sts:TagSession']")
    assert ar._pod_identity_trust("r", trust(st(actions=()), ), a) == (
        "a Pod Identity trust statement without ['sts:AssumeRole', 'sts:TagSession']")
    one = st()
    one["Action"] = "sts:AssumeRole"  # a string, not a list
    assert ar._pod_identity_trust("r", trust(one), a) == "a Pod Identity trust statement without ['sts:TagSession']"
    assert ar._pod_identity_trust("r", trust(st(actions=("sts:*",))), a) is None
    assert ar._pod_identity_trust("r", trust(st(actions=("*",))), a) is None
    known = st(cond={"StringEquals": {"aws:RequestTag/kubernetes-namespace": "ray",
                                      "aws:SourceAccount": "123456789012"}})
    assert ar._pod_identity_trust("r", trust(known), a) is None
    unknown = st(cond={"StringEquals": {"aws:RequestTag/team": "ml"}})
    p = ar._pod_identity_trust("r", trust(unknown), a)
    assert p.startswith("the trust policy requires session tag(s) ['aws:requesttag/team'], which EKS Pod Identity "
                        "never adds") and "kubernetes-pod-uid" in p
    optional = st(cond={"StringEqualsIfExists": {"aws:RequestTag/team": "ml"}})
    assert ar._pod_identity_trust("r", trust(optional), a) is None
    # a later statement is judged too
    assert ar._pod_identity_trust("r", trust(st(), unknown), a).startswith("the trust policy requires")


# -- check() and problems() ------------------------------------------------------------------------------------------

def test_check_raises_for_the_first_broken_rule_of_the_resource_type_only():
    a = acct_with(lt(instanceType="g6.12xlarge"))
    bad = mng(capacityType="CAPACITY_BLOCK", instanceTypes=["g6.12xlarge"])
    with pytest.raises(AwsRejected) as e:
        ar.check(ar.MNG, "gpu", bad, a)
    assert e.value.rule.id == "capacity-block-type-in-template" and e.value.resource == f"{ar.MNG} gpu"
    assert [r.id for r, _ in ar.problems(ar.MNG, "gpu", bad, a)] == ["capacity-block-type-in-template",
                                                                   "instance-type-in-one-place"]
    # the same inputs under another type: no rule of that type applies
    assert ar.check(ar.IAM_ROLE, "gpu", bad, a) is None
    assert ar.problems(ar.IAM_ROLE, "gpu", bad, a) == []
    assert ar.check(ar.MNG, "gpu", mng(), a) is None and ar.problems(ar.MNG, "gpu", mng(), a) == []


# -- what a mutation tool found unasserted (mutmut survivors) ----------------------------------------------

def test_capacity_block_type_in_the_group_is_named_with_the_fix():
    p = ar._capacity_block_type("g", mng(capacityType="CAPACITY_BLOCK", instanceTypes=["p5.48xlarge"]),
                                acct_with(lt(instanceType="p5.48xlarge")))
    assert p == ("capacityType CAPACITY_BLOCK with instanceTypes ['p5.48xlarge'] on the node group: the instance type "
                 "belongs in the launch template only")


def test_no_subnet_in_template_names_the_card_not_the_position():
    nis = [{"networkCardIndex": 2}, {"networkCardIndex": 5, "subnetId": "s"}]
    p = ar._no_subnet_in_template("g", mng(), acct_with(lt(networkInterfaces=nis)))
    assert p == "launch template lt sets SubnetId on network interface(s) of card [5]"


def test_user_data_with_a_character_outside_base64_is_refused():
    """EC2 takes userData as base64 text: a stray character is not base64, even where a lenient decoder would skip it
    and find a valid archive."""
    assert ar._user_data_mime("g", mng(), acct_with(lt(userData=_b64(MIME) + "!"))) == (
        "launch template lt's userData is not base64")


def test_gp3_volumes_judge_the_mappings_after_one_they_pass_over():
    bad = {"deviceName": "/dev/xvdb", "ebs": {"volumeType": "gp3", "iops": 2999}}
    after_junk = {"blockDeviceMappings": ["junk", {"deviceName": "x"}, bad]}
    assert ar._gp3_volumes("lt", after_junk, acct_with()) == "/dev/xvdb: gp3 IOPS 2999 is outside 3000..80000"
    after_gp2 = {"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeType": "gp2"}}, bad]}
    assert ar._gp3_volumes("lt", after_gp2, acct_with()) == "/dev/xvdb: gp3 IOPS 2999 is outside 3000..80000"


def test_one_entry_per_principal_names_the_creators_entry():
    inputs = {"principalArn": "arn:aws:iam::1:role/admin", "clusterName": "ray"}
    creator = Account(world=cluster_world({"arn:aws:iam::1:role/admin": None}), urn="urn:mine")
    assert ar._one_entry_per_principal("e", inputs, creator) == (
        "an access entry for arn:aws:iam::1:role/admin on cluster ray, which already has one (EKS's own entry for the "
        "principal that created the cluster (bootstrapClusterCreatorAdminPermissions, created by "
        "arn:aws:iam::1:role/creator)): CreateAccessEntry answers 409 ResourceInUseException")


def test_node_group_version_that_is_not_text_is_not_judged():
    """The engine records versions as strings; anything else (an unknown a preview hands over) is not read as a
    number, on either side."""
    a = Account(by_urn={"u": rec(ar.EKS_CLUSTER, "eks", version="1.34")}.get)
    assert ar._node_group_not_above_control_plane("g", {"version": 1.35, "cluster": "u"}, a) is None
    float_plane = Account(by_urn={"u": rec(ar.EKS_CLUSTER, "eks", version=1.33)}.get)
    assert ar._node_group_not_above_control_plane("g", {"version": "1.35", "cluster": "u"}, float_plane) is None


def test_pod_identity_trust_lists_the_tags_pod_identity_adds():
    p = ar._pod_identity_trust("r", trust(st(cond={"StringEquals": {"aws:RequestTag/team": "ml"}})), Account())
    assert p == ("the trust policy requires session tag(s) ['aws:requesttag/team'], which EKS Pod Identity never adds: "
                 "every AssumeRole is denied. The tags it adds: eks-cluster-arn, eks-cluster-name, "
                 "kubernetes-namespace, kubernetes-service-account, kubernetes-pod-name, kubernetes-pod-uid")


def test_check_reaches_the_rules_of_a_later_resource_type_and_says_the_problem():
    bad = trust(st(actions=("sts:AssumeRole",)))
    with pytest.raises(AwsRejected) as e:
        ar.check(ar.IAM_ROLE, "pods", bad, Account())
    assert e.value.rule.id == "pod-identity-trust" and e.value.resource == f"{ar.IAM_ROLE} pods"
    assert e.value.problem == "a Pod Identity trust statement without ['sts:TagSession']"
    assert str(e.value).startswith(f"IAM would refuse {ar.IAM_ROLE} pods: a Pod Identity trust statement without "
                                   "['sts:TagSession'] [aws-rule pod-identity-trust; source: ")


def test_cluster_subnets_in_azs_reads_the_private_subnets_too():
    a = acct_with(sub("local", "us-east-1-bos-1a"), zone_types={"us-east-1-bos-1a": "local-zone"})
    assert ar._cluster_subnets_in_azs("eks", {"privateSubnetIds": ["local"]}, a) == (
        "cluster subnets outside availability zones EKS supports: local in us-east-1-bos-1a (local-zone)")


def test_condition_keys_after_an_optional_operator_are_still_required():
    s = st(cond={"StringEqualsIfExists": {"aws:RequestTag/x": "y"}, "StringEquals": {"aws:RequestTag/team": "ml"}})
    assert ar.condition_keys(s, required_only=True) == {"aws:requesttag/team"}
    assert ar._pod_identity_trust("r", trust(s), Account()).startswith(
        "the trust policy requires session tag(s) ['aws:requesttag/team']")


def test_pod_identity_statements_after_one_that_lets_no_pod_in():
    good = st()
    assert ar.pod_identity_statements(json.dumps({"Statement": ["junk", st(effect="Deny"), good]})) == [good]


def test_check_and_problems_pass_the_resource_name_to_the_rules():
    """The control-plane version rule finds the live cluster by the resource's name when the inputs carry none."""
    world = SimpleNamespace(clusters={"ray": SimpleNamespace(version="1.33")})
    with pytest.raises(AwsRejected) as e:
        ar.check(ar.EKS_CLUSTER, "ray", {"version": "1.35"}, Account(world=world))
    assert e.value.rule.id == "one-minor-at-a-time" and "one minor version at a time" in e.value.problem
    assert [r.id for r, _ in ar.problems(ar.EKS_CLUSTER, "ray", {"version": "1.35"}, Account(world=world))] == [
        "one-minor-at-a-time"]
