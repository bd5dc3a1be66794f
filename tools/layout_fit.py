"""Pod placement: do the stack's pods fit on its nodes, as the Kubernetes scheduler would place them?

Every node group contributes its nodes at their largest count (an autoscaled group at ``maxSize``: the workers the
EFA gate asks for run on all of them at once), each with the group's labels, taints and the allocatable EKS's
AL2023 AMI leaves. Every pod of ``tools/layout_fit_pods.py`` (the stack's, the charts', EKS's add-ons') is then
placed: a DaemonSet's pod on every node it admits, any other pod on the first node that admits it and still has
room. What does not fit is a :class:`Unplaced` with the node group, the resource and the figures.

Allocatable is EKS's AL2023 AMI's (kube-reserved, eviction threshold, maxPods; ``components/nodes/node_allocatable.py``
cites nodeadm and names its one assumption).

Requests (kubernetes.io/docs/concepts/workloads/pods/init-containers/#resource-sharing-within-containers and
/docs/concepts/workloads/pods/sidecar-containers/#resource-sharing-within-containers): a pod's effective request is
the larger of its largest init container (plus the native sidecars started before it) and the sum of its containers
plus its native sidecars (init containers with ``restartPolicy: Always``); a missing request defaults to the limit.
Pod overhead (a RuntimeClass's) is not added: the stack sets no RuntimeClass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ..components.nodes.instances import CATALOGUE
from ..components.nodes.node_allocatable import allocatable_cpu_m, allocatable_memory_mib
from .layout import EFA_RESOURCE, EKS_CLUSTER, EKS_COMPONENT, GPU_RESOURCE, UNKNOWN, Stack, dig
from .layout_fit_pods import FitPod, all_pods
from .layout_node_groups import node_groups
from .layout_pods import container_resources, quantity

STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
"""A taint the node agent removes once the node is proven (components/addons/node_agent.py): pods that do not tolerate it
are placed on the proven node, so it does not keep them off; pods that do (the node agent) run before the proof."""
RESOURCES = ("cpu", "memory", "pods", GPU_RESOURCE, EFA_RESOURCE)


def allocatable(instance_type: str) -> dict[str, Decimal] | None:
    """cpu (cores), memory (bytes), pods, GPUs and EFA interfaces a node of this type offers pods; None if unknown."""
    it = CATALOGUE.get(instance_type)
    if it is None or not it.max_pods:
        return None
    return {
        "cpu": Decimal(allocatable_cpu_m(it)) / 1000,
        "memory": Decimal(allocatable_memory_mib(it)) * 2**20,
        "pods": Decimal(it.max_pods),
        GPU_RESOURCE: Decimal(it.gpus),
        EFA_RESOURCE: Decimal(it.max_efa_interfaces if it.efa_supported else 0),
    }


# -- requests ------------------------------------------------------------------------------------------------------


def _requests(c: dict[str, Any]) -> dict[str, Decimal]:
    requests, _ = container_resources(c)
    out = {}
    for k, v in requests.items():
        q = quantity(v)
        if q is not None:
            out[k] = q
    return out


def _add(a: dict[str, Decimal], b: dict[str, Decimal]) -> dict[str, Decimal]:
    return {k: a.get(k, Decimal(0)) + b.get(k, Decimal(0)) for k in set(a) | set(b)}


def _max(a: dict[str, Decimal], b: dict[str, Decimal]) -> dict[str, Decimal]:
    return {k: max(a.get(k, Decimal(0)), b.get(k, Decimal(0))) for k in set(a) | set(b)}


def effective_requests(spec: dict[str, Any]) -> dict[str, Decimal]:
    """The pod's requests by Kubernetes' init-container rule (native sidecars count with the containers), plus one
    pod slot."""
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or []:
        if not isinstance(c, dict):
            continue
        if c.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, _requests(c))
        else:
            init_peak = _max(init_peak, _add(sidecars, _requests(c)))
    running = sidecars
    for c in spec.get("containers") or []:
        if isinstance(c, dict):
            running = _add(running, _requests(c))
    return {**_max(init_peak, running), "pods": Decimal(1)}


# -- admission -----------------------------------------------------------------------------------------------------


def _expr_ok(labels: dict[str, str], e: dict[str, Any]) -> bool:
    key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
    if UNKNOWN in (key, op, e.get("values")) or (isinstance(values, list) and UNKNOWN in values):
        return True  # only `up` knows: never refused on that
    have = labels.get(key)
    if op == "In":
        return have in values
    if op == "NotIn":
        return have not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and have is not None and have.lstrip("-").isdigit() and values:
        return int(have) > int(values[0]) if op == "Gt" else int(have) < int(values[0])
    return False


def _tolerates(tolerations: list[Any], taint: dict[str, str]) -> bool:
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator") == "Exists":
            if t.get("key") in (None, "", taint["key"]):
                return True
        elif t.get("key") == taint["key"] and str(t.get("value", "")) == taint.get("value", ""):
            return True
    return False


def why_not(spec: dict[str, Any], labels: dict[str, str], taints: list[dict[str, str]]) -> str | None:
    """Why a node with these labels and taints does not admit the pod (None if it does): the nodeSelector, the
    required node affinity (terms ORed, expressions ANDed), or a NoSchedule/NoExecute taint it does not tolerate."""
    sel = spec.get("nodeSelector") or {}
    wrong = {k: v for k, v in sel.items() if labels.get(k) != v and v is not UNKNOWN} if isinstance(sel, dict) else {}
    if wrong:
        return "its nodeSelector " + ", ".join(f"{k}={v}" for k, v in sorted(wrong.items())) + " does not match"
    terms = dig(spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
    if (
        isinstance(terms, list)
        and terms
        and not any(
            all(_expr_ok(labels, e) for e in (t.get("matchExpressions") or []) if isinstance(e, dict))
            for t in terms
            if isinstance(t, dict)
        )
    ):
        return "its required node affinity matches no label of the node"
    tolerations = spec.get("tolerations")
    if tolerations is UNKNOWN or (isinstance(tolerations, list) and UNKNOWN in tolerations):
        return None  # only `up` knows what it tolerates: never refused on that
    tolerations = tolerations if isinstance(tolerations, list) else []
    for taint in taints:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
            return f"it does not tolerate the taint {taint['key']}={taint.get('value', '')}:{taint['effect']}"
    return None


# -- nodes and placement -------------------------------------------------------------------------------------------

_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


@dataclass
class Node:
    group: str
    index: int
    instance_type: str
    labels: dict[str, str]
    taints: list[dict[str, str]]
    allocatable: dict[str, Decimal]
    used: dict[str, Decimal] = field(default_factory=dict)
    pods: list[str] = field(default_factory=list)

    def free(self, resource: str) -> Decimal:
        return self.allocatable.get(resource, Decimal(0)) - self.used.get(resource, Decimal(0))

    def short(self, req: dict[str, Decimal]) -> str | None:
        """The first resource the node lacks for ``req`` (None if it fits)."""
        for k in sorted(req, key=lambda k: (k not in RESOURCES, RESOURCES.index(k) if k in RESOURCES else 0, k)):
            if req[k] > 0 and req[k] > self.free(k):
                return k
        return None

    def take(self, name: str, req: dict[str, Decimal]) -> None:
        self.used = _add(self.used, req)
        self.pods.append(name)


@dataclass
class GroupFit:
    """One node group: its nodes with what they hold."""

    name: str
    instance_type: str
    nodes: list[Node]
    note: str = ""

    @property
    def allocatable(self) -> dict[str, Decimal]:
        return self.nodes[0].allocatable if self.nodes else {}


@dataclass
class Unplaced:
    """A pod the scheduler would leave Pending."""

    pod: str
    source: str
    group: str | None
    """The node group that admits it but has no room (None: no group admits it)."""
    resource: str | None
    requested: Decimal | None
    free: Decimal | None
    allocatable: Decimal | None
    reasons: list[str]
    """Per node group, why it does not admit the pod (when ``group`` is None)."""
    node_label: str = ""


@dataclass
class Fit:
    groups: list[GroupFit]
    unplaced: list[Unplaced]
    not_modelled: list[str]
    """Charts or node groups the model cannot size (named, never guessed)."""
    complete: bool = True
    """The stack creates its cluster and every node of it is modelled: only then is a pod the model cannot place a
    pod nothing can place (a program that adds node groups to a cluster made elsewhere, or a preview fragment, may
    have nodes this stack does not show)."""


def _taints(props: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    for t in props.get("taints") or []:
        if isinstance(t, dict) and isinstance(t.get("key"), str):
            effect = _EFFECTS.get(str(t.get("effect")), str(t.get("effect")))
            out.append({"key": t["key"], "value": str(t.get("value") or ""), "effect": effect})
    return out


def _nodes(stack: Stack) -> tuple[list[GroupFit], list[str]]:
    groups, skipped = [], []
    for g in sorted(node_groups(stack), key=lambda g: (g.gpu, g.resource.name)):
        count = g.max_nodes if g.max_nodes is not None else g.nodes
        itype = g.instance_types[0] if len(g.instance_types) == 1 else None
        alloc = allocatable(itype) if itype else None
        unknown = [k for k in ("labels", "taints") if g.props.get(k) is UNKNOWN]
        if alloc is None or not isinstance(count, int) or unknown:
            skipped.append(
                f"node group {g.resource.name} ({', '.join(g.instance_types) or 'no instance type'}, "
                f"{count if count is not UNKNOWN else 'unknown'} nodes"
                f"{', unknown ' + ' and '.join(unknown) if unknown else ''})"
            )
            continue
        labels = {
            **{k: v for k, v in g.labels.items() if isinstance(v, str)},
            "node.kubernetes.io/instance-type": itype,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        taints = _taints(g.props)
        if isinstance(g.efa_interfaces, int):
            alloc = {**alloc, EFA_RESOURCE: Decimal(g.efa_interfaces)}
        groups.append(
            GroupFit(
                g.resource.name,
                itype,
                [Node(g.resource.name, i, itype, labels, taints, dict(alloc)) for i in range(count)],
            )
        )
    return groups, skipped


def _placement_taints(node: Node) -> list[dict[str, str]]:
    """The taints that keep a pod off a node for good (the startup taint is gone once the node is proven)."""
    return [t for t in node.taints if not t["key"].startswith(STARTUP_TAINT_PREFIX)]


def _own_cluster(stack: Stack) -> tuple[bool, list[str]]:
    """Whether the stack creates its EKS cluster, and the nodes it has that no node group here describes."""
    clusters = stack.of_type(EKS_COMPONENT, EKS_CLUSTER)
    default_group = [
        f"{c.name}: pulumi-eks's default node group"
        for c in stack.of_type(EKS_COMPONENT)
        if c.props.get("skipDefaultNodeGroup") is not True
    ]
    return bool(clusters), default_group


def fit(stack: Stack) -> Fit:
    """Place every pod of the stack on its nodes; what cannot be placed is in ``unplaced``."""
    groups, skipped = _nodes(stack)
    own, hidden = _own_cluster(stack)
    skipped += hidden
    pods, unknown_charts = all_pods(stack, eks_addons=own)
    nodes = [n for g in groups for n in g.nodes]
    unplaced: list[Unplaced] = []
    ordered = [p for p in pods if p.daemonset] + [p for p in pods if not p.daemonset]
    for p in ordered:
        req = effective_requests(p.spec)
        admitting = [n for n in nodes if why_not(p.spec, n.labels, _placement_taints(n)) is None]
        if p.daemonset:
            for n in admitting:
                _place(p, req, [n], unplaced)
            continue
        if not admitting and p.replicas > 0:
            reasons = [
                f"{g.name}: {why_not(p.spec, g.nodes[0].labels, _placement_taints(g.nodes[0]))}"
                for g in groups
                if g.nodes
            ]
            unplaced.append(
                Unplaced(
                    p.name,
                    p.source,
                    None,
                    None,
                    None,
                    None,
                    None,
                    reasons or ["the stack has no node (every node group is empty)"],
                )
            )
            continue
        for _ in range(p.replicas):
            _place(p, req, admitting, unplaced)
    return Fit(
        groups,
        unplaced,
        [f"chart {c}: its pods are not known here" for c in unknown_charts] + skipped,
        own and not skipped,
    )


def _place(p: FitPod, req: dict[str, Decimal], candidates: list[Node], unplaced: list[Unplaced]) -> None:
    for n in candidates:
        if n.short(req) is None:
            n.take(p.name, req)
            return
    best = max(candidates, key=lambda n: n.free("cpu"))  # the node that came closest, for the message
    short = best.short(req) or "cpu"
    unplaced.append(
        Unplaced(
            p.name,
            p.source,
            best.group,
            short,
            req.get(short),
            best.free(short),
            best.allocatable.get(short),
            [],
            f"{best.group}[{best.index}]",
        )
    )


# -- figures -------------------------------------------------------------------------------------------------------


def show(resource: str, value: Decimal | None) -> str:
    """``3920m`` for CPU, ``14.2Gi`` for memory, a count for the rest."""
    if value is None:
        return "?"
    if resource == "cpu":
        return f"{int(value * 1000)}m"
    if resource == "memory":
        return f"{value / 2**30:.2f}Gi"
    return str(int(value))


def problem_line(u: Unplaced) -> str:
    """One refusal: the pod, the node group, the resource and the figures."""
    if u.group is None:
        return f"pod {u.pod} ({u.source}) fits no node group: " + "; ".join(u.reasons)
    used = (u.allocatable or 0) - (u.free or 0)
    return (
        f"pod {u.pod} ({u.source}) does not fit on node group {u.group}: it requests {u.resource} "
        f"{show(u.resource, u.requested)}, the other pods there already request {show(u.resource, used)} of "
        f"{show(u.resource, u.allocatable)} allocatable ({show(u.resource, u.free)} free)"
    )


def summary(f: Fit) -> dict[str, Any]:
    """Per node group: allocatable per node, requested per node and the pods on each node (the plan's ``podFit``)."""
    out: dict[str, Any] = {}
    for g in f.groups:
        out[g.name] = {
            "instanceType": g.instance_type,
            "nodes": len(g.nodes),
            "allocatablePerNode": {k: show(k, g.allocatable.get(k)) for k in ("cpu", "memory", "pods")},
            "perNode": [
                {
                    "cpu": show("cpu", n.used.get("cpu", Decimal(0))),
                    "memory": show("memory", n.used.get("memory", Decimal(0))),
                    "pods": sorted(n.pods),
                }
                for n in g.nodes
            ],
        }
    if f.unplaced:
        out["(unplaced)"] = [problem_line(u) for u in f.unplaced]
    if f.not_modelled:
        out["(not modelled)"] = list(f.not_modelled)
    return out
