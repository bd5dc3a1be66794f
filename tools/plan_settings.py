"""The settings a plan shows: what decides whether multi-node EFA training works and what it costs, per node
group, pod and chart; and which changes would roll a GPU node group that runs in a reservation."""

from __future__ import annotations

import json
from typing import Any

from . import layout, layout_cost, layout_fit, layout_network, layout_node_groups, layout_pods
from ..components.nodes.rollout_guards import NOT_DATA
from .layout import UNKNOWN, Stack


SECTION_NAMES = {
    "nodeGroups": "node group",
    "pods": "pod",
    "gpuSubnets": "GPU subnet",
    "helmCharts": "Helm chart",
    "podFit": "pod fit",
}
FIELD_NAMES = {
    "instanceTypes": "instance type",
    "nodes": "nodes",
    "gpusPerNode": "GPUs/node",
    "subnetAzs": "subnet AZs",
    "efaInterfacesPerNode": "EFA interfaces/node",
    "placement": "placement strategy",
    "capacity": "capacity",
    "launchTemplate": "launch template",
    "replicas": "replicas",
    "image": "image",
    "cpu": "CPU",
    "memory": "memory",
    "gpu": "GPU",
    "efa": "EFA interfaces",
    "guaranteedQoS": "Guaranteed QoS",
    "kuberayChartVersion": "KubeRay chart version",
    "imageTags": "image tags",
    "estimatedHourlyUsd": "estimated $/hour",
    "estimatedIdleHourlyUsd": "estimated $/hour idle",
    "kubernetesVersion": "Kubernetes version",
    "costNotes": "cost notes",
    "instanceType": "instance type",
    "allocatablePerNode": "allocatable per node",
    "perNode": "requested per node",
}


def _show(value: Any) -> Any:
    if value is UNKNOWN:
        return "(known after up)"
    return value


def _capacity(g: layout_node_groups.NodeGroup) -> str:
    """``on-demand``, ``reservation cr-...`` or ``capacity-block cr-...``: what the nodes launch into."""
    if g.market_type == "capacity-block" or g.capacity_type == "CAPACITY_BLOCK":
        mode = "capacity-block"
    elif g.reservation is not None:
        mode = "reservation"
    elif g.capacity_type in (None, "ON_DEMAND"):
        return "on-demand"
    else:
        return str(_show(g.capacity_type)).lower().replace("_", "-")
    return f"{mode} {_show(g.reservation)}" if g.reservation is not None else mode


_GATE_FLAGS = {
    "--expect-nodes": "nodes",
    "--expect-gpus-per-node": "gpusPerNode",
    "--expect-nics": "efaInterfaces",
    "--efa-gbps": "lineRateGbps",
}


def efa_gate(st: Stack) -> dict[str, Any] | str:
    """What the EFA check Job will demand (its ``efacheck.efa_check`` arguments, from the catalogue), or "(none)"."""
    import shlex

    for job in st.of_type("kubernetes:batch/v1:Job"):
        containers = layout.dig(job.props, "spec", "template", "spec", "containers", default=[])
        for c in containers if isinstance(containers, list) else []:
            command = c.get("command") if isinstance(c, dict) else None
            script = next(
                (
                    a
                    for a in (command if isinstance(command, list) else [])
                    if isinstance(a, str) and "efacheck.efa_check" in a
                ),
                "",
            )
            line = next((ln for ln in script.splitlines() if "efacheck.efa_check" in ln and " -- " in ln), "")
            if not line:
                continue
            argv = shlex.split(line.split(" -- ", 1)[1])
            out: dict[str, Any] = {k: argv[argv.index(f) + 1] for f, k in _GATE_FLAGS.items() if f in argv[:-1]}
            out["gpudirectRdma"] = "required" if "--expect-gdrdma" in argv else "not required"
            return out
    return "(none)"


def _template_fingerprint(st: Stack, g: layout_node_groups.NodeGroup) -> str:
    """Short hash of the node group's launch template inputs: a change is a new template version, which the node
    group follows (``latestVersion``), and EKS rolls every node onto it."""
    import hashlib

    template = layout_node_groups.template_of(st, g.resource)
    if template is None:
        return "(none)"
    # the template's own tags record what the group runs (components/nodes/rollout_guards.py): not data, no new version
    data = {k: v for k, v in layout.plain(template.props).items() if k not in NOT_DATA}
    blob = json.dumps(data, sort_keys=True, default=lambda o: f"<{type(o).__name__}>")
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


RESERVED = ("reservation", "capacity-block")
ROLLOUT_FIX = (
    "set gpuNodeCount 0 and `pulumi up` first (the group parks, nothing to roll), then apply this change "
    "with gpuNodeCount 0, then raise gpuNodeCount again (docs/gpus.md)"
)


def rollout_risks(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """GPU node groups that a change would roll while they run in a reservation or Capacity Block.

    A new launch template version (or another node group setting) makes EKS replace every node: it first raises
    the Auto Scaling group by the larger of twice its AZ count and maxUnavailable and launches the new nodes there
    (EKS user guide, "managed node update behavior", scale up phase); a fully used ODCR or a Capacity Block has no
    room for them, so the update fails. For Capacity Blocks the EKS guide says to set the desired size to 0 first.
    Scaling alone (``nodes``) rolls nothing and is not flagged.
    """
    out = []
    for name, a in (before.get("nodeGroups") or {}).items():
        b = (after.get("nodeGroups") or {}).get(name)
        if not b or not (a.get("gpusPerNode") or b.get("gpusPerNode")):
            continue
        reserved = [c for c in (a.get("capacity"), b.get("capacity")) if str(c).split(" ")[0] in RESERVED]
        running = a.get("nodes") not in (0, "0")
        changed = [k for k in sorted(set(a) & set(b)) if k != "nodes" and a[k] != b[k]]  # keys both plans know
        if reserved and running and changed:
            what = ", ".join(FIELD_NAMES.get(k, k) for k in changed)
            out.append(
                f"GPU node group `{name}` ({reserved[0]}) changes its {what} while {a.get('nodes')} node(s) "
                "run: EKS rolls the group by launching new nodes first, which the reservation cannot hold, "
                f"so the update fails. Fix: {ROLLOUT_FIX}"
            )
    return out


def settings_of(st: Stack, region: str) -> dict[str, Any]:
    """The settings that matter for this stack, as plain data (the ``settings`` of ``--json``)."""
    node_groups = {}
    gpu_subnets: dict[str, Any] = {}
    for g in sorted(layout_node_groups.node_groups(st), key=lambda g: g.resource.name):
        azs = g.azs
        node_groups[g.resource.name] = {
            "instanceTypes": ", ".join(g.instance_types) or "(unset)",
            "nodes": f"{_show(g.nodes)}..{g.max_nodes}" if g.max_nodes is not None else _show(g.nodes),
            "gpusPerNode": g.gpus_per_node if g.gpus_per_node is not None else ("?" if g.gpu else 0),
            "subnetAzs": ", ".join(azs) if azs is not UNKNOWN else _show(UNKNOWN),
            "efaInterfacesPerNode": _show(g.efa_interfaces),
            "placement": _show(g.placement_strategy) or "none",
            "capacity": _capacity(g),
            "launchTemplate": _template_fingerprint(st, g),
        }
        if g.gpu:
            subnets = g.subnets if g.subnets is not UNKNOWN else []
            gpu_subnets.update({s.name: _show(layout.dig(s.props, "availabilityZone")) for s in subnets})
    charts = {r["chart"]: r["version"] for r in layout_network.helm_releases(st)}
    pods = {}
    for p in sorted(layout_pods.pods(st), key=lambda p: (p.resource.name, p.role != "head", p.role)):
        main = p.main_container or {}
        pods[p.label] = {
            "replicas": _show(p.replicas),
            "image": _show(main.get("image")),
            "cpu": _show(layout_pods.pod_amount(p, "cpu")),
            "memory": _show(layout_pods.pod_amount(p, "memory")),
            "gpu": layout_pods.pod_count(p, layout.GPU_RESOURCE),
            "efa": layout_pods.efa_requested(p),
            "guaranteedQoS": "yes" if all(layout_pods.qos_problem(c) is None for c in p.containers) else "no",
        }
    from ..components.config.config import image_tag

    images = sorted({v["image"] for v in pods.values() if isinstance(v["image"], str)})
    cost, missing = layout_cost.hourly_cost(st, region)
    idle, _ = layout_cost.hourly_cost(st, region, idle=True)
    return {
        "nodeGroups": node_groups,
        "gpuSubnets": gpu_subnets,
        "kuberayChartVersion": charts.get(layout.KUBERAY_CHART, "(not installed)"),
        "helmCharts": dict(sorted(charts.items())),  # registration order varies between runs (threads)
        "imageTags": ", ".join(sorted({image_tag(i) or i.rsplit("@", 1)[-1] for i in images})) or "(none)",
        "pods": pods,
        "podFit": layout_fit.summary(layout_fit.fit(st)),
        "efaGate": efa_gate(st),
        "estimatedHourlyUsd": cost if cost is not None else "unknown: " + "; ".join(missing),
        "estimatedIdleHourlyUsd": idle if idle is not None else "unknown: " + "; ".join(missing),
        "kubernetesVersion": ", ".join(v or "(default)" for v in layout_cost.cluster_versions(st)) or "(no cluster)",
        "costNotes": layout_cost.cost_notes(st, region),
    }
