"""The layout facts of a stack, read from its resources: one neutral view for the offline plan and the rules.

Two sources feed it, and they see different things:

* the offline plan (``tools.plan``) runs the real program under Pulumi mocks
  (``tools.mockrun``). Every resource is recorded with the *inputs* the program
  passed. pulumi-eks's ``ManagedNodeGroup`` is a remote component there, so its
  children (the ``aws:eks/nodeGroup``; with ``enableEfaSupport`` also its launch
  template and placement group) do not exist; only our inputs (``launchTemplate.id``
  naming our own launch template, ``subnetIds``...; in the older shape
  ``enableEfaSupport``, ``placementGroupAvailabilityZone``) do.
* a CrossGuard policy pack (``policy/``) gets ``StackValidationArgs.resources`` during a
  real ``pulumi preview``: each resource's *outputs* (a component's registered outputs,
  a custom resource's inputs plus unknowns), the parent, and per-property dependencies.
  There the children of ``ManagedNodeGroup`` do exist, its own inputs do not, and any
  value computed from a resource not yet created is unknown; the ``aws:eks/nodeGroup``
  finds our launch template through its ``launchTemplate`` id or dependency.

Every fact below therefore prefers the children when they are present, falls back to
the inputs, and answers :data:`UNKNOWN` (never a guess) when neither can tell, so a
rule can stay silent instead of failing a preview on a value that only ``up`` knows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from ..components import eks_versions
from ..components.cost import CAPACITY_BLOCK, ON_DEMAND, RESERVATION, capacity_notes, control_plane_note, hourly_usd
from ..components.instances import CATALOGUE, NoPrice

MNG = "eks:index:ManagedNodeGroup"
EKS_COMPONENT = "eks:index:Cluster"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
CAPACITY_RESERVATION = "aws:ec2/capacityReservation:CapacityReservation"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"
NAT_GATEWAY = "aws:ec2/natGateway:NatGateway"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SG_EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
HELM_CHART_V4 = "kubernetes:helm.sh/v4:Chart"
SERVICE = "kubernetes:core/v1:Service"
INGRESS = "kubernetes:networking.k8s.io/v1:Ingress"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
RAY_JOB = "kubernetes:ray.io/v1:RayJob"
RAY_SERVICE = "kubernetes:ray.io/v1:RayService"

EFA_RESOURCE = "vpc.amazonaws.com/efa"
GPU_RESOURCE = "nvidia.com/gpu"
DASHBOARD_PORT = 8265
KUBERAY_CHART = "kuberay-operator"
EFA_PLUGIN_CHART = "aws-efa-k8s-device-plugin"

# Where a pod template sits in each workload kind (Ray kinds are handled on their own).
_POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "kubernetes:core/v1:Pod": (),
    "kubernetes:apps/v1:Deployment": ("template",),
    "kubernetes:apps/v1:StatefulSet": ("template",),
    "kubernetes:apps/v1:DaemonSet": ("template",),
    "kubernetes:apps/v1:ReplicaSet": ("template",),
    "kubernetes:batch/v1:Job": ("template",),
    "kubernetes:batch/v1:CronJob": ("jobTemplate", "spec", "template"),
}
_RAY_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    RAY_CLUSTER: (),
    RAY_JOB: ("rayClusterSpec",),
    RAY_SERVICE: ("rayClusterConfig",),
}


# -- unknown values ------------------------------------------------------------------------------------------------

class _Unknown:
    """A value only ``pulumi up`` will know (computed from a resource not created yet)."""

    _instance: "_Unknown | None" = None

    def __new__(cls) -> "_Unknown":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown>"

    def __bool__(self) -> bool:
        return False


UNKNOWN: Any = _Unknown()

# The sentinels Pulumi's engine puts in place of unknown values (pulumi_policy/proxy.py, pulumi/runtime/rpc.py).
_UNKNOWN_SENTINELS = frozenset({
    "04da6b54-80e4-46f7-96ec-b56ff0331ba9",  # string (also the Python SDK's UNKNOWN)
    "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",  # boolean
    "3eeb2bf0-c639-47a8-9e75-3b44932eb421",  # number
    "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",  # array
    "030794c1-ac77-496b-92df-f27374a8bd58",  # asset
    "e48ece36-62e2-4504-bad9-02848725956a",  # archive
    "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",  # object
})


def is_unknown(value: Any) -> bool:
    return value is UNKNOWN


def _get(container: Any, key: Any) -> Any:
    """``container[key]`` that turns pulumi_policy's UnknownValueError into :data:`UNKNOWN`."""
    try:
        return container[key]
    except Exception as e:  # noqa: BLE001 - pulumi_policy.proxy.UnknownValueError, without importing it here
        if hasattr(e, "unknown_type_sentinel"):
            return UNKNOWN
        raise


def plain(value: Any) -> Any:
    """JSON-like plain data: dicts, lists, str, int, float, bool, None and :data:`UNKNOWN`.

    Unwraps pulumi_policy's unknown-checking proxies without tripping them,
    turns engine sentinels into UNKNOWN, integral floats (protobuf and the mocks
    send every number as a double) into ints, and anything else (a resource
    object passed as an input under mocks) into ``<TypeName>``.
    """
    if value is UNKNOWN or value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return UNKNOWN if value in _UNKNOWN_SENTINELS else value
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(_get(value, k)) for k in list(value)}
    if isinstance(value, Sequence):
        return [plain(_get(value, i)) for i in range(len(value))]
    return f"<{type(value).__name__}>"


# -- the neutral resource view -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Resource:
    """One resource as both the mocks and CrossGuard can describe it."""

    type: str
    name: str
    urn: str
    parent: str | None
    """URN of the parent resource (None for the stack itself)."""
    props: dict[str, Any]
    """Mocks: the inputs the program passed. CrossGuard: the resource's outputs (unknowns as UNKNOWN)."""
    id: str | None = None
    deps: dict[str, list[str]] = field(default_factory=dict)
    """Property -> URNs of the resources its value comes from (CrossGuard only)."""

    @property
    def label(self) -> str:
        return f"{self.type} {self.name}"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "urn": self.urn, "parent": self.parent,
                "id": self.id, "props": _jsonable(self.props)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Resource":
        return cls(d["type"], d["name"], d.get("urn") or f"{d['type']}::{d['name']}", d.get("parent"),
                   plain(d.get("props") or {}), d.get("id"), {k: list(v) for k, v in (d.get("deps") or {}).items()})


def _jsonable(value: Any) -> Any:
    if value is UNKNOWN:
        return "<unknown>"
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def from_mockrun(run: Any) -> list[Resource]:
    """The records of ``tools.mockrun.run_program`` (inputs as props)."""
    ids = getattr(run, "ids", {})
    return [Resource(r.type, r.name, r.urn or f"{r.type}::{r.name}", r.parent, plain(r.inputs), ids.get(r.urn))
            for r in run.resources]


def from_policy(resources: Iterable[Any]) -> list[Resource]:
    """``pulumi_policy.PolicyResource`` objects (outputs as props, unknowns kept as UNKNOWN)."""
    out = []
    for r in resources:
        parent = r.parent.urn if getattr(r, "parent", None) is not None else getattr(getattr(r, "opts", None), "parent", None)
        props = plain(r.props) if r.props is not None else {}
        rid = props.get("id") if isinstance(props.get("id"), str) else None
        deps = {k: [d.urn for d in v] for k, v in (getattr(r, "property_dependencies", None) or {}).items()}
        out.append(Resource(r.resource_type, r.name, r.urn, parent or None, props, rid, deps))
    return out


def dig(value: Any, *path: Any, default: Any = None) -> Any:
    """``value[p0][p1]...`` through dicts and lists; UNKNOWN stays UNKNOWN, a missing key gives ``default``."""
    for p in path:
        if value is UNKNOWN:
            return UNKNOWN
        if isinstance(value, dict) and p in value:
            value = value[p]
        elif isinstance(value, list) and isinstance(p, int) and -len(value) <= p < len(value):
            value = value[p]
        else:
            return default
    return value


def urn_label(urn: str | None) -> str | None:
    """``type name`` of a URN (``urn:pulumi:stack::project::parent$type::name``)."""
    if not urn:
        return None
    head, _, name = urn.rpartition("::")
    typ = head.rpartition("::")[2].rpartition("$")[2]
    return f"{typ} {name}" if typ else name


class Stack:
    """The resources of one program run or preview, indexed for the questions below."""

    def __init__(self, resources: Iterable[Resource]):
        self.resources = list(resources)
        self.by_urn = {r.urn: r for r in self.resources}
        self.by_id = {r.id: r for r in self.resources if isinstance(r.id, str) and r.id}
        self._children: dict[str, list[Resource]] = {}
        for r in self.resources:
            if r.parent:
                self._children.setdefault(r.parent, []).append(r)

    def of_type(self, *types: str) -> list[Resource]:
        return [r for r in self.resources if r.type in types]

    def children(self, r: Resource, typ: str | None = None) -> list[Resource]:
        return [c for c in self._children.get(r.urn, []) if typ is None or c.type == typ]

    def parent_of(self, r: Resource) -> Resource | None:
        return self.by_urn.get(r.parent) if r.parent else None

    def resolve(self, ref: Any) -> Resource | None:
        """The resource an id (or URN) names, if it is in the stack and known."""
        if not isinstance(ref, str):
            return None
        return self.by_id.get(ref) or self.by_urn.get(ref)


# -- node groups ---------------------------------------------------------------------------------------------------

@dataclass
class NodeGroup:
    """A managed node group: pulumi-eks ``ManagedNodeGroup`` (either shape) or a bare ``aws:eks/nodeGroup``."""

    resource: Resource
    props: dict[str, Any]
    """The node group settings: the MNG inputs (mocks) or the ``aws:eks/nodeGroup`` child's props (preview)."""
    instance_types: list[str]
    nodes: Any
    """Desired size (int), or UNKNOWN."""
    labels: dict[str, str]
    gpu: bool
    gpus_per_node: int | None
    efa_interfaces: Any
    """EFA interfaces per node (int) or UNKNOWN."""
    efa_source: str
    """Where ``efa_interfaces`` comes from: the launch template, or pulumi-eks's enableEfaSupport input."""
    placement_az: str | None
    placement_strategy: Any
    security_group_ids: Any
    """Security groups of the EFA interfaces (list, UNKNOWN, or [] when there are none)."""
    subnets: Any
    """Subnet resources the nodes land in (after pulumi-eks's AZ filter), or UNKNOWN."""
    subnet_ids: Any
    capacity_type: Any = "ON_DEMAND"
    """The node group's ``capacityType`` (ON_DEMAND, SPOT, CAPACITY_BLOCK) or UNKNOWN."""
    market_type: Any = None
    """The launch template's ``instanceMarketOptions.marketType`` (``capacity-block``, ``spot``) or None."""
    reservation: Any = None
    """The Capacity Reservation id or resource group ARN the launch template targets, None, or UNKNOWN."""

    @property
    def azs(self) -> Any:
        """AZs of the node group's subnets (sorted), or UNKNOWN."""
        if self.subnets is UNKNOWN:
            return UNKNOWN
        azs = [dig(s.props, "availabilityZone") for s in self.subnets]
        if any(a is UNKNOWN or a is None for a in azs):
            return UNKNOWN
        return sorted(set(azs))

    @property
    def efa_enabled(self) -> bool:
        if isinstance(self.efa_interfaces, int) and self.efa_interfaces > 0:
            return True
        return self.efa_source == "pulumi-eks enableEfaSupport"


def _instance_gpus(instance_types: list[str]) -> int | None:
    known = [CATALOGUE[t] for t in instance_types if t in CATALOGUE]
    return known[0].gpus if known and len(known) == len(instance_types) else None


def _looks_gpu(props: dict[str, Any], instance_types: list[str]) -> bool:
    gpus = _instance_gpus(instance_types)
    if gpus is not None:
        return gpus > 0
    ami = dig(props, "amiType") or ""
    taints = dig(props, "taints") or []
    return (isinstance(ami, str) and ("NVIDIA" in ami or "GPU" in ami)) or any(
        isinstance(t, dict) and t.get("key") == GPU_RESOURCE for t in (taints if isinstance(taints, list) else []))


def _efa_interfaces_of(template: Resource) -> tuple[Any, Any]:
    """(EFA interface count, their security group ids) from a launch template's props."""
    nis = dig(template.props, "networkInterfaces")
    if nis is UNKNOWN:
        return UNKNOWN, UNKNOWN
    nis = nis if isinstance(nis, list) else []
    if any(n is UNKNOWN or dig(n, "interfaceType") is UNKNOWN for n in nis):
        return UNKNOWN, UNKNOWN
    efa = [n for n in nis if isinstance(n, dict) and dig(n, "interfaceType") in ("efa", "efa-only")]
    groups: Any = []
    for n in efa:
        sgs = dig(n, "securityGroups")
        if sgs is UNKNOWN or (isinstance(sgs, list) and any(s is UNKNOWN for s in sgs)):
            groups = UNKNOWN
            break
        groups += [s for s in (sgs or []) if s not in groups]
    return len(efa), groups


def _known_list(value: Any) -> bool:
    return isinstance(value, list) and not any(v is UNKNOWN for v in value)


def _subnets_for(stack: Stack, ids: Any, owner: Resource | None, dep_prop: str = "subnetIds") -> Any:
    """Subnet resources named by ``ids``; falls back to ``owner``'s dependencies when the ids are unknown."""
    if _known_list(ids) and ids:
        found = [stack.resolve(i) for i in ids]
        if all(f is not None and f.type == SUBNET for f in found):
            return found
    if owner is not None and owner.deps.get(dep_prop):
        found = [stack.by_urn.get(u) for u in owner.deps[dep_prop]]
        subnets = [f for f in found if f is not None and f.type == SUBNET]
        if subnets:
            return subnets
    return UNKNOWN


def node_groups(stack: Stack) -> list[NodeGroup]:
    """Every managed node group of the stack, read from whichever shape it has."""
    groups = []
    for mng in stack.of_type(MNG):
        child_ng = next(iter(stack.children(mng, NODE_GROUP)), None)
        template = next(iter(stack.children(mng, LAUNCH_TEMPLATE)), None)
        pg = next(iter(stack.children(mng, PLACEMENT_GROUP)), None)
        props = {**mng.props, **(child_ng.props if child_ng else {})}
        efa_input = mng.props.get("enableEfaSupport") is True
        placement_az = mng.props.get("placementGroupAvailabilityZone")
        itypes = _str_list(props.get("instanceTypes"))
        # Our own launch template (components/launch_template.py) is the MNG's sibling: the mocks name it in the
        # MNG's launchTemplate input, a preview in the aws:eks/nodeGroup child's (by id, or by its dependency).
        template = template or _template_of(stack, child_ng if child_ng is not None else mng)
        if not itypes and template is not None and isinstance(dig(template.props, "instanceType"), str):
            itypes = [dig(template.props, "instanceType")]  # a Capacity Block's type lives in the launch template
        if pg is None and template is not None:
            pg = _placement_group_of(stack, template)
        if template is not None:
            efa, sgs = _efa_interfaces_of(template)
            source = "launch template"
        elif child_ng is not None:  # preview shape without a custom launch template: no EFA interfaces
            efa, sgs, source = 0, [], "launch template"
        elif efa_input:  # mock shape: pulumi-eks adds one EFA interface per network card
            known = [CATALOGUE[t] for t in itypes if t in CATALOGUE]
            efa = known[0].max_efa_interfaces if known else UNKNOWN
            sgs, source = UNKNOWN, "pulumi-eks enableEfaSupport"
        else:
            efa, sgs, source = 0, [], "pulumi-eks inputs"
        if pg is not None:
            strategy = dig(pg.props, "strategy")
        elif template is not None and dig(template.props, "placement", "groupName") is UNKNOWN:
            strategy = UNKNOWN
        elif child_ng is None:
            strategy = "cluster" if efa_input else None
        else:
            strategy = None
        if child_ng is not None:
            subnet_ids = child_ng.props.get("subnetIds")
            subnets = _subnets_for(stack, subnet_ids, child_ng)
            pinned = pg is not None or (template is not None and dig(
                template.props, "capacityReservationSpecification", "capacityReservationTarget") not in (None, {}))
            if pinned and not _known_list(subnet_ids) and subnets is not UNKNOWN and len(
                    {dig(s.props, "availabilityZone") for s in subnets}) > 1:
                # candidates only: pulumi-eks (placement AZ) or EfaGpuNodeGroup (GPU AZ) filters them, unseen here
                subnets = UNKNOWN
        else:
            subnet_ids = mng.props.get("subnetIds")
            subnets = _subnets_for(stack, subnet_ids, mng)
        if efa_input and isinstance(placement_az, str) and subnets is not UNKNOWN:
            # pulumi-eks keeps only the subnets in placementGroupAvailabilityZone (filterEfaSubnets).
            subnets = [s for s in subnets if dig(s.props, "availabilityZone") in (placement_az, UNKNOWN)]
        groups.append(_node_group(mng, props, itypes, efa, source, placement_az, strategy, sgs, subnets, subnet_ids,
                                  template))
    for ng in stack.of_type(NODE_GROUP):
        parent = stack.parent_of(ng)
        if parent is not None and parent.type == MNG:
            continue
        props = ng.props
        itypes = _str_list(props.get("instanceTypes"))
        template = _template_of(stack, ng)
        if not itypes and template is not None and isinstance(dig(template.props, "instanceType"), str):
            itypes = [dig(template.props, "instanceType")]
        if template is not None:
            efa, sgs = _efa_interfaces_of(template)
            pg = _placement_group_of(stack, template)
            pg_name = dig(template.props, "placement", "groupName")
            strategy = dig(pg.props, "strategy") if pg else (UNKNOWN if pg_name is UNKNOWN else None)
        elif dig(props, "launchTemplate") in (None, {}):
            efa, sgs, strategy = 0, [], None
        else:
            efa, sgs, strategy = UNKNOWN, UNKNOWN, UNKNOWN
        subnets = _subnets_for(stack, props.get("subnetIds"), ng)
        groups.append(_node_group(ng, props, itypes, efa, "launch template", None, strategy, sgs, subnets,
                                  props.get("subnetIds"), template))
    return groups


def _placement_group_of(stack: Stack, template: Resource) -> Resource | None:
    """The placement group a launch template names (by name or id; a preview: by its dependency)."""
    pg_name = dig(template.props, "placement", "groupName")
    if isinstance(pg_name, str) and pg_name:
        found = next((p for p in stack.of_type(PLACEMENT_GROUP) if pg_name in (dig(p.props, "name"), p.id)), None)
        if found is not None:
            return found
    for urn in template.deps.get("placement", []):
        dep = stack.by_urn.get(urn)
        if dep is not None and dep.type == PLACEMENT_GROUP:
            return dep
    return None


def _template_of(stack: Stack, ng: Resource) -> Resource | None:
    """The launch template a node group names in ``launchTemplate.id`` (or depends on for it)."""
    ref = dig(ng.props, "launchTemplate", "id")
    found = stack.resolve(ref)
    if found is not None and found.type == LAUNCH_TEMPLATE:
        return found
    for urn in ng.deps.get("launchTemplate", []):
        dep = stack.by_urn.get(urn)
        if dep is not None and dep.type == LAUNCH_TEMPLATE:
            return dep
    return None


def _node_group(r: Resource, props: dict, itypes: list[str], efa: Any, source: str, placement_az: Any,
                strategy: Any, sgs: Any, subnets: Any, subnet_ids: Any, template: Resource | None = None) -> NodeGroup:
    desired = dig(props, "scalingConfig", "desiredSize")
    labels = props.get("labels") if isinstance(props.get("labels"), dict) else {}
    lt = template.props if template is not None else {}
    target = dig(lt, "capacityReservationSpecification", "capacityReservationTarget", default={}) or {}
    reservation = (target.get("capacityReservationId") or target.get("capacityReservationResourceGroupArn")
                   if isinstance(target, dict) else target)
    return NodeGroup(r, props, itypes, desired if desired is not None else UNKNOWN, labels, _looks_gpu(props, itypes),
                     _instance_gpus(itypes), efa, source, placement_az if isinstance(placement_az, str) else None,
                     strategy, sgs, subnets, subnet_ids, props.get("capacityType", "ON_DEMAND"),
                     dig(lt, "instanceMarketOptions", "marketType"), reservation)


def _str_list(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def gpu_node_groups(stack: Stack) -> list[NodeGroup]:
    return [g for g in node_groups(stack) if g.gpu]


# -- pods ----------------------------------------------------------------------------------------------------------

@dataclass
class Pod:
    """One pod template of a workload: a Ray head or worker group, a Job, a Deployment..."""

    resource: Resource
    role: str
    """``head``, ``worker <group>`` or ``pod``."""
    replicas: Any
    spec: dict[str, Any]

    @property
    def containers(self) -> list[dict[str, Any]]:
        """Init containers, then containers (Guaranteed QoS and image rules apply to both)."""
        out = []
        for key in ("initContainers", "containers"):
            items = self.spec.get(key)
            out += [c for c in items if isinstance(c, dict)] if isinstance(items, list) else []
        return out

    @property
    def main_container(self) -> dict[str, Any] | None:
        """The Ray container (KubeRay runs Ray in ``containers[0]``) or the first container."""
        items = self.spec.get("containers")
        return items[0] if isinstance(items, list) and items and isinstance(items[0], dict) else None

    @property
    def node_selector(self) -> dict[str, Any]:
        sel = self.spec.get("nodeSelector")
        return sel if isinstance(sel, dict) else {}

    @property
    def label(self) -> str:
        return f"{self.resource.name} {self.role}"


def ray_specs(stack: Stack) -> list[tuple[Resource, dict[str, Any]]]:
    """(resource, RayCluster spec) for every RayCluster, RayJob and RayService."""
    out = []
    for r in stack.of_type(*_RAY_SPEC_PATHS):
        spec = dig(r.props, "spec", *_RAY_SPEC_PATHS[r.type])
        if isinstance(spec, dict):
            out.append((r, spec))
    return out


def pods(stack: Stack) -> list[Pod]:
    """Every pod template the stack declares (Helm releases are opaque and not included)."""
    out = []
    for r, spec in ray_specs(stack):
        head = dig(spec, "headGroupSpec", "template", "spec")
        if isinstance(head, dict):
            out.append(Pod(r, "head", 1, head))
        for g in dig(spec, "workerGroupSpecs", default=[]) or []:
            if isinstance(g, dict) and isinstance(dig(g, "template", "spec"), dict):
                out.append(Pod(r, f"worker {g.get('groupName', '?')}", g.get("replicas", UNKNOWN), g["template"]["spec"]))
    for r in stack.of_type(*_POD_TEMPLATE_PATHS):
        path = _POD_TEMPLATE_PATHS[r.type]
        spec = dig(r.props, "spec", *path, "spec") if path else dig(r.props, "spec")
        if isinstance(spec, dict):
            replicas = dig(r.props, "spec", "replicas", default=1) if "apps/v1" in r.type else 1
            out.append(Pod(r, "pod", replicas, spec))
    return out


# Kubernetes quantities: https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
_SUFFIX = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
           "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
           "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
           "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
           "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60}


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity as a number (``"500m"`` -> 0.5, ``"8Gi"`` -> 8589934592), None if unparseable."""
    if isinstance(value, bool) or value is None or value is UNKNOWN:
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    text = str(value).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            number, factor = text[: -len(suffix)], _SUFFIX[suffix]
            break
    else:
        number, factor = text, Decimal(1)
    try:
        return Decimal(number) * factor
    except InvalidOperation:
        return None


def container_resources(c: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(requests, limits); Kubernetes defaults a missing request to its limit."""
    res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
    limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
    requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
    return {**limits, **requests}, dict(limits)


def qos_problem(c: dict[str, Any]) -> str | None:
    """Why ``c`` is not Guaranteed QoS (None if it is): cpu and memory limits, and requests equal to limits."""
    requests, limits = container_resources(c)
    if UNKNOWN in requests.values() or UNKNOWN in limits.values():
        return None
    missing = [k for k in ("cpu", "memory") if k not in limits]
    if missing:
        return f"no {' or '.join(missing)} limit"
    diffs = []
    for key in sorted(set(requests) | set(limits)):
        req, lim = requests.get(key), limits.get(key)
        if lim is None:
            diffs.append(f"{key} requested ({req}) without a limit")
        elif quantity(req) is None or quantity(lim) is None:
            if str(req) != str(lim):
                diffs.append(f"requests.{key}={req} != limits.{key}={lim}")
        elif quantity(req) != quantity(lim):
            diffs.append(f"requests.{key}={req} != limits.{key}={lim}")
    return "; ".join(diffs) or None


def pod_amount(pod: Pod, resource: str) -> Any:
    """Sum of ``resource`` over the pod's containers (limits, else requests): an int, a quantity string, or UNKNOWN."""
    total, raw = Decimal(0), []
    for c in pod.spec.get("containers") or []:
        if not isinstance(c, dict):
            continue
        requests, limits = container_resources(c)
        value = limits.get(resource, requests.get(resource))
        if value is UNKNOWN:
            return UNKNOWN
        if value is None:
            continue
        raw.append(value)
        q = quantity(value)
        if q is None:
            return UNKNOWN
        total += q
    if len(raw) == 1 and isinstance(raw[0], str):
        return raw[0]
    return int(total) if total == total.to_integral_value() else float(total)


def pod_count(pod: Pod, resource: str) -> int:
    """A countable extended resource (GPUs, EFA interfaces) the pod asks for; 0 when absent or unknown."""
    amount = pod_amount(pod, resource)
    q = quantity(amount) if amount is not UNKNOWN else None
    return int(q) if q is not None else 0


def efa_requested(pod: Pod) -> int:
    return pod_count(pod, EFA_RESOURCE)


def pod_env(pod: Pod) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for c in pod.containers:
        for e in c.get("env") or []:
            if isinstance(e, dict) and "name" in e:
                env[e["name"]] = e.get("value")
    return env


def node_groups_for(pod: Pod, groups: list[NodeGroup]) -> list[NodeGroup]:
    """The node groups whose labels satisfy the pod's nodeSelector (all of them when it has none)."""
    sel = pod.node_selector
    return [g for g in groups if all(g.labels.get(k) == v for k, v in sel.items())]


# -- images --------------------------------------------------------------------------------------------------------

def image_problem(image: Any) -> str | None:
    """Why ``image`` is not reproducible (None if pinned by a tag other than latest, or by digest)."""
    from ..components.config import image_tag

    if image is UNKNOWN:
        return None
    if not isinstance(image, str) or not image:
        return "has no image"
    if "@sha256:" in image.rsplit("/", 1)[-1]:
        return None
    tag = image_tag(image)
    if tag is None:
        return f"image {image} has no tag (means :latest)"
    if tag == "latest":
        return f"image {image} uses the mutable :latest tag"
    return None


# -- EFA intent, security group self rules -------------------------------------------------------------------------

def efa_intent(stack: Stack) -> list[str]:
    """Why the stack means to use EFA (empty when it does not)."""
    reasons = []
    for g in gpu_node_groups(stack):
        if g.efa_enabled:
            reasons.append(f"{g.resource.name} has EFA ({g.efa_source})")
    for p in pods(stack):
        if efa_requested(p):
            reasons.append(f"{p.label} requests {EFA_RESOURCE}")
        elif pod_env(p).get("FI_PROVIDER") == "efa":
            reasons.append(f"{p.label} sets FI_PROVIDER=efa")
    for r in helm_releases(stack):
        if r["chart"] == EFA_PLUGIN_CHART:
            reasons.append(f"Helm release {r['name']} installs {EFA_PLUGIN_CHART}")
    return reasons


@dataclass
class SelfRule:
    """An all-traffic rule of a security group that references that same group."""

    resource: Resource
    direction: Any
    """``ingress``, ``egress`` or UNKNOWN."""
    security_group_id: Any


def _all_protocols(value: Any) -> bool:
    return value is UNKNOWN or str(value).lower() in ("-1", "all")


def _same(a: Any, b: Any, r: Resource, prop_a: str, prop_b: str) -> bool:
    """Whether two ids are the same group; during a preview, unknown ids compare by their source resources."""
    if a is UNKNOWN or b is UNKNOWN:
        da, db = r.deps.get(prop_a), r.deps.get(prop_b)
        return not (da and db) or set(da) == set(db)
    return isinstance(a, str) and a == b


def self_rules(stack: Stack) -> list[SelfRule]:
    """Self-referencing all-traffic rules, in the three ways AWS resources can declare them."""
    out = []
    for r in stack.of_type(SG_EGRESS, SG_INGRESS):
        p = r.props
        if _all_protocols(p.get("ipProtocol")) and _same(p.get("securityGroupId"), p.get("referencedSecurityGroupId"),
                                                         r, "securityGroupId", "referencedSecurityGroupId"):
            out.append(SelfRule(r, "egress" if r.type == SG_EGRESS else "ingress", p.get("securityGroupId")))
    for r in stack.of_type(SG_RULE):
        p = r.props
        is_self = p.get("self") is True or _same(p.get("securityGroupId"), p.get("sourceSecurityGroupId"),
                                                 r, "securityGroupId", "sourceSecurityGroupId")
        if _all_protocols(p.get("protocol")) and is_self and p.get("type") in ("ingress", "egress", UNKNOWN):
            out.append(SelfRule(r, p.get("type"), p.get("securityGroupId")))
    for r in stack.of_type(SECURITY_GROUP):
        for direction in ("ingress", "egress"):
            for rule in r.props.get(direction) or []:
                if isinstance(rule, dict) and rule.get("self") is True and _all_protocols(rule.get("protocol")):
                    out.append(SelfRule(r, direction, r.id or UNKNOWN))
    return out


# -- Helm, dashboard exposure, cost --------------------------------------------------------------------------------

def helm_releases(stack: Stack) -> list[dict[str, Any]]:
    """``{"name", "chart", "version"}`` of every Helm release / v4 chart."""
    out = []
    for r in stack.of_type(HELM_RELEASE, HELM_CHART_V4):
        chart = r.props.get("chart")
        chart = chart.rsplit("/", 1)[-1] if isinstance(chart, str) else chart
        out.append({"name": r.name, "chart": chart, "version": r.props.get("version")})
    return out


_INTERNAL_ANNOTATIONS = {
    "service.beta.kubernetes.io/aws-load-balancer-internal": ("true", "0.0.0.0/0"),
    "service.beta.kubernetes.io/aws-load-balancer-scheme": ("internal",),
    "alb.ingress.kubernetes.io/scheme": ("internal",),
}


def _internal(annotations: Any) -> bool:
    if not isinstance(annotations, dict):
        return False
    return any(str(annotations.get(k, "")).lower() in v for k, v in _INTERNAL_ANNOTATIONS.items())


def _open_to_world(spec: Any) -> bool:
    ranges = dig(spec, "loadBalancerSourceRanges")
    return not isinstance(ranges, list) or not ranges or any(r in ("0.0.0.0/0", "::/0") for r in ranges)


def _dashboard_port(port: Any) -> bool:
    return isinstance(port, dict) and (port.get("port") == DASHBOARD_PORT or port.get("targetPort") in (DASHBOARD_PORT, "dashboard")
                                       or port.get("name") == "dashboard")


def dashboard_exposures(stack: Stack) -> list[tuple[Resource, str]]:
    """(resource, how) for every way the stack puts a Ray dashboard on a public load balancer or ingress."""
    out = []
    for r, spec in ray_specs(stack):
        head = dig(spec, "headGroupSpec", default={}) or {}
        params = head.get("rayStartParams") if isinstance(head.get("rayStartParams"), dict) else {}
        if str(params.get("include-dashboard", "true")).lower() == "false":
            continue
        host = params.get("dashboard-host", "0.0.0.0")  # KubeRay's default when unset
        if host in ("127.0.0.1", "localhost", "::1"):
            continue
        svc = head.get("headService") if isinstance(head.get("headService"), dict) else {}
        annotations = dig(svc, "metadata", "annotations")
        if head.get("serviceType") == "LoadBalancer" and not _internal(annotations) and _open_to_world(dig(svc, "spec")):
            out.append((r, f"headGroupSpec.serviceType is LoadBalancer with dashboard-host {host}: the dashboard "
                           f"(port {DASHBOARD_PORT}, which can submit jobs) is on an internet-facing load balancer"))
        if head.get("enableIngress") is True:
            out.append((r, "headGroupSpec.enableIngress makes KubeRay create an Ingress to the dashboard"))
    for r in stack.of_type(SERVICE):
        spec = dig(r.props, "spec", default={}) or {}
        if spec.get("type") == "LoadBalancer" and any(_dashboard_port(p) for p in spec.get("ports") or []) \
                and not _internal(dig(r.props, "metadata", "annotations")) and _open_to_world(spec):
            out.append((r, f"Service of type LoadBalancer exposes the Ray dashboard port {DASHBOARD_PORT} to the internet"))
    for r in stack.of_type(INGRESS):
        if _internal(dig(r.props, "metadata", "annotations")):
            continue
        for backend in _ingress_backends(dig(r.props, "spec", default={}) or {}):
            name = dig(backend, "name") or ""
            port = dig(backend, "port", default={}) or {}
            if port.get("number") == DASHBOARD_PORT or port.get("name") == "dashboard" or (
                    isinstance(name, str) and name.endswith("-head-svc")):
                out.append((r, f"Ingress routes to the Ray head service {name} (dashboard) without an internal scheme"))
                break
    return out


def _ingress_backends(spec: dict[str, Any]) -> list[Any]:
    backends = [dig(spec, "defaultBackend", "service")]
    for rule in spec.get("rules") or []:
        for path in dig(rule, "http", "paths", default=[]) or []:
            backends.append(dig(path, "backend", "service"))
    return [b for b in backends if isinstance(b, dict)]


def capacity_mode(g: NodeGroup) -> str:
    """How a node group's instances are billed: on-demand, reservation (an ODCR) or capacity-block."""
    if g.market_type == "capacity-block" or g.capacity_type == "CAPACITY_BLOCK":
        return CAPACITY_BLOCK
    return RESERVATION if isinstance(g.reservation, str) and g.reservation else ON_DEMAND


def reserved_instances(stack: Stack, g: NodeGroup) -> int | None:
    """The instance count of the ODCR a node group targets, as the read reservation says (None: not known)."""
    if not isinstance(g.reservation, str) or not g.reservation:
        return None
    for r in stack.of_type(CAPACITY_RESERVATION):
        if g.reservation in (r.id, dig(r.props, "id")) and isinstance(dig(r.props, "instanceCount"), (int, float)):
            return int(dig(r.props, "instanceCount"))
    return None


def cluster_versions(stack: Stack) -> list[str | None]:
    """The Kubernetes version of each EKS cluster (None where not set or unknown)."""
    out = []
    for c in [*stack.of_type(EKS_COMPONENT), *stack.of_type(EKS_CLUSTER)]:
        parent = stack.parent_of(c)
        if c.type == EKS_CLUSTER and parent is not None and parent.type == EKS_COMPONENT:
            continue
        v = dig(c.props, "version")
        out.append(v if isinstance(v, str) else None)
    return out


def hourly_cost(stack: Stack, region: str) -> tuple[float | None, list[str]]:
    """USD/hour of nodes as their capacity is billed (on demand: running nodes; ODCR: every reserved instance; Capacity
    Block: nothing, paid up front) + EKS control planes at their version's rate today + NAT gateways; (None, why)
    when a price is missing."""
    nodes, missing = [], []
    for g in node_groups(stack):
        if not isinstance(g.nodes, int):
            missing.append(f"{g.resource.name}: node count unknown")
            continue
        mode = capacity_mode(g)
        count = 0 if mode == CAPACITY_BLOCK else max(g.nodes, reserved_instances(stack, g) or 0)
        if count == 0:
            continue
        types = [CATALOGUE[t] for t in g.instance_types if t in CATALOGUE]
        if not types:
            missing.append(f"{g.resource.name}: no catalogue price for {g.instance_types}")
            continue
        nodes.append((types[0], count))
    if missing:
        return None, missing
    planes = sum(eks_versions.control_plane_usd_hour(v) if v else eks_versions.STANDARD_USD_HOUR
                 for v in cluster_versions(stack))
    try:
        return round(hourly_usd(region, nodes, 0, len(stack.of_type(NAT_GATEWAY))) + planes, 4), []
    except NoPrice as e:  # a region without figures: say so, never borrow another region's
        return None, [str(e)]


def cost_notes(stack: Stack, region: str) -> list[str]:
    """What the GPU capacity costs and what stops it, and the control plane's rate (its version's support state)."""
    notes = []
    for g in node_groups(stack):
        types = [CATALOGUE[t] for t in g.instance_types if t in CATALOGUE]
        mode = capacity_mode(g)
        if not g.gpu or not types or (mode == ON_DEMAND and not isinstance(g.nodes, int)):
            continue
        notes += capacity_notes(mode, types[0], region, g.nodes if isinstance(g.nodes, int) else 0,
                                reserved_instances(stack, g), g.reservation if isinstance(g.reservation, str) else None)
    notes += [control_plane_note(v) for v in cluster_versions(stack)]
    warnings = [w for v in cluster_versions(stack) if v and (w := eks_versions.version_warning(v))]
    return notes + [f"warning: {w}" for w in warnings]
