"""Every pod a stack runs once it is up, as the scheduler sees it: the pod templates the stack declares (with the
containers KubeRay injects), the pods of its Helm charts (their pinned defaults merged with the values the stack
passes), and EKS's own add-on pods. ``tools/layout_fit.py`` places them on the nodes.

A chart is a Helm release here, not rendered templates: each chart's pods are described below from its pinned
``values.yaml`` (the copies in the project's shared chart folder, read at the versions the stack pins) and from
what its templates add (named per chart). A value the chart leaves empty (``resources: {}``) requests nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .layout import HELM_CHART_V4, HELM_RELEASE, UNKNOWN, Stack, dig
from .layout_pods import pods as declared_pods

AUTOSCALER_DEFAULT = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}
"""KubeRay v1.7.0's autoscaler sidecar when ``autoscalerOptions.resources`` is unset (ray-project/kuberay
ray-operator/controllers/ray/common/pod.go, BuildAutoscalerContainer; mergeAutoscalerOverrides replaces the whole
block when it is set)."""
WAIT_GCS_READY = {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"cpu": "200m", "memory": "256Mi"}}
"""The ``wait-gcs-ready`` init container KubeRay v1.7.0 adds to every worker pod (pod.go, DefaultWorkerPodTemplate,
on unless the operator's ENABLE_INIT_CONTAINER_INJECTION is false)."""

TOLERATE_ALL = [{"operator": "Exists"}]
CRITICAL_ADDONS = {"key": "CriticalAddonsOnly", "operator": "Exists"}


@dataclass
class FitPod:
    """One pod (or one DaemonSet's pod per node) to place."""

    name: str
    spec: dict[str, Any]
    """A pod spec: containers, initContainers, nodeSelector, affinity, tolerations."""
    replicas: int = 1
    daemonset: bool = False
    source: str = "stack"
    """``stack``, ``chart <name> <version>`` or ``EKS add-on <name>``."""


def _res(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _spec(
    containers: list[dict],
    *,
    init: list[dict] | None = None,
    node_selector: Any = None,
    affinity: Any = None,
    tolerations: Any = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    for key, value in (("nodeSelector", node_selector), ("affinity", affinity), ("tolerations", tolerations)):
        if value:
            spec[key] = value
    return spec


def _c(name: str, resources: Any) -> dict[str, Any]:
    return {"name": name, "resources": resources if isinstance(resources, dict) else {}}


def _v(values: dict, *path: str, default: Any = None) -> Any:
    found = dig(values, *path, default=default)
    return default if found is UNKNOWN else found


# -- the stack's own pod templates ---------------------------------------------------------------------------------


def _replicas(value: Any) -> int:
    """A template's pod count at its largest: ``replicas``, or the top of an autoscaled ``min..max`` range."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and ".." in value:
        top = value.rpartition("..")[2]
        return int(top) if top.isdigit() else 0
    return 1 if value is UNKNOWN else 0


def stack_pods(stack: Stack) -> list[FitPod]:
    """The templates the stack declares; a Ray head gets KubeRay's autoscaler sidecar when in-tree autoscaling is on,
    a Ray worker KubeRay's ``wait-gcs-ready`` init container."""
    out = []
    for p in declared_pods(stack):
        spec = dict(p.spec)
        ray = dig(p.resource.props, "spec")
        ray = ray if isinstance(ray, dict) else {}
        if p.role == "head" and ray.get("enableInTreeAutoscaling") is True:
            given = dig(ray, "autoscalerOptions", "resources")
            sidecar = _c("autoscaler (KubeRay sidecar)", given if isinstance(given, dict) else AUTOSCALER_DEFAULT)
            spec["containers"] = [*spec.get("containers", []), sidecar]
        elif p.role.startswith("worker "):
            spec["initContainers"] = [
                *(spec.get("initContainers") or []),
                _c("wait-gcs-ready (KubeRay)", WAIT_GCS_READY),
            ]
        daemonset = p.resource.type == "kubernetes:apps/v1:DaemonSet"
        name = p.resource.name if p.role == "pod" else p.label
        out.append(FitPod(name, spec, 1 if daemonset else _replicas(p.replicas), daemonset))
    return out


# -- Helm charts ---------------------------------------------------------------------------------------------------


def _kuberay(values: dict) -> list[FitPod]:
    """kuberay-operator 1.7.0: one Deployment; values.yaml ``resources`` sets limits 100m / 512Mi only (requests
    default to them), ``nodeSelector``/``affinity``/``tolerations`` empty; the template adds none."""
    res = _v(values, "resources", default={"limits": {"cpu": "100m", "memory": "512Mi"}})
    return [
        FitPod(
            "kuberay-operator",
            _spec(
                [_c("kuberay-operator", res)],
                node_selector=_v(values, "nodeSelector"),
                affinity=_v(values, "affinity"),
                tolerations=_v(values, "tolerations"),
            ),
            int(_v(values, "replicas", default=1)),
        )
    ]


def _cluster_autoscaler(values: dict) -> list[FitPod]:
    """cluster-autoscaler 9.59.0: one Deployment (``replicaCount: 1``), ``resources: {}``, no scheduling defaults."""
    return [
        FitPod(
            "cluster-autoscaler",
            _spec(
                [_c("cluster-autoscaler", _v(values, "resources"))],
                node_selector=_v(values, "nodeSelector"),
                affinity=_v(values, "affinity"),
                tolerations=_v(values, "tolerations"),
            ),
            int(_v(values, "replicaCount", default=1)),
        )
    ]


def _nvidia_plugin(values: dict) -> list[FitPod]:
    """nvidia-device-plugin 0.17.1: a DaemonSet, ``resources: {}``; its default affinity wants NFD's GPU labels and
    its default tolerations are CriticalAddonsOnly and nvidia.com/gpu (values.yaml lines 61-92)."""
    nfd = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]}
                        ]
                    },
                    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
                ]
            }
        }
    }
    tolerations = _v(
        values,
        "tolerations",
        default=[CRITICAL_ADDONS, {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    return [
        FitPod(
            "nvidia-device-plugin",
            _spec(
                [_c("nvidia-device-plugin", _v(values, "resources"))],
                node_selector=_v(values, "nodeSelector"),
                affinity=_v(values, "affinity", default=nfd),
                tolerations=tolerations,
            ),
            daemonset=True,
        )
    ]


def _efa_plugin(values: dict) -> list[FitPod]:
    """aws-efa-k8s-device-plugin v0.5.30: a DaemonSet requesting 10m / 20Mi (values.yaml lines 317-327); its template
    turns ``supportedInstanceLabels`` into a required node affinity and always adds the CriticalAddonsOnly toleration
    (README of the shared chart copies)."""
    keys = _v(values, "supportedInstanceLabels", "keys", default=["node.kubernetes.io/instance-type"])
    types = _v(values, "supportedInstanceLabels", "values", default=None)
    affinity = None
    if isinstance(types, list) and isinstance(keys, list):
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": k, "operator": "In", "values": types} for k in keys]}
                    ]
                }
            }
        }
    res = _v(values, "resources", default={"requests": {"cpu": "10m", "memory": "20Mi"}})
    tolerations = [*(_v(values, "tolerations", default=[]) or []), CRITICAL_ADDONS]
    return [
        FitPod(
            "aws-efa-k8s-device-plugin",
            _spec(
                [_c("efa-plugin", res)],
                node_selector=_v(values, "nodeSelector"),
                affinity=affinity,
                tolerations=tolerations,
            ),
            daemonset=True,
        )
    ]


def _dcgm(values: dict) -> list[FitPod]:
    """dcgm-exporter 4.8.2: a DaemonSet requesting 100m / 128Mi (limits 200m / 512Mi, values.yaml lines 120-126); its
    default toleration is the control plane's only (153-156)."""
    res = _v(
        values,
        "resources",
        default={"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "200m", "memory": "512Mi"}},
    )
    tolerations = _v(
        values,
        "tolerations",
        default=[{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
    )
    return [
        FitPod(
            "dcgm-exporter",
            _spec(
                [_c("exporter", res)],
                node_selector=_v(values, "nodeSelector"),
                affinity=_v(values, "affinity"),
                tolerations=tolerations,
            ),
            daemonset=True,
        )
    ]


def _kps(values: dict) -> list[FitPod]:
    """kube-prometheus-stack 88.5.3 (values.yaml): the operator (``prometheusOperator.resources: {}``, line 3412), one
    Prometheus (``prometheusSpec.resources: {}``, 4668; the operator adds its ``config-reloader`` container and
    ``init-config-reloader`` init container with ``prometheusConfigReloader.resources``, ``{}`` at 3561), Grafana and
    kube-state-metrics (sub-charts whose values leave ``resources`` empty: counted 0), and node-exporter when
    ``nodeExporter.enabled`` (a DaemonSet tolerating every NoSchedule taint, ``resources: {}``)."""
    out = []
    op = _v(values, "prometheusOperator", default={}) or {}
    if _v(op, "enabled", default=True) is not False:
        out.append(
            FitPod(
                "prometheus-operator",
                _spec(
                    [_c("operator", _v(op, "resources"))],
                    node_selector=_v(op, "nodeSelector"),
                    affinity=_v(op, "affinity"),
                    tolerations=_v(op, "tolerations"),
                ),
            )
        )
    prom = _v(values, "prometheus", "prometheusSpec", default={}) or {}
    if _v(values, "prometheus", "enabled", default=True) is not False:
        reloader = _v(op, "prometheusConfigReloader", "resources")
        containers = [_c("prometheus", _v(prom, "resources")), _c("config-reloader", reloader)]
        out.append(
            FitPod(
                "prometheus",
                _spec(
                    containers,
                    init=[_c("init-config-reloader", reloader)],
                    node_selector=_v(prom, "nodeSelector"),
                    affinity=_v(prom, "affinity"),
                    tolerations=_v(prom, "tolerations"),
                ),
                int(_v(prom, "replicas", default=1)) * int(_v(prom, "shards", default=1)),
            )
        )
    for key, sub, name in (
        ("grafana", "grafana", "grafana"),
        ("kubeStateMetrics", "kube-state-metrics", "kube-state-metrics"),
    ):
        block = _v(values, key, default={}) or {}
        if _v(block, "enabled", default=True) is False:
            continue
        subvalues = _v(values, sub, default={}) or {}
        out.append(
            FitPod(
                name,
                _spec(
                    [_c(name, _v(subvalues, "resources"))],
                    node_selector=_v(subvalues, "nodeSelector"),
                    affinity=_v(subvalues, "affinity"),
                    tolerations=_v(subvalues, "tolerations"),
                ),
                int(_v(subvalues, "replicas", default=1)),
            )
        )
    if _v(values, "nodeExporter", "enabled", default=True) is not False:
        ne = _v(values, "prometheus-node-exporter", default={}) or {}
        out.append(
            FitPod(
                "node-exporter",
                _spec(
                    [_c("node-exporter", _v(ne, "resources"))],
                    node_selector=_v(ne, "nodeSelector"),
                    affinity=_v(ne, "affinity"),
                    tolerations=_v(ne, "tolerations", default=[{"effect": "NoSchedule", "operator": "Exists"}]),
                ),
                daemonset=True,
            )
        )
    return out


CHARTS = {
    "kuberay-operator": _kuberay,
    "cluster-autoscaler": _cluster_autoscaler,
    "nvidia-device-plugin": _nvidia_plugin,
    "aws-efa-k8s-device-plugin": _efa_plugin,
    "dcgm-exporter": _dcgm,
    "kube-prometheus-stack": _kps,
}
"""Charts whose pods are known; another chart's pods are not placed (``chart_pods`` names it)."""


def chart_pods(stack: Stack) -> tuple[list[FitPod], list[str]]:
    """The pods of every Helm release, and the charts whose pods are not known here."""
    out, unknown = [], []
    for r in stack.of_type(HELM_RELEASE, HELM_CHART_V4):
        chart = r.props.get("chart")
        chart = chart.rpartition("/")[2] if isinstance(chart, str) else "?"
        values = r.props.get("values")
        make = CHARTS.get(chart)
        if make is None or not isinstance(values, dict):
            unknown.append(f"{chart} {r.props.get('version', '?')}")
            continue
        for p in make(values):
            p.source = f"chart {chart} {r.props.get('version', '?')}"
            out.append(p)
    return out, unknown


# -- EKS's own add-ons ---------------------------------------------------------------------------------------------


def eks_addon_pods(stack: Stack) -> list[FitPod]:
    """What EKS runs on every cluster (CoreDNS, kube-proxy, the VPC CNI's aws-node), and the add-ons the stack
    installs (``aws:eks/addon``) whose pods are known.

    EKS does not publish its add-on manifests; the requests are those of the upstream manifests the add-ons ship:
    CoreDNS 2 replicas x 100m / 70Mi (kubernetes/kubernetes cluster/addons/dns/coredns/coredns.yaml.base; tolerates
    CriticalAddonsOnly and the control plane only), kube-proxy 100m (the kube-proxy add-on's DaemonSet, tolerating
    every taint), aws-node 25m (aws/amazon-vpc-cni-k8s charts/aws-vpc-cni/values.yaml ``resources``; its network
    policy agent and init container ``{}``), eks-pod-identity-agent ``resources: {}`` (aws/eks-pod-identity-agent
    charts/eks-pod-identity-agent/values.yaml), eks-node-monitoring-agent 10m / 30Mi (aws/eks-node-monitoring-agent
    charts/eks-node-monitoring-agent/values.yaml ``nodeAgent.resources``); every DaemonSet tolerates every taint.
    Check a live cluster with ``kubectl -n kube-system get deploy,ds -o yaml``."""
    coredns_tol = [CRITICAL_ADDONS, {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    out = [
        FitPod(
            "coredns",
            _spec(
                [_c("coredns", _res({"cpu": "100m", "memory": "70Mi"}, {"memory": "170Mi"}))], tolerations=coredns_tol
            ),
            2,
            source="EKS add-on coredns",
        ),
        FitPod(
            "kube-proxy",
            _spec([_c("kube-proxy", _res({"cpu": "100m"}))], tolerations=TOLERATE_ALL),
            daemonset=True,
            source="EKS add-on kube-proxy",
        ),
        FitPod(
            "aws-node",
            _spec(
                [_c("aws-node", _res({"cpu": "25m"})), _c("aws-eks-nodeagent", {})],
                init=[_c("aws-vpc-cni-init", {})],
                tolerations=TOLERATE_ALL,
            ),
            daemonset=True,
            source="EKS add-on vpc-cni",
        ),
    ]
    known = {
        "eks-pod-identity-agent": _res(),
        "eks-node-monitoring-agent": _res({"cpu": "10m", "memory": "30Mi"}, {"cpu": "250m", "memory": "200Mi"}),
    }
    for r in stack.of_type("aws:eks/addon:Addon"):
        name = r.props.get("addonName")
        if name in known:
            out.append(
                FitPod(
                    name,
                    _spec([_c(name, known[name])], tolerations=TOLERATE_ALL),
                    daemonset=True,
                    source=f"EKS add-on {name}",
                )
            )
    return out


def all_pods(stack: Stack, *, eks_addons: bool = True) -> tuple[list[FitPod], list[str]]:
    """EKS's pods (when the stack creates the cluster), the charts', then the stack's own (the order they start in on
    a new cluster), and the charts whose pods are not known."""
    charts, unknown = chart_pods(stack)
    return (eks_addon_pods(stack) if eks_addons else []) + charts + stack_pods(stack), unknown
