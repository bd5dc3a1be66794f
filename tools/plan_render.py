"""A plan as text: config, resource tree, settings, layout and AWS rule results."""

from __future__ import annotations

import json
from typing import Any

from . import rules
from .plan_model import Plan
from .stack_file import SECRET


def render_text(plan: Plan) -> str:
    """The human plan: resource tree, layout settings, rule results."""
    lines = [
        f"Offline plan of {plan.source}: stack {plan.stack}, region {plan.region} "
        "(Pulumi mocks: what the program declares, nothing read from AWS)"
    ]
    lines += _config_lines(plan)
    if plan.error:
        return "\n".join(lines + ["", f"The program failed before the plan was complete: {plan.error}"])
    lines += ["", f"Resources ({len(plan.resources)})"] + _tree_lines(plan.resources)
    s = plan.settings
    lines += ["", "Layout"]
    for name, g in s["nodeGroups"].items():
        lines.append(
            f"  node group {name}: {g['nodes']} x {g['instanceTypes']} ({g['gpusPerNode']} GPU each), "
            f"subnets in {g['subnetAzs']}, EFA interfaces/node {g['efaInterfacesPerNode']}, "
            f"placement {g['placement']}, capacity {g.get('capacity', 'on-demand')}"
        )
    gpu_subnets = ", ".join(f"{n} ({az})" for n, az in s["gpuSubnets"].items()) or "(none)"
    lines.append(f"  GPU subnets: {gpu_subnets}")
    lines.append(
        f"  KubeRay chart: {s['kuberayChartVersion']}   Helm charts: "
        + (", ".join(f"{c} {v}" for c, v in s["helmCharts"].items()) or "(none)")
    )
    lines.append(f"  image tags: {s['imageTags']}")
    lines.append("  pods:")
    width = max((len(k) for k in s["pods"]), default=4)
    lines.append(f"    {'pod':<{width}}  replicas  cpu    memory  GPU  EFA  Guaranteed  image")
    for name, p in s["pods"].items():
        lines.append(
            f"    {name:<{width}}  {str(p['replicas']):<8}  {str(p['cpu']):<5}  {str(p['memory']):<6}  "
            f"{str(p['gpu']):<3}  {str(p['efa']):<3}  {p['guaranteedQoS']:<10}  {p['image']}"
        )
    lines += _fit_lines(s.get("podFit"))
    gate = s.get("efaGate")
    if isinstance(gate, dict):
        lines.append(
            f"  EFA gate expects: {gate.get('nodes', '?')} nodes x {gate.get('gpusPerNode', '?')} GPUs, "
            f"{gate.get('efaInterfaces', 0)} EFA interfaces/node, line rate "
            f"{gate.get('lineRateGbps', '?')} Gbit/s, GPUDirect RDMA {gate['gpudirectRdma']}"
        )
    cost, idle = s["estimatedHourlyUsd"], s.get("estimatedIdleHourlyUsd")
    lines.append(
        "  estimated cost: "
        + (
            f"${cost:,.2f}/hour (nodes as their capacity bills them + EKS control plane "
            "at its version's rate today + NAT gateways, before storage and data "
            "transfer)"
            if isinstance(cost, (int, float))
            else cost
        )
    )
    if isinstance(idle, (int, float)) and idle != cost:
        lines.append(
            f"  estimated cost idle: ${idle:,.2f}/hour (no job: GPU nodes the Cluster Autoscaler removed; "
            "the first figure is every GPU node up)"
        )
    lines.append(f"  Kubernetes version: {s.get('kubernetesVersion', '(unknown)')}")
    lines += [f"    {note}" for note in s.get("costNotes", [])]
    lines += [f"  {line}" for line in s.get("coldStart", [])]
    lines += ["", rules_summary(plan)]
    lines += [violation_line(v) for v in plan.violations]
    return "\n".join(lines)


def _fit_lines(fit: Any) -> list[str]:
    """Per node group: what each node's pods request against its allocatable (tools/layout_fit.py)."""
    if not isinstance(fit, dict):
        return []
    out = ["  pod fit (requests per node vs allocatable: EKS AL2023 kube-reserved, eviction 100Mi, max pods):"]
    for name, g in fit.items():
        if not isinstance(g, dict):
            continue
        a = g["allocatablePerNode"]
        out.append(
            f"    node group {name}: {g['nodes']} x {g['instanceType']}, allocatable {a['cpu']} CPU, "
            f"{a['memory']} memory, {a['pods']} pods per node"
        )
        for i, n in enumerate(g["perNode"]):
            out.append(
                f"      node {i}: {n['cpu']} CPU, {n['memory']} requested; {len(n['pods'])} pods: "
                + ", ".join(n["pods"])
            )
    out += [f"    unplaced: {line}" for line in fit.get("(unplaced)", [])]
    out += [f"    not modelled: {line}" for line in fit.get("(not modelled)", [])]
    return out


def _config_lines(plan: Plan) -> list[str]:
    if not plan.config and not plan.effective:
        return []
    out = [
        "",
        f"Config (every value the program runs with and its source: Pulumi.{plan.stack}.yaml, --config or the default)",
    ]
    rows = plan.effective or {k: [v, ""] for k, v in plan.config.items()}
    for key, (value, source) in rows.items():
        text = value if isinstance(value, str) else json.dumps(value)
        if value == SECRET:
            text += (
                "  (encrypted: not readable offline, planned with the key's default; --config KEY=VALUE plans a value)"
            )
        out.append(f"  {key}: {text}" + (f"  [{source}]" if source else ""))
    return out


def _tree_lines(resources: list[dict[str, Any]]) -> list[str]:
    labels = {f"{r['type']} {r['name']}" for r in resources}
    children: dict[str | None, list[dict]] = {}
    roots = []
    for r in resources:
        if r["parent"] in labels:
            children.setdefault(r["parent"], []).append(r)
        else:
            roots.append(r)
    out: list[str] = []

    def walk(items: list[dict], prefix: str) -> None:
        for i, r in enumerate(items):
            last = i == len(items) - 1
            out.append(f"{prefix}{'└─ ' if last else '├─ '}{r['type']}  {r['name']}")
            walk(children.get(f"{r['type']} {r['name']}", []), prefix + ("   " if last else "│  "))

    stack_roots = sorted({r["parent"] or "(stack)" for r in roots})
    out.append(stack_roots[0] if len(stack_roots) == 1 else "(stack)")
    walk(roots, "")
    return out


def violation_line(v: dict[str, Any]) -> str:
    return rules.Violation(v["rule"], v["resource"], v["problem"], v["fix"], severity=v.get("severity", "error")).line()


def aws_rules_summary(plan: Plan) -> str:
    """The AWS API rules the offline runner enforces (tools/aws_rules.py), each with its source document."""
    from .aws_rules import RULES

    broken = next((r.id for r in RULES if plan.error and f"[aws-rule {r.id};" in plan.error), None)
    head = "AWS API rules (the runner refuses the request at its resource, as AWS would: exit 2): "
    head += (
        f"{broken} broken"
        if broken
        else "not all reached (the program failed first)"
        if plan.error
        else f"all {len(RULES)} pass"
    )
    return "\n".join([head, *(f"  {r.line()}" for r in RULES)])


def rules_summary(plan: Plan) -> str:
    n = len(plan.checked)
    broken = sorted({v["rule"] for v in plan.errors})
    warned = sorted({v["rule"] for v in plan.violations} - set(broken))
    also = f"; warnings (AWS accepts these): {', '.join(warned)}" if warned else ""
    if not broken:
        return f"Layout rules: all {n} pass ({', '.join(plan.checked)}){also}" + (":" if warned else "")
    return f"Layout rules: {len(broken)} of {n} broken ({', '.join(broken)}){also}:"
