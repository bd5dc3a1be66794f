"""What the real AWS APIs refuse, enforced by the offline runner (``tools.mockrun``) at the resource AWS would refuse.

The SDK's mocks accept any request; EKS, EC2 and IAM do not. Each :class:`AwsRule` here is one request shape this
stack could produce that the AWS documentation says is refused (or, for a trust policy, can never be assumed), with
the document it comes from (title and URL) so a reader can check it. ``tools.mockrun.RecordingMocks`` calls
:func:`check` on every registration; a broken rule raises :class:`AwsRejected` naming the resource, the rule and its
source, so a regression fails the tests and the offline plan (exit 2) the way ``pulumi up`` would fail.
``ray-efa-eks check-rules`` lists these rules after the layout rules (``tools.rules``).

Shapes are the Pulumi inputs as the mock engine records them (camelCase): pulumi-eks ``ManagedNodeGroup`` and
``Cluster`` components, ``aws:ec2/launchTemplate``, ``aws:eks/accessEntry``, ``aws:iam/role``.
"""

from __future__ import annotations

import base64
import email
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MNG = "eks:index:ManagedNodeGroup"
EKS_CLUSTER = "eks:index:Cluster"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
IAM_ROLE = "aws:iam/role:Role"
SUBNET = "aws:ec2/subnet:Subnet"

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
POD_IDENTITY_SESSION_TAGS = (
    "eks-cluster-arn",
    "eks-cluster-name",
    "kubernetes-namespace",
    "kubernetes-service-account",
    "kubernetes-pod-name",
    "kubernetes-pod-uid",
)
"""Session tags EKS Pod Identity adds to its AssumeRole request ("pod-id-abac": Enable or disable session tags)."""
POD_IDENTITY_TAG_KEYS = frozenset(f"aws:requesttag/{t}" for t in POD_IDENTITY_SESSION_TAGS)
"""The session-tag condition keys (lower case: IAM compares condition key names case-insensitively)."""
POD_IDENTITY_SOURCE_KEYS = frozenset({"aws:sourceaccount", "aws:sourceorgid"})
"""Global keys a service principal's request carries on behalf of the account: aws:SourceAccount (pod-id-role's
confused-deputy guard) and aws:SourceOrgID (EKS best practices guide). Any other key is not known to be sent: the
layout rule ``pod-identity-trust-keys`` warns about it (tools/rules.py), since no document says it is absent either."""


class AwsRejected(Exception):
    """A request the real AWS API would refuse: raised by the offline runner at that resource."""

    def __init__(self, rule: "AwsRule", resource: str, problem: str):
        self.rule, self.resource, self.problem = rule, resource, problem
        super().__init__(
            f"{rule.service} would refuse {resource}: {problem} [aws-rule {rule.id}; source: "
            f"{rule.source_title} <{rule.source_url}>]"
        )


@dataclass
class Account:
    """What the mocked account knows beyond one request: earlier resources by id, zone types, the deployer."""

    resources_by_id: Callable[[Any], Any] = lambda _id: None
    """Fake id -> the recorded resource (``.type``, ``.name``, ``.inputs``), or None."""
    zone_types: dict[str, str] = field(default_factory=dict)
    """Zone name -> ``availability-zone`` | ``local-zone`` | ``wavelength-zone`` (DescribeAvailabilityZones ZoneType)."""
    caller_arn: str | None = None
    """The IAM principal (role/user ARN) running this ``pulumi up``: EKS's creator only of a cluster created now."""
    world: Any = None
    """The account's EKS state across runs (``tools.mock_account.MockAccount``): live clusters, their entries and
    node group versions, the stack's state (None: a run with nothing deployed before)."""
    pending_clusters: dict[str, Any] = field(default_factory=dict)
    """Cluster name -> the cluster as this run's registration asks for it (live, or being created by this caller)."""
    by_urn: Callable[[Any], Any] = lambda _urn: None
    """URN -> the resource recorded earlier in this run."""
    urn: str = ""
    """URN of the registration being judged (tells a create from an update)."""
    region: str = ""
    zone_ids: dict[str, str] = field(default_factory=dict)
    """AZ name -> zone ID in this account (DescribeAvailabilityZones ZoneId; the mapping differs per account)."""

    def cluster(self, name: Any) -> Any:
        """The EKS cluster ``name`` during this run: as requested here, else as it lives in the account."""
        if name in self.pending_clusters:
            return self.pending_clusters[name]
        return self.world.clusters.get(name) if self.world is not None else None


@dataclass(frozen=True)
class AwsRule:
    """One documented refusal: which resource type it applies to, why, and where AWS says so."""

    id: str
    service: str
    resource_type: str
    refuses: str
    """The refused shape, in one line."""
    source_title: str
    source_url: str
    check: Callable[[str, dict[str, Any], Account], str | None]
    """(resource name, inputs, account) -> the problem, or None when AWS accepts it."""

    def line(self) -> str:
        return f"[{self.id}] {self.service} refuses {self.refuses} ({self.source_title}: {self.source_url})"


def _types(v: Any) -> list[str]:
    return [t for t in (v or []) if isinstance(t, str) and t] if isinstance(v, list) else []


def _template(inputs: dict[str, Any], acct: Account) -> Any:
    ref = (inputs.get("launchTemplate") or {}).get("id") if isinstance(inputs.get("launchTemplate"), dict) else None
    rec = acct.resources_by_id(ref) if ref else None
    return rec if rec is not None and rec.type == LAUNCH_TEMPLATE else None


# -- EKS managed node groups ---------------------------------------------------------------------------------------


def _capacity_block_type(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    if inputs.get("capacityType") != "CAPACITY_BLOCK":
        return None
    lt = _template(inputs, acct)
    if _types(inputs.get("instanceTypes")):
        return (
            f"capacityType CAPACITY_BLOCK with instanceTypes {_types(inputs.get('instanceTypes'))} on the node "
            "group: the instance type belongs in the launch template only"
        )
    if lt is None:
        return "capacityType CAPACITY_BLOCK needs a custom launch template"
    if not lt.inputs.get("instanceType"):
        return f"capacityType CAPACITY_BLOCK and launch template {lt.name} has no instanceType"
    return None


def _type_in_one_place(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    lt = _template(inputs, acct)
    if lt is not None and lt.inputs.get("instanceType") and _types(inputs.get("instanceTypes")):
        return (
            f"instance type both in launch template {lt.name} ({lt.inputs['instanceType']}) and in the node "
            f"group's instanceTypes {_types(inputs.get('instanceTypes'))}"
        )
    return None


def _no_subnet_in_template(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    lt = _template(inputs, acct)
    if lt is None:
        return None
    nis = lt.inputs.get("networkInterfaces") or []
    bad = [n.get("networkCardIndex", i) for i, n in enumerate(nis) if isinstance(n, dict) and n.get("subnetId")]
    if bad:
        return f"launch template {lt.name} sets SubnetId on network interface(s) of card {bad}"
    return None


def _no_top_level_sgs_with_interfaces(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    lt = _template(inputs, acct)
    if lt is None or not lt.inputs.get("networkInterfaces"):
        return None
    top = [k for k in ("vpcSecurityGroupIds", "securityGroupNames") if lt.inputs.get(k)]
    if top:
        return (
            f"launch template {lt.name} has network interfaces and top-level {', '.join(top)}: put the security "
            "groups on the interfaces"
        )
    return None


def _user_data_mime(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    lt = _template(inputs, acct)
    if lt is None or not lt.inputs.get("userData") or lt.inputs.get("imageId"):
        return None  # with an AMI id EKS merges nothing: the user data is the whole bootstrap, in any form
    raw = lt.inputs["userData"]
    try:
        text = base64.b64decode(raw, validate=True).decode()
    except (ValueError, TypeError):
        return f"launch template {lt.name}'s userData is not base64"
    if not email.message_from_string(text).is_multipart():
        return (
            f"launch template {lt.name}'s user data is not a MIME multi-part archive (EKS merges it with its own "
            "bootstrap)"
        )
    return None


# -- EC2 launch templates ------------------------------------------------------------------------------------------


def _whole(v: Any) -> int | None:
    """A number as the engine records it (JSON: 3000.0), or a numeric string, as an int; else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)) and float(v).is_integer():
        return int(v)
    return int(v) if isinstance(v, str) and v.strip().isdigit() else None


def _gp3_volumes(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    from ..components.nodes.ebs_limits import GP3_MAX_GIB, gp3_problem

    for m in inputs.get("blockDeviceMappings") or []:
        ebs = m.get("ebs") if isinstance(m, dict) else None
        if not isinstance(ebs, dict):
            continue
        device = m.get("deviceName", "?")
        iops, throughput = _whole(ebs.get("iops")), _whole(ebs.get("throughput"))
        if ebs.get("volumeType") != "gp3":
            if throughput is not None:
                return f"{device}: throughput is for gp3 volumes only (volumeType {ebs.get('volumeType')!r})"
            continue
        size = _whole(ebs.get("volumeSize"))
        # no size: the snapshot's (the AMI's), unknown here; the per-GiB ratio cannot be judged, the rest can
        problem = gp3_problem(size if size is not None else GP3_MAX_GIB, iops, throughput)
        if problem:
            return f"{device}: {problem}"
    return None


# -- EKS clusters and access entries -------------------------------------------------------------------------------


def eks_unsupported_zone_ids(region: str) -> frozenset[str]:
    from ..components.network.placement import EKS_UNSUPPORTED_ZONE_IDS

    return EKS_UNSUPPORTED_ZONE_IDS.get(region, frozenset())


def _cluster_subnets_in_azs(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    ids = [
        *_types(inputs.get("publicSubnetIds")),
        *_types(inputs.get("privateSubnetIds")),
        *_types(inputs.get("subnetIds")),
    ]
    bad = []
    for sid in ids:
        rec = acct.resources_by_id(sid)
        az = rec.inputs.get("availabilityZone") if rec is not None and rec.type == SUBNET else None
        zone_type = acct.zone_types.get(az) if az else None
        if zone_type and zone_type != "availability-zone":
            bad.append(f"{rec.name} in {az} ({zone_type})")
        elif az and acct.zone_ids.get(az) in eks_unsupported_zone_ids(acct.region):
            bad.append(
                f"{rec.name} in {az}, zone ID {acct.zone_ids[az]}, where EKS creates no control plane "
                "(UnsupportedAvailabilityZoneException)"
            )
    if bad:
        return f"cluster subnets outside availability zones EKS supports: {', '.join(bad)}"
    return None


def _one_entry_per_principal(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    principal, cname = inputs.get("principalArn"), inputs.get("clusterName")
    c = acct.cluster(cname)
    if c is None or principal not in c.entries or c.entries[principal] == acct.urn:
        return None  # no such cluster known, no entry yet, or this resource's own (an update, not a create)
    holder = c.entries[principal]
    who = (
        (
            "EKS's own entry for the principal that created the cluster (bootstrapClusterCreatorAdminPermissions, "
            f"created by {c.creator_arn})"
        )
        if holder is None
        else f"the entry {holder.split('::')[-1]} made"
    )
    return (
        f"an access entry for {principal} on cluster {cname}, which already has one ({who}): CreateAccessEntry "
        "answers 409 ResourceInUseException"
    )


def _cluster_version_step(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    from ..components.cluster.live_cluster import upgrade_problem

    live = acct.world.clusters.get(inputs.get("name") or name) if acct.world is not None else None
    wanted = inputs.get("version")
    if live is None or not isinstance(wanted, str) or not wanted:
        return None
    return upgrade_problem(live.version, wanted)


def _version_key(v: Any) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in str(v).split(".")[:2])
    except ValueError:
        return ()


def _node_group_not_above_control_plane(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    wanted = inputs.get("version")
    ref = inputs.get("cluster")
    owner = acct.by_urn(getattr(ref, "urn", ref))
    plane = owner.inputs.get("version") if owner is not None else None
    if not isinstance(wanted, str) or not isinstance(plane, str) or not _version_key(wanted) or not _version_key(plane):
        return None
    if _version_key(wanted) > _version_key(plane):
        return f"node group version {wanted} is newer than the control plane's {plane}"
    return None


# -- IAM: Pod Identity trust policy --------------------------------------------------------------------------------


def pod_identity_statements(raw: Any) -> list[dict[str, Any]]:
    """The statements of trust policy ``raw`` (JSON text) that let ``pods.eks.amazonaws.com`` in; [] if none or unread."""
    if not isinstance(raw, str):
        return []
    try:
        doc = json.loads(raw)
    except ValueError:
        return []
    sts = doc.get("Statement", []) if isinstance(doc, dict) else []
    out = []
    for st in sts if isinstance(sts, list) else [sts]:
        if not isinstance(st, dict) or st.get("Effect") != "Allow":
            continue
        principal = st.get("Principal") or {}
        services = principal.get("Service") if isinstance(principal, dict) else None
        services = services if isinstance(services, list) else [services]
        if POD_IDENTITY_PRINCIPAL in services:
            out.append(st)
    return out


def condition_keys(st: dict[str, Any], *, required_only: bool = False) -> set[str]:
    """Condition keys of a statement, lower case; ``required_only``: those whose absence fails the condition
    (not ``...IfExists``, not ``Null``: IAM user guide, "Condition operators")."""
    out = set()
    for op, kv in (st.get("Condition") or {}).items():
        if required_only and (op.endswith("IfExists") or op == "Null"):
            continue
        out |= {k.lower() for k in (kv or {})}
    return out


def _pod_identity_trust(name: str, inputs: dict[str, Any], acct: Account) -> str | None:
    """Only what makes every Pod Identity AssumeRole fail: no sts:AssumeRole/sts:TagSession in the statement
    (pod-id-role: Pod Identity uses both), or a required condition on a session tag Pod Identity never adds
    (pod-id-abac lists the six it adds). An unscoped policy is the pod-id-role page's own minimal one, and a
    condition on another global key (aws:SourceOrgID, aws:SourceArn) is not known to fail: the layout rules
    ``pod-identity-trust-scoped`` and ``pod-identity-trust-keys`` warn about those (tools/rules.py)."""
    for st in pod_identity_statements(inputs.get("assumeRolePolicy")):
        actions = st.get("Action")
        actions = set(actions if isinstance(actions, list) else [actions])
        if not ({"sts:AssumeRole", "sts:TagSession"} <= actions or "sts:*" in actions or "*" in actions):
            return f"a Pod Identity trust statement without {sorted({'sts:AssumeRole', 'sts:TagSession'} - actions)}"
        absent = sorted(
            k
            for k in condition_keys(st, required_only=True)
            if k.startswith("aws:requesttag/") and k not in POD_IDENTITY_TAG_KEYS
        )
        if absent:
            return (
                f"the trust policy requires session tag(s) {absent}, which EKS Pod Identity never adds: every "
                f"AssumeRole is denied. The tags it adds: {', '.join(POD_IDENTITY_SESSION_TAGS)}"
            )
    return None


LAUNCH_TEMPLATES_DOC = (
    "EKS user guide: Customize managed nodes with launch templates",
    "https://docs.aws.amazon.com/eks/latest/userguide/launch-templates.html",
)

RULES: tuple[AwsRule, ...] = (
    AwsRule(
        "capacity-block-type-in-template",
        "EKS",
        MNG,
        "a CAPACITY_BLOCK node group whose instance type is not in its launch template (or is in the node group)",
        "EKS user guide: Create a managed node group with Capacity Blocks for ML",
        "https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html",
        _capacity_block_type,
    ),
    AwsRule(
        "instance-type-in-one-place",
        "EKS",
        MNG,
        "an instance type in both the launch template and the node group",
        *LAUNCH_TEMPLATES_DOC,
        _type_in_one_place,
    ),
    AwsRule(
        "no-subnet-in-launch-template",
        "EKS",
        MNG,
        "a SubnetId on a launch template's network interfaces (subnets belong to the node group)",
        *LAUNCH_TEMPLATES_DOC,
        _no_subnet_in_template,
    ),
    AwsRule(
        "interface-security-groups",
        "EC2",
        MNG,
        "top-level security groups next to network interfaces in a launch template",
        "EC2 API reference: RequestLaunchTemplateData (SecurityGroupIds)",
        "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_RequestLaunchTemplateData.html",
        _no_top_level_sgs_with_interfaces,
    ),
    AwsRule(
        "user-data-mime-multipart",
        "EKS",
        MNG,
        "launch-template user data that is not a MIME multi-part archive on a node group running an EKS AMI "
        "type (no imageId): EKS merges it with its own bootstrap",
        *LAUNCH_TEMPLATES_DOC,
        _user_data_mime,
    ),
    AwsRule(
        "gp3-limits",
        "EC2",
        LAUNCH_TEMPLATE,
        "a gp3 volume outside 3,000-80,000 IOPS or 125-2,000 MiB/s, above 500 IOPS per GiB, or above 0.25 MiB/s "
        "of throughput per provisioned IOPS (the 3,000 baseline when unset); throughput on another volume type",
        "EBS user guide: General Purpose SSD volumes (gp3); EC2 API reference: LaunchTemplateEbsBlockDeviceRequest",
        "https://docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html",
        _gp3_volumes,
    ),
    AwsRule(
        "cluster-subnets-in-azs",
        "EKS",
        EKS_CLUSTER,
        "cluster subnets in a Local Zone or Wavelength Zone (zone-type other than availability-zone), or in an AZ "
        "whose zone ID EKS does not support (use1-az3, usw1-az2, cac1-az3)",
        "EKS user guide: View Amazon EKS networking requirements for VPC and subnets",
        "https://docs.aws.amazon.com/eks/latest/userguide/network-reqs.html",
        _cluster_subnets_in_azs,
    ),
    AwsRule(
        "one-entry-per-principal",
        "EKS",
        ACCESS_ENTRY,
        "an access entry for a principal that already has one on the cluster, EKS's creator entry "
        "(bootstrapClusterCreatorAdminPermissions; the creator is who created the cluster, not who runs this "
        "update) included (409 ResourceInUseException)",
        "EKS API reference: CreateAccessConfigRequest (bootstrapClusterCreatorAdminPermissions) and CreateAccessEntry",
        "https://docs.aws.amazon.com/eks/latest/APIReference/API_CreateAccessConfigRequest.html",
        _one_entry_per_principal,
    ),
    AwsRule(
        "one-minor-at-a-time",
        "EKS",
        EKS_CLUSTER,
        "a control-plane version update that skips a minor version or goes down",
        "EKS user guide: Update existing cluster to new Kubernetes version",
        "https://docs.aws.amazon.com/eks/latest/userguide/update-cluster.html",
        _cluster_version_step,
    ),
    AwsRule(
        "node-group-not-above-control-plane",
        "EKS",
        MNG,
        "a managed node group version newer than its control plane's",
        "EKS user guide: Update a managed node group for your cluster",
        "https://docs.aws.amazon.com/eks/latest/userguide/update-managed-node-group.html",
        _node_group_not_above_control_plane,
    ),
    AwsRule(
        "pod-identity-trust",
        "IAM",
        IAM_ROLE,
        "(denies every AssumeRole of) a Pod Identity trust policy without sts:AssumeRole and sts:TagSession, or "
        "requiring a session tag Pod Identity never adds",
        "EKS user guide: Create IAM role with trust policy required by EKS Pod Identity; Grant Pods access to "
        "AWS resources based on tags",
        "https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html",
        _pod_identity_trust,
    ),
)
RULE_IDS = tuple(r.id for r in RULES)


def check(resource_type: str, name: str, inputs: dict[str, Any], account: Account) -> None:
    """Raise :class:`AwsRejected` for the first rule this request breaks; nothing when AWS would accept it."""
    for rule in RULES:
        if rule.resource_type != resource_type:
            continue
        problem = rule.check(name, inputs, account)
        if problem:
            raise AwsRejected(rule, f"{resource_type} {name}", problem)


def problems(resource_type: str, name: str, inputs: dict[str, Any], account: Account) -> list[tuple[AwsRule, str]]:
    """Every rule this request breaks (for tests and reports)."""
    return [(r, p) for r in RULES if r.resource_type == resource_type and (p := r.check(name, inputs, account))]
