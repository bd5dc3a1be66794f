"""The pod templates of a stack (Ray head and worker groups, Jobs, Deployments...), their resource requests and
QoS, and their images."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from .layout import EFA_RESOURCE, RAY_CLUSTER, RAY_JOB, RAY_SERVICE, UNKNOWN, Resource, Stack, dig
from .layout_node_groups import NodeGroup

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
        for g in dig(spec, "workerGroupSpecs") or []:
            if isinstance(g, dict) and isinstance(dig(g, "template", "spec"), dict):
                count = g.get("replicas", UNKNOWN)
                if "replicas" not in g and "maxReplicas" in g:  # Ray's autoscaler owns it: show the range
                    count = f"{g.get('minReplicas', 0)}..{g['maxReplicas']}"
                out.append(Pod(r, f"worker {g.get('groupName', '?')}", count, g["template"]["spec"]))
    for r in stack.of_type(*_POD_TEMPLATE_PATHS):
        path = _POD_TEMPLATE_PATHS[r.type]
        spec = dig(r.props, "spec", *path, "spec") if path else dig(r.props, "spec")
        if isinstance(spec, dict):
            replicas = dig(r.props, "spec", "replicas", default=1)  # a Pod, Job or DaemonSet has none: one
            out.append(Pod(r, "pod", replicas, spec))
    return out


# Kubernetes quantities: https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def _unit(text: str) -> str:
    """The suffix a quantity's text ends with, "" for none (no suffix ends another: Gi and G cannot both match)."""
    return next((s for s in _SUFFIX if s and text.endswith(s)), "")


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity as a number (``"500m"`` -> 0.5, ``"8Gi"`` -> 8589934592), None if unparseable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):  # None, UNKNOWN, a list...
        return None
    text = value.strip()
    unit = _unit(text)
    try:
        return Decimal(text.removesuffix(unit)) * _SUFFIX[unit]
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
        elif _comparable(req) != _comparable(lim):
            diffs.append(f"requests.{key}={req} != limits.{key}={lim}")
    return "; ".join(diffs) or None


def _comparable(value: Any) -> Any:
    """A quantity's number (2 and 2000m are equal), or its text when it is not a quantity (compared as written)."""
    q = quantity(value)
    return str(value) if q is None else q


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
    if all(isinstance(v, str) for v in raw) and len(units := {_unit(v.strip()) for v in raw}) == 1:
        suffix = units.pop()
        scaled = total / _SUFFIX[suffix]  # several containers in one unit: their sum in that unit (128Mi + 160Mi)
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return int(total) if total == total.to_integral_value() else float(total)


def pod_count(pod: Pod, resource: str) -> int:
    """A countable extended resource (GPUs, EFA interfaces) the pod asks for; 0 when absent or unknown."""
    q = quantity(pod_amount(pod, resource))  # None when UNKNOWN
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
    from ..components.config.config import image_tag

    if image is UNKNOWN:
        return None
    if not isinstance(image, str) or not image:
        return "has no image"
    if "@sha256:" in image:  # a digest (no registry host or path holds "@")
        return None
    tag = image_tag(image)
    if tag is None:
        return f"image {image} has no tag (means :latest)"
    if tag == "latest":
        return f"image {image} uses the mutable :latest tag"
    return None
