"""Why a stack means to use EFA, its security groups' self rules, its Helm releases, and what exposes the Ray
dashboard beyond the VPC."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .layout import (
    DASHBOARD_PORT,
    EFA_PLUGIN_CHART,
    EFA_RESOURCE,
    HELM_CHART_V4,
    HELM_RELEASE,
    INGRESS,
    SECURITY_GROUP,
    SERVICE,
    SG_EGRESS,
    SG_INGRESS,
    SG_RULE,
    UNKNOWN,
    Resource,
    Stack,
    dig,
)
from .layout_node_groups import gpu_node_groups
from .layout_pods import efa_requested, pod_env, pods, ray_specs


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
        if _all_protocols(p.get("ipProtocol")) and _same(
            p.get("securityGroupId"),
            p.get("referencedSecurityGroupId"),
            r,
            "securityGroupId",
            "referencedSecurityGroupId",
        ):
            out.append(SelfRule(r, "egress" if r.type == SG_EGRESS else "ingress", p.get("securityGroupId")))
    for r in stack.of_type(SG_RULE):
        p = r.props
        is_self = p.get("self") is True or _same(
            p.get("securityGroupId"), p.get("sourceSecurityGroupId"), r, "securityGroupId", "sourceSecurityGroupId"
        )
        if _all_protocols(p.get("protocol")) and is_self and p.get("type") in ("ingress", "egress", UNKNOWN):
            out.append(SelfRule(r, p.get("type"), p.get("securityGroupId")))
    for r in stack.of_type(SECURITY_GROUP):
        for direction in ("ingress", "egress"):
            for rule in r.props.get(direction) or []:
                if isinstance(rule, dict) and rule.get("self") is True and _all_protocols(rule.get("protocol")):
                    out.append(SelfRule(r, direction, r.id or UNKNOWN))
    return out


# -- Helm, dashboard exposure --------------------------------------------------------------------------------------


def helm_releases(stack: Stack) -> list[dict[str, Any]]:
    """``{"name", "chart", "version"}`` of every Helm release / v4 chart."""
    out = []
    for r in stack.of_type(HELM_RELEASE, HELM_CHART_V4):
        chart = r.props.get("chart")
        chart = chart.rpartition("/")[2] if isinstance(chart, str) else chart  # oci://registry/repo/<chart>
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
    return any(k in annotations and str(annotations[k]).lower() in v for k, v in _INTERNAL_ANNOTATIONS.items())


def _open_to_world(spec: Any) -> bool:
    ranges = dig(spec, "loadBalancerSourceRanges")
    return not isinstance(ranges, list) or not ranges or any(r in ("0.0.0.0/0", "::/0") for r in ranges)


def _dashboard_port(port: Any) -> bool:
    return isinstance(port, dict) and (
        port.get("port") == DASHBOARD_PORT
        or port.get("targetPort") in (DASHBOARD_PORT, "dashboard")
        or port.get("name") == "dashboard"
    )


def dashboard_exposures(stack: Stack) -> list[tuple[Resource, str]]:
    """(resource, how) for every way the stack puts a Ray dashboard on a public load balancer or ingress."""
    out = []
    for r, spec in ray_specs(stack):
        head = dig(spec, "headGroupSpec") or {}
        params = head.get("rayStartParams") if isinstance(head.get("rayStartParams"), dict) else {}
        if str(params.get("include-dashboard")).lower() == "false":  # KubeRay's default when unset: true
            continue
        host = params.get("dashboard-host", "0.0.0.0")  # KubeRay's default when unset
        if host in ("127.0.0.1", "localhost", "::1"):
            continue
        svc = head.get("headService")  # dig reads anything: a missing or unknown service has no annotations
        annotations = dig(svc, "metadata", "annotations")
        if (
            head.get("serviceType") == "LoadBalancer"
            and not _internal(annotations)
            and _open_to_world(dig(svc, "spec"))
        ):
            out.append(
                (
                    r,
                    f"headGroupSpec.serviceType is LoadBalancer with dashboard-host {host}: the dashboard "
                    f"(port {DASHBOARD_PORT}, which can submit jobs) is on an internet-facing load balancer",
                )
            )
        if head.get("enableIngress") is True:
            out.append((r, "headGroupSpec.enableIngress makes KubeRay create an Ingress to the dashboard"))
    for r in stack.of_type(SERVICE):
        spec = dig(r.props, "spec") or {}
        if (
            spec.get("type") == "LoadBalancer"
            and any(_dashboard_port(p) for p in spec.get("ports") or [])
            and not _internal(dig(r.props, "metadata", "annotations"))
            and _open_to_world(spec)
        ):
            out.append(
                (r, f"Service of type LoadBalancer exposes the Ray dashboard port {DASHBOARD_PORT} to the internet")
            )
    for r in stack.of_type(INGRESS):
        if _internal(dig(r.props, "metadata", "annotations")):
            continue
        for backend in _ingress_backends(dig(r.props, "spec") or {}):
            name = dig(backend, "name") or ""
            port = dig(backend, "port") or {}
            if (
                port.get("number") == DASHBOARD_PORT
                or port.get("name") == "dashboard"
                or (isinstance(name, str) and name.endswith("-head-svc"))
            ):
                out.append((r, f"Ingress routes to the Ray head service {name} (dashboard) without an internal scheme"))
                break
    return out


def _ingress_backends(spec: dict[str, Any]) -> list[Any]:
    backends = [dig(spec, "defaultBackend", "service")]
    for rule in spec.get("rules") or []:
        for path in dig(rule, "http", "paths") or []:
            backends.append(dig(path, "backend", "service"))
    return [b for b in backends if isinstance(b, dict)]
