"""Least-privilege layout rules: what the pods of a stack may do and who may reach them.

Registered in :data:`tools.rules.RULES`, so the offline plan, ``ray-efa-eks check-rules`` and the CrossGuard policy
pack run them. Each reads the resources as tools/layout.py hands them over (program inputs under mocks, outputs in a
preview) and stays silent on what it cannot read (a value only ``pulumi up`` knows).
"""

from __future__ import annotations

from typing import Any, Iterator

from ..components.addons.device_plugins import EFA_MIN_CHART, NVIDIA_MOFED_DEFAULT_ON, chart_version
from ..components.ray.raycluster import RAY_CLUSTER_LABEL
from . import pod_security
from .layout import HELM_CHART_V4, HELM_RELEASE, UNKNOWN, Resource, Stack, dig
from .violations import WARNING, Violation, violation

RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
JOB = "kubernetes:batch/v1:Job"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _meta(r: Resource) -> dict[str, Any]:
    m = r.props.get("metadata")
    return m if isinstance(m, dict) else {}


def ray_pods(stack: Stack) -> Iterator[tuple[Resource, str, str, dict[str, str], dict[str, Any]]]:
    """(RayCluster, role, namespace, labels KubeRay gives the pod, pod spec) of every head and worker group.

    KubeRay labels each pod ``ray.io/cluster: <RayCluster name>`` (and node-type/group) over the template's own
    labels (ray-operator/controllers/ray/common/pod.go ``labelPod``)."""
    for r in stack.of_type(RAY_CLUSTER):
        name, ns = _meta(r).get("name"), _meta(r).get("namespace") or "default"
        spec = r.props.get("spec")
        if not isinstance(spec, dict) or not isinstance(name, str):
            continue
        groups = [("head", dig(spec, "headGroupSpec", "template"))]
        groups += [
            (f"worker {g.get('groupName', '?')}", g.get("template"))
            for g in spec.get("workerGroupSpecs") or []
            if isinstance(g, dict)
        ]
        for role, tmpl in groups:
            if isinstance(tmpl, dict) and isinstance(tmpl.get("spec"), dict):
                labels = {
                    **(dig(tmpl, "metadata", "labels") or {}),
                    RAY_CLUSTER_LABEL: name,
                    "ray.io/node-type": role.split()[0],
                }
                yield r, role, ns, labels, tmpl


def _matches(selector: Any, labels: dict[str, str]) -> bool | None:
    """Label selector semantics; None when the selector is unknown (a preview's computed value)."""
    if not isinstance(selector, dict):
        return None
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        has, val, values = e.get("key") in labels, labels.get(e.get("key")), e.get("values") or []
        ok = {
            "In": has and val in values,
            "NotIn": not has or val not in values,
            "Exists": has,
            "DoesNotExist": not has,
        }.get(e.get("operator"))
        if not ok:
            return False
    return True


def _v(rule: str, r: Resource, problem: str, fix: str) -> Violation:
    return violation(rule, r, problem, fix)


# -- gate-no-api-token ---------------------------------------------------------------------------------------------

GATE_TOKEN_FIX = (
    "set automountServiceAccountToken: false on the Job's pod template and mount no token into its "
    "containers (components/addons/efa_check.py): the gate talks to Ray's Jobs API only; a token an init "
    "container needs (the image audit) is projected into that container alone, of a dedicated "
    "ServiceAccount"
)


def _token_volumes(spec: dict[str, Any]) -> set[str]:
    return {
        v.get("name")
        for v in spec.get("volumes") or []
        if isinstance(v, dict)
        and any("serviceAccountToken" in (src or {}) for src in dig(v, "projected", "sources") or [])
    }


def gate_no_api_token(stack: Stack) -> list:
    out = []
    accounts = {
        (_meta(a).get("namespace"), _meta(a).get("name")): a.props.get("automountServiceAccountToken")
        for a in stack.of_type("kubernetes:core/v1:ServiceAccount")
    }
    for r in stack.of_type(JOB):
        spec = dig(r.props, "spec", "template", "spec")
        if not isinstance(spec, dict):
            continue
        mount = spec.get("automountServiceAccountToken")
        if mount is UNKNOWN:
            continue
        sa = spec.get("serviceAccountName") or spec.get("serviceAccount")
        inherited = accounts.get((_meta(r).get("namespace"), sa)) if sa else None
        if mount is not False and not (mount is None and inherited is False):
            out.append(
                _v(
                    "gate-no-api-token",
                    r,
                    f"its pods mount a Kubernetes API token (automountServiceAccountToken "
                    f"{mount!r}, service account {sa or 'default'})",
                    GATE_TOKEN_FIX,
                )
            )
        tokens = _token_volumes(spec)
        for c in spec.get("containers") or []:
            if not isinstance(c, dict):  # a container only ``up`` knows (a preview's unknown): nothing to read
                continue
            mounted = sorted(tokens & {m.get("name") for m in c.get("volumeMounts") or [] if isinstance(m, dict)})
            if mounted:
                out.append(
                    _v(
                        "gate-no-api-token",
                        r,
                        f"container {c.get('name', '?')} mounts the projected token volume {mounted}",
                        GATE_TOKEN_FIX,
                    )
                )
        if tokens and not sa:
            out.append(
                _v(
                    "gate-no-api-token",
                    r,
                    "a token of the namespace's default ServiceAccount is projected into its pods",
                    GATE_TOKEN_FIX,
                )
            )
    return out


# -- ray-pods-network-policy ---------------------------------------------------------------------------------------

NETPOL_FIX = (
    "where the stack has NetworkPolicies, select every Ray pod with a NetworkPolicy (components/ray/raycluster.py ray_pods_network_policy_spec selects "
    "ray.io/cluster: <name>, the label KubeRay puts on every pod of the cluster): a pod no policy selects "
    "accepts connections from any pod of the cluster"
)


def _ingress_policies(stack: Stack) -> list[tuple[str, Any]]:
    """(namespace, spec) of every NetworkPolicy."""
    return [(_meta(p).get("namespace") or "default", p.props.get("spec")) for p in stack.of_type(NETWORK_POLICY)]


def _selected(policies: list[tuple[str, Any]], ns: str, labels: dict[str, Any]) -> bool:
    """Whether an ingress NetworkPolicy of ``ns`` selects (or, with a value only ``up`` knows, may select) pods
    labelled ``labels``."""
    chosen = [
        _matches(dig(spec, "podSelector"), labels)
        for pns, spec in policies
        if pns == ns and isinstance(spec, dict) and "Ingress" in (spec.get("policyTypes") or ["Ingress"])
    ]
    return None in chosen or True in chosen


def ray_pods_network_policy(stack: Stack) -> list:
    out = []
    policies = _ingress_policies(stack)
    for r, role, ns, labels, _ in ray_pods(stack):
        if _selected(policies, ns, labels):
            continue
        if policies:  # without any (networkPolicy: false, the documented opt-out) there is nothing to hold
            out.append(
                _v(
                    "ray-pods-network-policy",
                    r,
                    f"no NetworkPolicy of namespace {ns} selects the {role} pods",
                    NETPOL_FIX,
                )
            )
    return out


# -- kuberay-single-namespace --------------------------------------------------------------------------------------

KUBERAY_FIX = (
    "install the kuberay-operator chart with singleNamespaceInstall: true and watchNamespace: [<the Ray "
    "namespace>] (components/ray/kuberay.py watch_values): the chart then creates a Role in that namespace "
    "instead of a ClusterRole that creates pods and reads Secrets in every namespace"
)


def kuberay_single_namespace(stack: Stack) -> list:
    out = []
    ray_ns = sorted({_meta(r).get("namespace") or "default" for r in stack.of_type(RAY_CLUSTER)})
    for r in stack.of_type(HELM_RELEASE, HELM_CHART_V4):
        chart = r.props.get("chart")
        if not (isinstance(chart, str) and chart.split("/")[-1] == "kuberay-operator"):
            continue
        values = r.props.get("values")
        if not isinstance(values, dict):
            continue
        single, watched = values.get("singleNamespaceInstall"), values.get("watchNamespace")
        if single is UNKNOWN or watched is UNKNOWN:
            continue
        if single is not True:
            out.append(
                _v(
                    "kuberay-single-namespace",
                    r,
                    "the operator watches every namespace with a ClusterRole (singleNamespaceInstall is not true)",
                    KUBERAY_FIX,
                )
            )
        elif isinstance(watched, list) and not set(ray_ns) <= set(watched):
            out.append(
                _v(
                    "kuberay-single-namespace",
                    r,
                    f"watchNamespace {watched} leaves out the RayCluster "
                    f"namespace(s) {sorted(set(ray_ns) - set(watched))}",
                    KUBERAY_FIX,
                )
            )
    return out


# -- ray-pods-region -----------------------------------------------------------------------------------------------

REGION_FIX = (
    "set AWS_REGION, AWS_DEFAULT_REGION and AWS_EC2_METADATA_DISABLED=true on every Ray container "
    "(components/ray/raycluster.py aws_env): with IMDS hop limit 1 an SDK that probes IMDS for its region or "
    "credentials waits for timeouts (Arrow's S3 filesystem: 12 s, apache/arrow#46723)"
)


def ray_pods_region(stack: Stack) -> list:
    out = []
    for r, role, _, _, tmpl in ray_pods(stack):
        for c in tmpl["spec"].get("containers") or []:
            env = c.get("env") if isinstance(c, dict) else None  # a container only ``up`` knows: nothing to read
            if env is UNKNOWN or not isinstance(env, list):
                continue
            names = {e.get("name"): e.get("value") for e in env if isinstance(e, dict)}
            missing = [k for k in ("AWS_REGION", "AWS_DEFAULT_REGION") if k not in names]
            if names.get("AWS_EC2_METADATA_DISABLED") not in ("true", UNKNOWN):
                missing.append("AWS_EC2_METADATA_DISABLED=true")
            if missing:
                out.append(
                    _v(
                        "ray-pods-region",
                        r,
                        f"container {c.get('name', '?')} ({role}) lacks {', '.join(missing)}",
                        REGION_FIX,
                    )
                )
    return out


# -- device-plugin-versions ----------------------------------------------------------------------------------------

PLUGINS_FIX = (
    "use aws-efa-k8s-device-plugin chart v0.5.10 or later (image >= v0.5.6) on p6-b200, and an NVIDIA "
    "device plugin outside 0.19.0-0.19.2 or mofedEnabled: false (components/addons/device_plugins.py)"
)


def device_plugin_versions(stack: Stack) -> list:
    out = []
    gpu_types = {dig(m.props, "instanceTypes", 0) for m in stack.of_type("eks:index:ManagedNodeGroup")}
    gpu_types |= {dig(lt.props, "instanceType") for lt in stack.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    for r in stack.of_type(HELM_RELEASE, HELM_CHART_V4):
        chart, version, values = r.props.get("chart"), r.props.get("version"), r.props.get("values")
        if not isinstance(chart, str) or not isinstance(version, str):
            continue
        try:
            v = chart_version(version)
        except ValueError:
            continue
        chart = chart.split("/")[-1]
        if chart == "aws-efa-k8s-device-plugin":
            allowed = dig(values, "supportedInstanceLabels", "values")  # None or UNKNOWN when values is not a mapping
            types = set(allowed) if isinstance(allowed, list) else gpu_types
            for t, (floor, why) in EFA_MIN_CHART.items():
                if t in types and v < floor:
                    out.append(_v("device-plugin-versions", r, f"chart {version} on {t}: {why}", PLUGINS_FIX))
        elif chart == "nvidia-device-plugin":
            lo, hi = NVIDIA_MOFED_DEFAULT_ON
            mofed = values.get("mofedEnabled") if isinstance(values, dict) else None
            if lo <= v <= hi and mofed is not False and mofed is not UNKNOWN:
                out.append(
                    _v(
                        "device-plugin-versions",
                        r,
                        f"chart {version} with mofedEnabled {mofed!r} injects every "
                        "/dev/infiniband/uverbs* (EFA's included) into every GPU "
                        "container (NVIDIA/k8s-device-plugin#1692)",
                        PLUGINS_FIX,
                    )
                )
    return out


# -- pod-security-baseline -----------------------------------------------------------------------------------------

PSS_FIX = (
    "keep the Ray head and the gate Job within Pod Security baseline (no host namespaces, privilege, added "
    "capabilities, hostPath...; https://kubernetes.io/docs/concepts/security/pod-security-standards/)"
)


def pod_security_baseline(stack: Stack) -> list:
    out = []
    templates = [(r, role, tmpl) for r, role, _, _, tmpl in ray_pods(stack) if role == "head"]
    templates += [(r, "pod", dig(r.props, "spec", "template")) for r in stack.of_type(JOB)]
    for r, role, tmpl in templates:
        if not isinstance(tmpl, dict) or not isinstance(tmpl.get("spec"), dict):
            continue
        for problem in pod_security.violations(tmpl, "baseline"):
            out.append(_v("pod-security-baseline", r, f"{role}: {problem}", PSS_FIX))
    return out


# -- monitoring-hardened -------------------------------------------------------------------------------------------

MONITORING_FIX = (
    "keep prometheus.prometheusSpec.reloadStrategy: ProcessSignal in kube-prometheus-stack (with "
    "HTTP, the default, prometheus-operator starts Prometheus with --web.enable-lifecycle: any pod that "
    "reaches port 9090 can POST /-/quit), dcgm-exporter without SYS_ADMIN or privileged (only its "
    "DCGM_FI_PROF_* counters need it), and a NetworkPolicy over every pod of both namespaces "
    "(components/observability/observability.py)"
)


def _release_values(stack: Stack, chart_name: str) -> Iterator[tuple[Resource, dict[str, Any]]]:
    for r in stack.of_type(HELM_RELEASE, HELM_CHART_V4):
        chart, values = r.props.get("chart"), r.props.get("values")
        if isinstance(chart, str) and chart.split("/")[-1] == chart_name and isinstance(values, dict):
            yield r, values


def monitoring_hardened(stack: Stack) -> list:
    out = []
    namespaces: list[tuple[Resource, str]] = []
    for r, values in _release_values(stack, "kube-prometheus-stack"):
        strategy = dig(values, "prometheus", "prometheusSpec", "reloadStrategy")
        if strategy not in ("ProcessSignal", UNKNOWN):
            out.append(
                _v(
                    "monitoring-hardened",
                    r,
                    f"reloadStrategy {strategy or 'HTTP (the chart default)'!r}: "
                    "prometheus-operator starts Prometheus with --web.enable-lifecycle "
                    "(POST /-/quit, /-/reload)",
                    MONITORING_FIX,
                )
            )
        namespaces.append((r, r.props.get("namespace")))
    for r, values in _release_values(stack, "dcgm-exporter"):
        ctx = values.get("securityContext")
        added = dig(ctx, "capabilities", "add") if isinstance(ctx, dict) else None
        if added is UNKNOWN or (isinstance(ctx, dict) and ctx.get("privileged") is UNKNOWN):
            continue
        if isinstance(ctx, dict) and ctx.get("privileged") is True:
            out.append(_v("monitoring-hardened", r, "the exporter runs privileged", MONITORING_FIX))
        elif added is None or (isinstance(added, list) and "SYS_ADMIN" in added):
            out.append(
                _v(
                    "monitoring-hardened",
                    r,
                    "the exporter gets SYS_ADMIN (the chart's default "
                    "securityContext adds it for DCGM_FI_PROF_* counters)",
                    MONITORING_FIX,
                )
            )
        namespaces.append((r, r.props.get("namespace")))
    policies = _ingress_policies(stack)
    if not policies:  # networkPolicy: false, the documented opt-out
        return out
    for r, ns in namespaces:
        if not isinstance(ns, str):
            continue
        if not _selected(policies, ns, {}):
            out.append(
                _v("monitoring-hardened", r, f"no NetworkPolicy of namespace {ns} selects its pods", MONITORING_FIX)
            )
    return out


# -- node-role-least-privilege -------------------------------------------------------------------------------------

NODE_ROLE_FIX = (
    "attach AmazonEKSWorkerNodePolicy and AmazonEC2ContainerRegistryPullOnly to the node role, and "
    "AmazonEKS_CNI_Policy to the VPC CNI's own role (kube-system/aws-node through Pod Identity, "
    "components/cluster/cluster.py CNI_POLICY), as the EKS best-practices guide does"
)
NODE_ROLE_EXTRA = {
    "AmazonEKS_CNI_Policy": "the VPC CNI's ENI and IP rights, usable by any pod that reaches the instance credentials",
    "AmazonEC2ContainerRegistryReadOnly": "lists and describes every ECR repository and image of "
    "the account (AmazonEC2ContainerRegistryPullOnly pulls)",
}


def _trusts_ec2(policy: Any) -> bool:
    import json

    try:
        doc = json.loads(policy) if isinstance(policy, str) else policy
    except ValueError:
        return False
    statements = doc.get("Statement") if isinstance(doc, dict) else None
    return any(
        "ec2.amazonaws.com" in str(dig(st, "Principal", "Service")) for st in statements or [] if isinstance(st, dict)
    )


def node_role_least_privilege(stack: Stack) -> list:
    roles = set()
    for r in stack.of_type("aws:iam/role:Role"):
        if _trusts_ec2(r.props.get("assumeRolePolicy")):
            roles |= {r.name, r.props.get("name"), r.id}
    out = []
    for a in stack.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment"):
        policy, role = a.props.get("policyArn"), a.props.get("role")
        if isinstance(policy, str) and role in roles - {None} and policy.rsplit("/", 1)[-1] in NODE_ROLE_EXTRA:
            name = policy.rsplit("/", 1)[-1]
            out.append(
                Violation(
                    "node-role-least-privilege",
                    a.label,
                    f"the node role holds {name}: {NODE_ROLE_EXTRA[name]}",
                    NODE_ROLE_FIX,
                    a.urn,
                    WARNING,
                )
            )
    return out
