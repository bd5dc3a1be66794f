"""Queue layout rule: a team's GPU quota (Kueue ClusterQueue) fits in the GPU node groups its flavor names.

Kueue admits a job when its quota is free, not when its nodes can exist (docs/team-jobs.md, "All or nothing"): a
quota above what the node group can scale to would admit a job whose last workers wait for nodes that never come,
holding the nodes the first ones got. The capacity of a ResourceFlavor is the GPU node groups whose labels carry its
``nodeLabels``: each group's most nodes (the Cluster Autoscaler's ``maxSize`` when it scales the group, else its
desired size) x the type's GPUs. A parked group (no nodes, not scaled) is left alone: nothing runs there anyway.
"""

from __future__ import annotations

from typing import Any

from ..components.queues.team_queues import GPU_RESOURCE
from . import layout_node_groups
from .layout import UNKNOWN, Resource, Stack, dig
from .violations import violation

CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
RESOURCE_FLAVOR = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"
QUEUE_QUOTA_FIX = (
    "lower the teams' GPU quotas (ray-efa-eks:jobQueues; :borrow lends idle quota without a larger "
    "nominal quota) or raise the GPU node group's size (gpuNodeCount)"
)


def _name(r: Resource) -> Any:
    return dig(r.props, "metadata", "name")


def _gpu_quotas(cq: Resource) -> list[tuple[str, Any]]:
    """(flavor, nominal nvidia.com/gpu quota) of a ClusterQueue."""
    out = []
    for group in dig(cq.props, "spec", "resourceGroups", default=[]) or []:
        for flavor in dig(group, "flavors", default=[]) or []:
            for res in dig(flavor, "resources", default=[]) or []:
                if dig(res, "name") == GPU_RESOURCE:
                    out.append((dig(flavor, "name"), dig(res, "nominalQuota")))
    return out


def _capacity(stack: Stack, flavor: Resource) -> int | None:
    """GPUs the node groups matching the flavor's nodeLabels can hold; None when unknown or parked."""
    labels = dig(flavor.props, "spec", "nodeLabels")
    if not isinstance(labels, dict) or not labels:
        return None
    total, seen = 0, False
    for g in layout_node_groups.gpu_node_groups(stack):
        if not all(g.labels.get(k) == v for k, v in labels.items()) or not g.gpus_per_node:
            continue
        most = g.max_nodes if isinstance(g.max_nodes, int) else g.nodes
        if most is UNKNOWN or not isinstance(most, (int, float)):
            return None
        total, seen = total + int(most) * g.gpus_per_node, True
    return total if seen and total > 0 else None


def queue_quota_fits(stack: Stack) -> list[Any]:
    flavors = {_name(f): f for f in stack.of_type(RESOURCE_FLAVOR)}
    out, used = [], {}
    for cq in stack.of_type(CLUSTER_QUEUE):
        for flavor, quota in _gpu_quotas(cq):
            if flavor not in flavors or not isinstance(quota, (int, float)) or isinstance(quota, bool):
                continue
            cap = _capacity(stack, flavors[flavor])
            if cap is None:
                continue
            used.setdefault(flavor, []).append((cq, int(quota)))
            if quota > cap:
                out.append(
                    violation(
                        "queue-quota-fits",
                        cq,
                        f"its GPU quota ({int(quota)}) exceeds what the node groups "
                        f"of flavor {flavor} can hold ({cap} GPUs)",
                        QUEUE_QUOTA_FIX,
                    )
                )
    for flavor, queues in used.items():
        cap, total = _capacity(stack, flavors[flavor]), sum(q for _, q in queues)
        if cap is not None and total > cap and len(queues) > 1:
            names = ", ".join(f"{_name(cq)} {q}" for cq, q in queues)
            out.append(
                violation(
                    "queue-quota-fits",
                    None,
                    f"the ClusterQueues on flavor {flavor} promise {total} GPUs "
                    f"({names}) and its node groups hold {cap}",
                    QUEUE_QUOTA_FIX,
                )
            )
    return out
