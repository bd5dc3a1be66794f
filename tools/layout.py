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
from typing import Any


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
_UNKNOWN_SENTINELS = frozenset(
    {
        "04da6b54-80e4-46f7-96ec-b56ff0331ba9",  # string (also the Python SDK's UNKNOWN)
        "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",  # boolean
        "3eeb2bf0-c639-47a8-9e75-3b44932eb421",  # number
        "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",  # array
        "030794c1-ac77-496b-92df-f27374a8bd58",  # asset
        "e48ece36-62e2-4504-bad9-02848725956a",  # archive
        "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",  # object
    }
)


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
        return {
            "type": self.type,
            "name": self.name,
            "urn": self.urn,
            "parent": self.parent,
            "id": self.id,
            "props": _jsonable(self.props),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Resource":
        return cls(
            d["type"],
            d["name"],
            d.get("urn") or f"{d['type']}::{d['name']}",
            d.get("parent"),
            plain(d.get("props") or {}),
            d.get("id"),
            {k: list(v) for k, v in (d.get("deps") or {}).items()},
        )


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
    return [
        Resource(r.type, r.name, r.urn or f"{r.type}::{r.name}", r.parent, plain(r.inputs), ids.get(r.urn))
        for r in run.resources
    ]


def from_policy(resources: Iterable[Any]) -> list[Resource]:
    """``pulumi_policy.PolicyResource`` objects (outputs as props, unknowns kept as UNKNOWN)."""
    out = []
    for r in resources:
        parent = (
            r.parent.urn
            if getattr(r, "parent", None) is not None
            else getattr(getattr(r, "opts", None), "parent", None)
        )
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
        return self.by_urn.get(r.parent)  # no parent (None) names no resource

    def resolve(self, ref: Any) -> Resource | None:
        """The resource an id (or URN) names, if it is in the stack and known."""
        if not isinstance(ref, str):
            return None
        return self.by_id.get(ref) or self.by_urn.get(ref)
