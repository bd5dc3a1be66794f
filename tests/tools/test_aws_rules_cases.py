"""What EKS, EC2 and IAM refuse (tools/aws_rules.py): a table of requests, judged by the public entry points.

Each case is one registration as the offline runner hands it over (resource type, name, the engine's inputs and what
the account knows) and says which rules it breaks, in order, and fragments of the first problem. The case runs both
``problems()`` (every broken rule) and ``check()`` (the first, raised as :class:`AwsRejected` naming the resource,
the rule and its source). test_aws_rules.py proves the same rules through the runner with a real program; this table
reaches every condition of every rule in milliseconds.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from ray_efa_eks.tools.aws_rules import (
    ACCESS_ENTRY,
    EKS_CLUSTER,
    IAM_ROLE,
    LAUNCH_TEMPLATE,
    MNG,
    RULE_IDS,
    RULES,
    SUBNET,
    Account,
    AwsRejected,
    check,
    condition_keys,
    eks_unsupported_zone_ids,
    pod_identity_statements,
    problems,
)


def rec(type_: str, name: str, **inputs) -> SimpleNamespace:
    """A resource as the runner records it."""
    return SimpleNamespace(type=type_, name=name, inputs=inputs)


def holding(*records, **kw) -> Account:
    """An account whose earlier resources are ``records`` (found by their name as id)."""
    by_id = {r.name: r for r in records}
    return Account(resources_by_id=by_id.get, **kw)


def lt(**inputs) -> SimpleNamespace:
    return rec(LAUNCH_TEMPLATE, "lt", **inputs)


def mng(**inputs) -> dict[str, Any]:
    """A node group's inputs that use launch template ``lt``."""
    return {"launchTemplate": {"id": "lt", "version": "1"}, **inputs}


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


MIME = (
    'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n--B\nContent-Type: text/x-shellscript\n\n'
    'echo hi\n--B--\n'
)
SCRIPT = b64("#!/bin/bash\necho hi\n")


def vol(*mappings: dict) -> dict[str, Any]:
    return {"blockDeviceMappings": list(mappings)}


def ebs(device: str = "/dev/xvda", **e) -> dict[str, Any]:
    return {"deviceName": device, "ebs": e}


def sub(name: str, az: Any) -> SimpleNamespace:
    return rec(SUBNET, name, availabilityZone=az)


ZONES = holding(
    sub("local", "us-east-1-bos-1a"),
    sub("az3", "us-east-1c"),
    sub("ok", "us-east-1b"),
    sub("noaz", None),
    rec(LAUNCH_TEMPLATE, "notsub", availabilityZone="us-east-1-bos-1a"),
    zone_types={"us-east-1-bos-1a": "local-zone", "us-east-1b": "availability-zone", "us-east-1c": "availability-zone"},
    zone_ids={"us-east-1c": "use1-az3", "us-east-1b": "use1-az2"},
    region="us-east-1",
)

ADMIN = "arn:aws:iam::1:role/admin"
MINE = "urn:pulumi:dev::p::aws:eks/accessEntry:AccessEntry::mine"
ENTRY = {"principalArn": ADMIN, "clusterName": "ray"}


def with_entries(entries: dict, *, pending: bool = False, urn: str = MINE) -> Account:
    c = SimpleNamespace(entries=entries, creator_arn="arn:aws:iam::1:role/creator")
    if pending:  # the cluster as this run's registration asks for it, over an older one the account holds
        return Account(
            world=SimpleNamespace(clusters={"ray": SimpleNamespace(entries={}, creator_arn=None)}),
            pending_clusters={"ray": c},
            urn=urn,
        )
    return Account(world=SimpleNamespace(clusters={"ray": c}), urn=urn)


LIVE_133 = Account(world=SimpleNamespace(clusters={"ray": SimpleNamespace(version="1.33")}))


def plane(version: Any = "1.34", **kw) -> Account:
    """A run that registered control plane ``urn:eks`` at ``version`` (absent: None)."""
    inputs = {} if version is None else {"version": version}
    return Account(by_urn={"urn:eks": rec(EKS_CLUSTER, "eks", **inputs)}.get, **kw)


def st(
    effect="Allow", service="pods.eks.amazonaws.com", actions: Any = ("sts:AssumeRole", "sts:TagSession"), cond=None
) -> dict[str, Any]:
    out = {
        "Effect": effect,
        "Principal": {"Service": service},
        "Action": list(actions) if isinstance(actions, tuple) else actions,
    }
    if cond is not None:
        out["Condition"] = cond
    return out


def trust(*sts) -> dict[str, Any]:
    return {"assumeRolePolicy": json.dumps({"Version": "2012-10-17", "Statement": list(sts)})}


@dataclass
class Case:
    id: str
    type: str
    inputs: dict[str, Any]
    account: Account = field(default_factory=Account)
    broken: tuple[str, ...] = ()
    """The rules this request breaks, in the table's order (empty: AWS accepts it)."""
    says: tuple[str, ...] = ()
    """Fragments of the first rule's problem."""
    name: str = "gpu"


def ok(id: str, type_: str, inputs: dict, account: Account | None = None, name: str = "gpu") -> Case:
    return Case(id, type_, inputs, account or Account(), (), (), name)


def bad(
    id: str,
    type_: str,
    inputs: dict,
    account: Account | None,
    rule: str | tuple[str, ...],
    *says: str,
    name: str = "gpu",
) -> Case:
    return Case(id, type_, inputs, account or Account(), (rule,) if isinstance(rule, str) else rule, says, name)


P5 = holding(lt(instanceType="p5.48xlarge"))
NO_TYPE = holding(lt())
NI = [{"networkCardIndex": 0, "securityGroups": ["sg-1"]}]
LONG_TAGS = (
    "eks-cluster-arn, eks-cluster-name, kubernetes-namespace, kubernetes-service-account, "
    "kubernetes-pod-name, kubernetes-pod-uid"
)

CASES: list[Case] = [
    # -- capacity-block-type-in-template (and instance-type-in-one-place beside it) ------------------------------------
    ok("cb-on-demand-not-judged", MNG, mng(capacityType="ON_DEMAND", instanceTypes=["p5.48xlarge"]), NO_TYPE),
    bad(
        "cb-type-on-group-and-template",
        MNG,
        mng(capacityType="CAPACITY_BLOCK", instanceTypes=["p5.48xlarge"]),
        P5,
        ("capacity-block-type-in-template", "instance-type-in-one-place"),
        "capacityType CAPACITY_BLOCK with instanceTypes ['p5.48xlarge'] on the node group",
        "belongs in the launch template only",
    ),
    bad(
        "cb-type-on-group-only",
        MNG,
        mng(capacityType="CAPACITY_BLOCK", instanceTypes=["p5.48xlarge"]),
        NO_TYPE,
        "capacity-block-type-in-template",
        "with instanceTypes ['p5.48xlarge']",
    ),
    bad(
        "cb-no-template",
        MNG,
        {"capacityType": "CAPACITY_BLOCK"},
        P5,
        "capacity-block-type-in-template",
        "capacityType CAPACITY_BLOCK needs a custom launch template",
    ),
    bad(
        "cb-template-id-of-a-subnet",
        MNG,
        {"capacityType": "CAPACITY_BLOCK", "launchTemplate": {"id": "sub"}},
        holding(lt(instanceType="p5.48xlarge"), rec(SUBNET, "sub")),
        "capacity-block-type-in-template",
        "needs a custom launch template",
    ),
    bad(
        "cb-template-id-unknown",
        MNG,
        {"capacityType": "CAPACITY_BLOCK", "launchTemplate": {"id": "nope"}},
        P5,
        "capacity-block-type-in-template",
        "needs a custom launch template",
    ),
    bad(
        "cb-template-without-id",
        MNG,
        {"capacityType": "CAPACITY_BLOCK", "launchTemplate": {}},
        P5,
        "capacity-block-type-in-template",
        "needs a custom launch template",
    ),
    bad(
        "cb-template-not-a-mapping",
        MNG,
        {"capacityType": "CAPACITY_BLOCK", "launchTemplate": "lt"},
        P5,
        "capacity-block-type-in-template",
        "needs a custom launch template",
    ),
    bad(
        "cb-template-without-type",
        MNG,
        mng(capacityType="CAPACITY_BLOCK"),
        NO_TYPE,
        "capacity-block-type-in-template",
        "launch template lt has no instanceType",
    ),
    ok("cb-type-in-template", MNG, mng(capacityType="CAPACITY_BLOCK"), P5),
    ok("cb-empty-type-list", MNG, mng(capacityType="CAPACITY_BLOCK", instanceTypes=[]), P5),
    ok("cb-type-list-of-blanks", MNG, mng(capacityType="CAPACITY_BLOCK", instanceTypes=["", 3, None]), P5),
    ok("cb-types-not-a-list", MNG, mng(capacityType="CAPACITY_BLOCK", instanceTypes="p5.48xlarge"), P5),
    bad(
        "cb-types-keep-only-names",
        MNG,
        mng(capacityType="CAPACITY_BLOCK", instanceTypes=["", "a", 3, None, "b"]),
        NO_TYPE,
        "capacity-block-type-in-template",
        "instanceTypes ['a', 'b'] on the node group",
    ),
    # -- instance-type-in-one-place ------------------------------------------------------------------------------------
    bad(
        "type-in-both",
        MNG,
        mng(instanceTypes=["g6.12xlarge"]),
        holding(lt(instanceType="g6.12xlarge")),
        "instance-type-in-one-place",
        "both in launch template lt (g6.12xlarge)",
        "the node group's instanceTypes ['g6.12xlarge']",
    ),
    ok("type-in-template-only", MNG, mng(), holding(lt(instanceType="g6.12xlarge"))),
    ok("type-on-group-only", MNG, mng(instanceTypes=["g6.12xlarge"]), NO_TYPE),
    ok("type-on-group-no-template", MNG, {"instanceTypes": ["g6.12xlarge"]}, holding(lt(instanceType="g6.12xlarge"))),
    # -- no-subnet-in-launch-template ----------------------------------------------------------------------------------
    ok("subnet-no-template", MNG, {}, holding()),
    ok("subnet-no-interfaces", MNG, mng(), NO_TYPE),
    ok("subnet-interface-without-subnet", MNG, mng(), holding(lt(networkInterfaces=[{"networkCardIndex": 0}]))),
    bad(
        "subnet-named-by-card-else-position",
        MNG,
        mng(),
        holding(
            lt(
                networkInterfaces=[
                    {"networkCardIndex": 0},
                    {"subnetId": "subnet-1"},
                    "junk",
                    {"networkCardIndex": 3, "subnetId": "s"},
                ]
            )
        ),
        "no-subnet-in-launch-template",
        "launch template lt sets SubnetId on network interface(s) of card [1, 3]",
    ),
    bad(
        "subnet-card-not-position",
        MNG,
        mng(),
        holding(lt(networkInterfaces=[{"networkCardIndex": 2}, {"networkCardIndex": 5, "subnetId": "s"}])),
        "no-subnet-in-launch-template",
        "of card [5]",
    ),
    # -- interface-security-groups -------------------------------------------------------------------------------------
    bad(
        "sgs-ids-beside-interfaces",
        MNG,
        mng(),
        holding(lt(networkInterfaces=NI, vpcSecurityGroupIds=["sg-2"])),
        "interface-security-groups",
        "launch template lt has network interfaces and top-level vpcSecurityGroupIds:",
        "put the security groups on the interfaces",
    ),
    bad(
        "sgs-names-beside-interfaces",
        MNG,
        mng(),
        holding(lt(networkInterfaces=NI, securityGroupNames=["web"])),
        "interface-security-groups",
        "top-level securityGroupNames:",
    ),
    bad(
        "sgs-both-beside-interfaces",
        MNG,
        mng(),
        holding(lt(networkInterfaces=NI, vpcSecurityGroupIds=["a"], securityGroupNames=["b"])),
        "interface-security-groups",
        "top-level vpcSecurityGroupIds, securityGroupNames:",
    ),
    ok("sgs-on-interfaces-only", MNG, mng(), holding(lt(networkInterfaces=NI))),
    ok("sgs-top-level-no-interfaces", MNG, mng(), holding(lt(vpcSecurityGroupIds=["sg-2"]))),
    ok("sgs-no-template", MNG, {}, holding()),
    # -- user-data-mime-multipart --------------------------------------------------------------------------------------
    ok("mime-no-template", MNG, {}, holding()),
    ok("mime-no-user-data", MNG, mng(), NO_TYPE),
    ok("mime-own-ami-takes-any-form", MNG, mng(), holding(lt(userData=SCRIPT, imageId="ami-1"))),
    ok("mime-multipart", MNG, mng(), holding(lt(userData=b64(MIME)))),
    bad(
        "mime-plain-script",
        MNG,
        mng(),
        holding(lt(userData=SCRIPT)),
        "user-data-mime-multipart",
        "launch template lt's user data is not a MIME multi-part archive",
        "merges it with its own bootstrap",
    ),
    bad(
        "mime-not-base64",
        MNG,
        mng(),
        holding(lt(userData="not base64!")),
        "user-data-mime-multipart",
        "launch template lt's userData is not base64",
    ),
    bad(
        "mime-base64-of-binary",
        MNG,
        mng(),
        holding(lt(userData=b64(b"\xff\xfe"))),
        "user-data-mime-multipart",
        "userData is not base64",
    ),
    bad(
        "mime-stray-character",
        MNG,
        mng(),
        holding(lt(userData=b64(MIME) + "!")),
        "user-data-mime-multipart",
        "userData is not base64",
    ),  # a lenient decoder would skip it and find the archive; EC2 does not
    # -- gp3-limits ----------------------------------------------------------------------------------------------------
    ok("gp3-no-mappings", LAUNCH_TEMPLATE, {}, name="lt"),
    ok("gp3-no-ebs-mapping", LAUNCH_TEMPLATE, vol("junk", {"deviceName": "x"}, {"ebs": "x"}), name="lt"),
    ok("gp3-gp2-size", LAUNCH_TEMPLATE, vol(ebs(volumeType="gp2", volumeSize=100)), name="lt"),
    bad(
        "gp3-throughput-on-gp2",
        LAUNCH_TEMPLATE,
        vol(ebs(volumeType="gp2", throughput=" 125 ")),
        None,
        "gp3-limits",
        "/dev/xvda: throughput is for gp3 volumes only (volumeType 'gp2')",
        name="lt",
    ),
    bad(
        "gp3-throughput-no-type-no-device",
        LAUNCH_TEMPLATE,
        vol({"ebs": {"throughput": 125}}),
        None,
        "gp3-limits",
        "?: throughput is for gp3 volumes only (volumeType None)",
        name="lt",
    ),
    ok(
        "gp3-in-limits",
        LAUNCH_TEMPLATE,
        vol(ebs(volumeType="gp3", volumeSize=100, iops=3000, throughput=125)),
        name="lt",
    ),
    ok("gp3-engine-floats", LAUNCH_TEMPLATE, vol(ebs(volumeType="gp3", volumeSize=100.0, iops=3000.0)), name="lt"),
    bad(
        "gp3-iops-below",
        LAUNCH_TEMPLATE,
        vol(ebs(volumeType="gp3", volumeSize=100, iops=2999.0)),
        None,
        "gp3-limits",
        "/dev/xvda: gp3 IOPS 2999 is outside 3000..80000",
        name="lt",
    ),
    bad(
        "gp3-iops-text",
        LAUNCH_TEMPLATE,
        vol(ebs(volumeType="gp3", iops=" 2999 ")),
        None,
        "gp3-limits",
        "gp3 IOPS 2999 is outside",
        name="lt",
    ),
    # what is not a whole number is not judged: a bool, a fraction, an exponent, a sign, no value, a list
    *(
        ok(f"gp3-iops-not-read-{i}", LAUNCH_TEMPLATE, vol(ebs(volumeType="gp3", iops=v)), name="lt")
        for i, v in enumerate([True, False, 2999.5, "2e3", "-5", None, [1]])
    ),
    ok("gp3-500-per-gib-edge", LAUNCH_TEMPLATE, vol(ebs(volumeType="gp3", volumeSize=100, iops=50000)), name="lt"),
    bad(
        "gp3-above-500-per-gib",
        LAUNCH_TEMPLATE,
        vol(ebs(volumeType="gp3", volumeSize=100, iops=50001)),
        None,
        "gp3-limits",
        "gp3 IOPS 50001 on 100 GiB is above 500 IOPS per GiB",
        name="lt",
    ),
    ok("gp3-no-size-ratio-not-judged", LAUNCH_TEMPLATE, vol(ebs(volumeType="gp3", iops=80000)), name="lt"),
    bad(
        "gp3-no-size-range-judged",
        LAUNCH_TEMPLATE,
        vol(ebs(volumeType="gp3", iops=80001)),
        None,
        "gp3-limits",
        "/dev/xvda: gp3 IOPS 80001 is outside 3000..80000",
        name="lt",
    ),
    bad(
        "gp3-first-bad-mapping-named",
        LAUNCH_TEMPLATE,
        vol(ebs("a", volumeType="gp3", volumeSize=10), ebs("b", volumeType="gp3", throughput=2001)),
        None,
        "gp3-limits",
        "b: gp3 throughput 2001 MiB/s is outside",
        name="lt",
    ),
    bad(
        "gp3-after-junk",
        LAUNCH_TEMPLATE,
        vol("junk", {"deviceName": "x"}, ebs("/dev/xvdb", volumeType="gp3", iops=2999)),
        None,
        "gp3-limits",
        "/dev/xvdb: gp3 IOPS 2999",
        name="lt",
    ),
    bad(
        "gp3-after-gp2",
        LAUNCH_TEMPLATE,
        vol(ebs(volumeType="gp2"), ebs("/dev/xvdb", volumeType="gp3", iops=2999)),
        None,
        "gp3-limits",
        "/dev/xvdb: gp3 IOPS 2999",
        name="lt",
    ),
    # -- cluster-subnets-in-azs ----------------------------------------------------------------------------------------
    ok(
        "azs-supported-unknown-or-not-subnets",
        EKS_CLUSTER,
        {"privateSubnetIds": ["ok", "noaz", "notsub", "unknown"]},
        ZONES,
        name="eks",
    ),
    bad(
        "azs-local-zone-and-unsupported-id",
        EKS_CLUSTER,
        {"publicSubnetIds": ["local"], "privateSubnetIds": ["ok"], "subnetIds": ["az3"]},
        ZONES,
        "cluster-subnets-in-azs",
        "cluster subnets outside availability zones EKS supports: "
        "local in us-east-1-bos-1a (local-zone), az3 in us-east-1c, zone ID use1-az3, where EKS creates no control "
        "plane (UnsupportedAvailabilityZoneException)",
        name="eks",
    ),
    bad(
        "azs-private-subnets-read",
        EKS_CLUSTER,
        {"privateSubnetIds": ["local"]},
        ZONES,
        "cluster-subnets-in-azs",
        "local in us-east-1-bos-1a (local-zone)",
        name="eks",
    ),
    ok(
        "azs-same-zone-id-other-region",
        EKS_CLUSTER,
        {"subnetIds": ["az3"]},
        holding(sub("az3", "us-east-1c"), zone_ids={"us-east-1c": "use1-az3"}, region="eu-west-1"),
        name="eks",
    ),
    bad(
        "azs-untyped-zone-judged-by-id",
        EKS_CLUSTER,
        {"subnetIds": ["az3"]},
        holding(sub("az3", "us-east-1c"), zone_ids={"us-east-1c": "use1-az3"}, region="us-east-1"),
        "cluster-subnets-in-azs",
        "az3 in us-east-1c, zone ID use1-az3",
        name="eks",
    ),
    # -- one-entry-per-principal ---------------------------------------------------------------------------------------
    ok("entry-no-cluster-known", ACCESS_ENTRY, ENTRY, name="e"),
    ok("entry-first-for-principal", ACCESS_ENTRY, ENTRY, with_entries({}), name="e"),
    ok("entry-own-is-an-update", ACCESS_ENTRY, ENTRY, with_entries({ADMIN: MINE}), name="e"),
    bad(
        "entry-another-resources",
        ACCESS_ENTRY,
        ENTRY,
        with_entries({ADMIN: "urn:pulumi:dev::p::x::theirs"}),
        "one-entry-per-principal",
        f"an access entry for {ADMIN} on cluster ray, which already has one",
        "(the entry theirs made)",
        "CreateAccessEntry answers 409 ResourceInUseException",
        name="e",
    ),
    bad(
        "entry-the-creators",
        ACCESS_ENTRY,
        ENTRY,
        with_entries({ADMIN: None}),
        "one-entry-per-principal",
        "EKS's own entry for the principal that created the cluster (bootstrapClusterCreatorAdminPermissions, "
        "created by arn:aws:iam::1:role/creator)",
        "409 ResourceInUseException",
        name="e",
    ),
    bad(
        "entry-this-runs-cluster-first",
        ACCESS_ENTRY,
        ENTRY,
        with_entries({ADMIN: None}, pending=True),
        "one-entry-per-principal",
        "created by arn:aws:iam::1:role/creator",
        name="e",
    ),
    # -- one-minor-at-a-time -------------------------------------------------------------------------------------------
    ok("version-nothing-deployed", EKS_CLUSTER, {"version": "1.35"}, name="ray"),
    ok("version-cluster-not-live", EKS_CLUSTER, {"version": "1.35"}, LIVE_133, name="new"),
    ok("version-none", EKS_CLUSTER, {"version": None}, LIVE_133, name="ray"),
    ok("version-empty", EKS_CLUSTER, {"version": ""}, LIVE_133, name="ray"),
    ok("version-not-text", EKS_CLUSTER, {"version": 1.35}, LIVE_133, name="ray"),
    ok("version-one-step", EKS_CLUSTER, {"version": "1.34"}, LIVE_133, name="ray"),
    bad(
        "version-two-steps",
        EKS_CLUSTER,
        {"version": "1.35"},
        LIVE_133,
        "one-minor-at-a-time",
        "one minor version at a time",
        name="ray",
    ),
    bad(
        "version-down-found-by-eks-name",
        EKS_CLUSTER,
        {"name": "ray", "version": "1.32"},
        LIVE_133,
        "one-minor-at-a-time",
        "cannot downgrade",
        name="res",
    ),
    # -- node-group-not-above-control-plane ----------------------------------------------------------------------------
    bad(
        "ng-newer-by-reference",
        MNG,
        {"version": "1.35", "cluster": SimpleNamespace(urn="urn:eks")},
        plane(),
        "node-group-not-above-control-plane",
        "node group version 1.35 is newer than the control plane's 1.34",
    ),
    bad(
        "ng-newer-by-urn",
        MNG,
        {"version": "1.35", "cluster": "urn:eks"},
        plane(),
        "node-group-not-above-control-plane",
        "1.35 is newer than the control plane's 1.34",
    ),
    bad(
        "ng-newer-patch-read-to-minor",
        MNG,
        {"version": "1.35.1", "cluster": "urn:eks"},
        plane("1.34.9"),
        "node-group-not-above-control-plane",
        "1.35.1 is newer than the control plane's 1.34.9",
    ),
    ok("ng-equal", MNG, {"version": "1.34", "cluster": "urn:eks"}, plane()),
    ok("ng-same-minor-newer-patch", MNG, {"version": "1.34.5", "cluster": "urn:eks"}, plane("1.34.1")),
    ok("ng-older", MNG, {"version": "1.33", "cluster": "urn:eks"}, plane()),
    ok("ng-cluster-unknown", MNG, {"version": "1.35", "cluster": "ray"}, plane()),
    ok("ng-no-version", MNG, {"cluster": "urn:eks"}, plane()),
    ok("ng-version-unreadable", MNG, {"version": "x", "cluster": "urn:eks"}, plane()),
    ok("ng-plane-unreadable", MNG, {"version": "1.35", "cluster": "urn:eks"}, plane("new")),
    ok("ng-plane-unset", MNG, {"version": "1.35", "cluster": "urn:eks"}, plane(None)),
    ok("ng-version-not-text", MNG, {"version": 1.35, "cluster": "urn:eks"}, plane()),
    ok("ng-plane-not-text", MNG, {"version": "1.35", "cluster": "urn:eks"}, plane(1.33)),
    # -- pod-identity-trust --------------------------------------------------------------------------------------------
    ok("trust-good", IAM_ROLE, trust(st()), name="r"),
    ok("trust-no-policy", IAM_ROLE, {}, name="r"),
    bad(
        "trust-no-tag-session",
        IAM_ROLE,
        trust(st(actions=("sts:AssumeRole",))),
        None,
        "pod-identity-trust",
        "a Pod Identity trust statement without ['sts:TagSession']",
        name="r",
    ),
    bad(
        "trust-no-actions",
        IAM_ROLE,
        trust(st(actions=())),
        None,
        "pod-identity-trust",
        "without ['sts:AssumeRole', 'sts:TagSession']",
        name="r",
    ),
    bad(
        "trust-action-as-text",
        IAM_ROLE,
        trust(st(actions="sts:AssumeRole")),
        None,
        "pod-identity-trust",
        "without ['sts:TagSession']",
        name="r",
    ),
    ok("trust-sts-wildcard", IAM_ROLE, trust(st(actions=("sts:*",))), name="r"),
    ok("trust-wildcard", IAM_ROLE, trust(st(actions=("*",))), name="r"),
    ok(
        "trust-tags-pod-identity-adds",
        IAM_ROLE,
        trust(
            st(
                cond={
                    "StringEquals": {"aws:RequestTag/kubernetes-namespace": "ray", "aws:SourceAccount": "123456789012"}
                }
            )
        ),
        name="r",
    ),
    bad(
        "trust-tag-never-added",
        IAM_ROLE,
        trust(st(cond={"StringEquals": {"aws:RequestTag/team": "ml"}})),
        None,
        "pod-identity-trust",
        "the trust policy requires session tag(s) ['aws:requesttag/team'], which EKS Pod "
        "Identity never adds: every AssumeRole is denied",
        f"The tags it adds: {LONG_TAGS}",
        name="r",
    ),
    ok(
        "trust-tag-if-exists",
        IAM_ROLE,
        trust(st(cond={"StringEqualsIfExists": {"aws:RequestTag/team": "ml"}})),
        name="r",
    ),
    ok("trust-tag-null", IAM_ROLE, trust(st(cond={"Null": {"aws:RequestTag/team": "false"}})), name="r"),
    bad(
        "trust-required-after-optional",
        IAM_ROLE,
        trust(
            st(cond={"StringEqualsIfExists": {"aws:RequestTag/x": "y"}, "StringEquals": {"aws:RequestTag/team": "ml"}})
        ),
        None,
        "pod-identity-trust",
        "session tag(s) ['aws:requesttag/team']",
        name="r",
    ),
    bad(
        "trust-later-statement",
        IAM_ROLE,
        trust(st(), st(cond={"StringEquals": {"aws:RequestTag/team": "ml"}})),
        None,
        "pod-identity-trust",
        "requires session tag(s)",
        name="r",
    ),
    ok("trust-other-service-not-judged", IAM_ROLE, trust(st(service="ec2.amazonaws.com", actions=())), name="r"),
    ok("trust-deny-not-judged", IAM_ROLE, trust(st(effect="Deny", actions=())), name="r"),
    # -- a rule applies to its own resource type only ------------------------------------------------------------------
    ok("type-mng-inputs-on-a-role", IAM_ROLE, mng(capacityType="CAPACITY_BLOCK", instanceTypes=["p5.48xlarge"]), P5),
    ok("type-role-inputs-on-a-group", MNG, trust(st(actions=())), Account()),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_aws_rules(case: Case):
    got = problems(case.type, case.name, case.inputs, case.account)
    assert [r.id for r, _ in got] == list(case.broken)
    if not case.broken:
        assert check(case.type, case.name, case.inputs, case.account) is None
        return
    with pytest.raises(AwsRejected) as e:
        check(case.type, case.name, case.inputs, case.account)
    rule = e.value.rule
    assert rule.id == case.broken[0] and e.value.resource == f"{case.type} {case.name}"
    assert e.value.problem == got[0][1]
    for fragment in case.says:
        assert fragment in e.value.problem
    # what the plan prints: the service, the resource, the rule and where AWS says so
    assert str(e.value).startswith(f"{rule.service} would refuse {case.type} {case.name}: {e.value.problem} ")
    assert f"[aws-rule {rule.id}; source: {rule.source_title} <{rule.source_url}>]" in str(e.value)


def test_every_rule_has_cases_both_ways():
    refused = {c.broken[0] for c in CASES if c.broken}
    accepted = {r.id for c in CASES if not c.broken for r in RULES if r.resource_type == c.type}
    assert refused == set(RULE_IDS) and accepted >= set(RULE_IDS)
    assert len(set(RULE_IDS)) == len(RULES)
    assert len({c.id for c in CASES}) == len(CASES)


def test_rule_line_names_the_rule_and_its_source():
    """``ray-efa-eks check-rules`` prints one line per rule."""
    for rule in RULES:
        assert rule.line().startswith(f"[{rule.id}] {rule.service} refuses {rule.refuses} (")
        assert rule.line().endswith(f"{rule.source_title}: {rule.source_url})")


@pytest.mark.parametrize("region, want", [("us-east-1", {"use1-az3"}), ("eu-west-1", set())])
def test_eks_unsupported_zone_ids(region, want):
    assert eks_unsupported_zone_ids(region) == want


GOOD = st()
LISTED = st(service=["ec2.amazonaws.com", "pods.eks.amazonaws.com"])


@pytest.mark.parametrize(
    "raw, want",
    [
        (None, []),
        ("{not json", []),
        ("[1]", []),
        (json.dumps({"Version": "2012-10-17"}), []),
        (json.dumps({"Statement": []}), []),
        (json.dumps({"Statement": GOOD}), [GOOD]),  # one statement, not a list
        (json.dumps({"Statement": [GOOD, "junk", st(effect="Deny"), st(service="ec2.amazonaws.com")]}), [GOOD]),
        (json.dumps({"Statement": ["junk", st(effect="Deny"), GOOD]}), [GOOD]),
        (json.dumps({"Statement": [LISTED]}), [LISTED]),
        (
            json.dumps(
                {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sts:AssumeRole"}, {"Effect": "Allow"}]}
            ),
            [],
        ),
    ],
    ids=[
        "none",
        "not-json",
        "not-object",
        "no-statement",
        "empty",
        "one",
        "filtered",
        "after-skipped",
        "service-list",
        "no-service",
    ],
)
def test_pod_identity_statements(raw, want):
    assert pod_identity_statements(raw) == want


@pytest.mark.parametrize(
    "cond, required_only, want",
    [
        (None, False, set()),
        (
            {
                "StringEquals": {"aws:SourceAccount": "1"},
                "StringEqualsIfExists": {"aws:RequestTag/x": "y"},
                "Null": {"aws:RequestTag/z": "false"},
                "Bool": None,
            },
            None,
            {"aws:sourceaccount", "aws:requesttag/x", "aws:requesttag/z"},
        ),
        (
            {
                "StringEquals": {"aws:SourceAccount": "1"},
                "StringEqualsIfExists": {"aws:RequestTag/x": "y"},
                "Null": {"aws:RequestTag/z": "false"},
                "Bool": None,
            },
            True,
            {"aws:sourceaccount"},
        ),
        (
            {"StringEqualsIfExists": {"aws:RequestTag/x": "y"}, "StringEquals": {"aws:RequestTag/Team": "ml"}},
            True,
            {"aws:requesttag/team"},
        ),
    ],
    ids=["none", "all-by-default", "required", "required-after-optional"],
)
def test_condition_keys(cond, required_only, want):
    kw = {} if required_only is None else {"required_only": required_only}
    assert condition_keys(st(cond=cond), **kw) == want
