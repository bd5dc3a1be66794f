"""Observability: Prometheus + Grafana (kube-prometheus-stack), DCGM exporter, the scrape objects, alerts, dashboard.

What it installs (``observability: true``, the default):

- kube-prometheus-stack (pinned :data:`KPS_CHART_VERSION`) in namespace ``monitoring`` (Pod Security ``baseline``
  enforced; ``kube.METRICS_NAMESPACE``, which the Ray pods' and the exporter's NetworkPolicies admit): the
  Prometheus operator, one Prometheus, Grafana and kube-state-metrics, all on the system node. Off, and why:
  Alertmanager (no receiver is configured here: the alerts show in Prometheus and Grafana, and a team that routes
  alerts points its own Alertmanager or AMP's at them; ``extra_values`` turns it back on), node-exporter (a
  hostNetwork/hostPID/hostPath DaemonSet that needs a privileged namespace on every node, for host metrics nothing
  here reads; the EFA exporter and DCGM cover the GPU nodes), the control-plane scrapes EKS does not expose
  (etcd, scheduler, controller-manager) and kube-proxy's (bound to 127.0.0.1 on EKS), whose targets would sit down
  and fire the chart's own alerts. kube-state-metrics stays: the node-unproven and stale-verdict alerts read it.
- DCGM exporter (NVIDIA's chart, pinned :data:`DCGM_CHART_VERSION`) on the GPU nodes, in its own namespace
  ``gpu-metrics`` labelled Pod Security ``privileged`` (the chart's DaemonSet always mounts the kubelet's
  pod-resources socket by hostPath, deployment/templates/daemonset.yaml at tag 4.5.3-4.8.2); nothing else runs
  there. Without SYS_ADMIN (:data:`DCGM_SECURITY_CONTEXT`): the chart adds it "for profiling metrics (DCGM_FI_PROF_*)"
  (values.yaml), its default counter list has five of them, and nothing here reads one, so the stack gives the chart
  its own list without them (:data:`DCGM_COUNTERS`). Its chart's ServiceMonitor.
- NetworkPolicies (``network_policy``): in ``monitoring`` every pod admits only the namespace's own pods (Prometheus
  scrapes the operator, kube-state-metrics and Grafana; Grafana queries Prometheus) and, on the operator's webhook
  port :data:`WEBHOOK_PORT`, the API server; in ``gpu-metrics`` the exporter admits ``monitoring`` on its port only.
  ``kubectl port-forward`` to Grafana enters through the pod's own network namespace, as to the Ray head.
- Prometheus reloads its configuration by signal (``reloadStrategy: ProcessSignal``): under the chart's empty default
  prometheus-operator starts Prometheus with ``--web.enable-lifecycle`` (pkg/prometheus/promcfg.go, v0.93.0 line
  1245: whenever the strategy is HTTP, the default), which serves ``POST /-/quit`` and ``/-/reload`` to whoever
  reaches port 9090. With ProcessSignal the config reloader sends SIGHUP instead (pkg/prometheus/common.go
  ``ReloaderUseSignal``; the pod then shares its process namespace, ``ShareProcessNamespace``).
- PodMonitors: the EFA exporter (``honorLabels``: its ``node`` label is the node it read), the Ray head (metrics,
  autoscaler and dashboard ports) and workers (metrics port), labelled ``ray_io_cluster`` as Ray's KubeRay
  Prometheus guide does (docs.ray.io cluster/kubernetes/k8s-ecosystem/prometheus-grafana; KubeRay
  config/prometheus/podMonitor.yaml), so Ray's own dashboards work too.
- PrometheusRule ``ray-efa-eks-fabric`` (components/observability/metrics_rules.py) and the Grafana dashboard ConfigMap
  (components/observability/dashboard.py) picked up by the chart's Grafana sidecar (label ``grafana_dashboard: "1"``).

Sizing (every pod of the system node against its allocatable: the plan's pod fit, tools/layout_fit.py, and
docs/deploy.md): what we request here, requests == limits: Prometheus 500m / 2Gi, its config reloader 50m / 64Mi,
the operator 100m / 128Mi (:data:`RESOURCES`): 650m / ~2.2Gi. Grafana and kube-state-metrics are sub-charts whose
keys the pinned chart's values.yaml does not list, so their sizes are the sub-charts' (none requested); set them
through ``extra_values`` if the node is shared further. Prometheus keeps its TSDB on an emptyDir on the node's
root volume, bounded by ``retention`` and :data:`RETENTION_SIZE`; a pod restart loses local history (keep
history outside with ``metricsRemoteWriteUrl``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlsplit

import pulumi
import pulumi_kubernetes as k8s

from .dashboard import dashboard
from ..kube import (
    GPU_ROLE,
    GPU_TOLERATION,
    METRICS_NAMESPACE,
    METRICS_PORTS,
    ROLE_LABEL,
    SYSTEM_ROLE,
    merge,
    pod_resources,
    startup_toleration,
)
from .metrics_rules import AlertThresholds, alert_groups
from ..addons.node_agent import APP_LABELS as EXPORTER_LABELS
from ..addons.node_agent import NAMESPACE as EXPORTER_NAMESPACE
from ..network.network_policies import (
    allow_all_egress,
    default_deny_ingress,
    from_anywhere,
    from_namespaces,
    same_namespace_ingress,
)
from ..config.values import amp_region, looks_like_amp

KPS_CHART = "kube-prometheus-stack"
KPS_CHART_VERSION = "88.5.3"
KPS_REPO = "https://prometheus-community.github.io/helm-charts"
DCGM_CHART = "dcgm-exporter"
DCGM_CHART_VERSION = "4.8.2"
DCGM_REPO = "https://nvidia.github.io/dcgm-exporter/helm-charts"
DCGM_NAMESPACE = "gpu-metrics"
FULLNAME = "kube-prometheus-stack"
"""``fullnameOverride``: fixes the Prometheus service account's name (:data:`PROMETHEUS_SERVICE_ACCOUNT`)."""
PROMETHEUS_SERVICE_ACCOUNT = f"{FULLNAME}-prometheus"
"""The service account a Pod Identity association for AMP remote write names (docs/observability.md)."""
GRAFANA_SERVICE = f"{KPS_CHART}-grafana"
"""The Grafana sub-chart's Service (named ``<release>-grafana``), port 80: ``kubectl port-forward`` target."""
RETENTION_SIZE = "8GB"
"""Cap on the TSDB (on the system node's root volume) whatever ``retention`` says."""
DASHBOARD_LABEL = {"grafana_dashboard": "1"}
"""kube-prometheus-stack's ``grafana.sidecar.dashboards.label`` / ``labelValue`` defaults."""
BASELINE_LABELS = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
PRIVILEGED_LABELS = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
RESOURCES = {
    "prometheus": pod_resources("500m", "2Gi"),
    "reloader": pod_resources("50m", "64Mi"),
    "operator": pod_resources("100m", "128Mi"),
}
SCRAPE_INTERVAL = "30s"
RELOAD_STRATEGY = "ProcessSignal"
"""``prometheusSpec.reloadStrategy``: SIGHUP from the config reloader, so Prometheus runs without
``--web.enable-lifecycle`` (no ``POST /-/quit``)."""
WEBHOOK_PORT = 10250
"""kube-prometheus-stack ``prometheusOperator.tls.internalPort``: the operator's HTTPS port, its admission webhook's
target (``admissionWebhooks``, on by default), which the API server calls."""
DCGM_PORT = 9400
"""dcgm-exporter ``service.port``."""
DCGM_SECURITY_CONTEXT = {
    "runAsNonRoot": False,
    "runAsUser": 0,
    "allowPrivilegeEscalation": False,
    "capabilities": {"add": [], "drop": ["ALL"]},
}
"""The chart's default (values.yaml ``securityContext``) without ``add: [SYS_ADMIN]``, which it needs only for the
profiling counters (``DCGM_FI_PROF_*``), none of which :data:`DCGM_COUNTERS` lists. Still root: the chart's own
non-root variant (uid 1000) is not what its image was verified with here, and the pod-resources socket it mounts is
the kubelet's (root-owned)."""
DCGM_COUNTERS = """# DCGM FIELD, Prometheus metric type, help message (the exporter's defaults but DCGM_FI_PROF_*)
DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).
DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).
DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).
DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, Total number of NVLink bandwidth counters for all lanes.
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors.
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for correctable errors.
DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, Whether remapping of rows has failed.
"""
"""``customMetrics``: the counters the exporter reads (the dashboard's and the alert rules' among them)."""
RAY_NODE_TYPE = "ray.io/node-type"
RAY_CLUSTER_LABEL = "__meta_kubernetes_pod_label_ray_io_cluster"


@dataclass
class ObservabilityArgs:
    """Inputs of :class:`Observability`."""

    provider: k8s.Provider
    """Kubernetes provider of the cluster the charts install into."""
    ray_namespace: str = "ray"
    """Namespace of the shared RayCluster, whose pods are scraped."""
    team_namespaces: list[str] = field(default_factory=list)
    """Namespaces of the teams' RayJobs (``jobQueues``): their Ray pods are scraped like the shared cluster's, so a
    job's fabric verdict metric reaches Prometheus as the gate's does."""
    retention: str = "15d"
    """Prometheus ``retention`` (a Prometheus duration: 15d, 12h)."""
    remote_write_url: Optional[str] = None
    """Also send every sample there (e.g. Amazon Managed Service for Prometheus' ``.../api/v1/remote_write``);
    an ``aps-workspaces`` URL is signed with SigV4 in ``region`` (the service account needs ``aps:RemoteWrite``)."""
    region: Optional[str] = None
    """AWS region of an ``aps-workspaces`` ``remote_write_url`` (its SigV4 signing region)."""
    efa: bool = True
    """Scrape the EFA exporter (the node agent runs only with EFA)."""
    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    """Thresholds of the fabric alert rules (observability/metrics_rules.py)."""
    line_rate_gbps: float = 40.0
    """The GPU type's EFA line rate (catalogue ``efa_gbps``), drawn on the dashboard."""
    namespace: str = METRICS_NAMESPACE
    """Namespace of Prometheus, Grafana and the operator."""
    extra_values: dict[str, Any] = field(default_factory=dict)
    """``{"kps": {...}, "dcgm": {...}}`` merged over ours the way Helm merges."""
    startup_taints: list[str] = field(default_factory=list)
    """Startup taint keys of the GPU nodes: DCGM tolerates them, so an unproven node's GPUs are watched too."""
    network_policy: bool = True
    """NetworkPolicies in ``namespace`` and ``gpu-metrics`` (:func:`network_policies`)."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What the releases wait for: the system node they run on."""


def _on_system_node() -> dict[str, Any]:
    return {"nodeSelector": {ROLE_LABEL: SYSTEM_ROLE}}


def is_amp(url: str) -> bool:
    """Amazon Managed Service for Prometheus workspace endpoints need SigV4 (``aps-workspaces.<region>.amazonaws.com``,
    the dual-stack ``.api.aws`` and FIPS forms too: components/config/values.py ``AMP_HOST``)."""
    try:
        return looks_like_amp((urlsplit(url).hostname or "").lower())
    except ValueError:
        return False


def remote_write(url: Optional[str], region: Optional[str]) -> list[dict[str, Any]]:
    """Prometheus' ``remoteWrite``: an AMP endpoint signed with SigV4 for the region its host names (a workspace in
    another region than the stack's refuses a write signed for the stack's); ``region`` only for an AMP host that
    names none (the stack's config refuses one: components/config/values.py ``RemoteWriteUrl``)."""
    if not url:
        return []
    entry: dict[str, Any] = {"url": url}
    if is_amp(url):
        signed = amp_region(url) or region
        entry["sigv4"] = {"region": signed} if signed else {}
    return [entry]


def kps_values(args: ObservabilityArgs) -> dict[str, Any]:
    """Overrides of kube-prometheus-stack's values.yaml (every key exists there: tests/components/test_observability.py)."""
    sysnode = _on_system_node()
    spec: dict[str, Any] = {
        "retention": args.retention,
        "retentionSize": RETENTION_SIZE,
        "scrapeInterval": SCRAPE_INTERVAL,
        "resources": RESOURCES["prometheus"],
        "reloadStrategy": RELOAD_STRATEGY,
        **sysnode,
        # pick up every ServiceMonitor/PodMonitor/PrometheusRule, not only those labelled with the release
        "serviceMonitorSelectorNilUsesHelmValues": False,
        "podMonitorSelectorNilUsesHelmValues": False,
        "ruleSelectorNilUsesHelmValues": False,
    }
    if args.remote_write_url:
        spec["remoteWrite"] = remote_write(args.remote_write_url, args.region)
    return {
        "fullnameOverride": FULLNAME,
        "alertmanager": {"enabled": False},
        "nodeExporter": {"enabled": False},
        "kubeStateMetrics": {"enabled": True},
        "kubeEtcd": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeControllerManager": {"enabled": False},
        "kubeProxy": {"enabled": False},
        "defaultRules": {
            "rules": {
                "etcd": False,
                "kubeSchedulerAlerting": False,
                "kubeSchedulerRecording": False,
                "kubeControllerManager": False,
                "kubeProxy": False,
                "alertmanager": False,
                "nodeExporterAlerting": False,
                "nodeExporterRecording": False,
                "windows": False,
            }
        },
        "grafana": {
            "enabled": True,
            "defaultDashboardsEnabled": False,
            "sidecar": {"dashboards": {"enabled": True, "label": "grafana_dashboard", "labelValue": "1"}},
        },
        "prometheusOperator": {
            "resources": RESOURCES["operator"],
            **sysnode,
            "prometheusConfigReloader": {"resources": RESOURCES["reloader"]},
            "admissionWebhooks": {"patch": {**sysnode}},
        },
        "prometheus": {"prometheusSpec": spec},
    }


def dcgm_values(startup_taints: list[str] | None = None) -> dict[str, Any]:
    """Overrides of dcgm-exporter's values.yaml: on the GPU nodes only (their taint and startup taints tolerated)."""
    return {
        "nodeSelector": {ROLE_LABEL: GPU_ROLE},
        "tolerations": [dict(GPU_TOLERATION), *(startup_toleration(k) for k in startup_taints or [])],
        "serviceMonitor": {"enabled": True, "interval": "15s"},
        "securityContext": json.loads(json.dumps(DCGM_SECURITY_CONTEXT)),
        "customMetrics": DCGM_COUNTERS,
    }


def network_policies(namespace: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """{namespace: [(name, spec)]}: the monitoring namespace admits its own pods and, on the operator's webhook port,
    the API server; the exporter's namespace admits the monitoring namespace on the exporter's port; both allow all
    egress (the VPC CNI's strict mode denies a pod no policy selects, components/network/network_policies.py)."""
    return {
        namespace: [
            (f"{namespace}-default-deny", default_deny_ingress()),
            (f"{namespace}-same-namespace", same_namespace_ingress()),
            (f"{namespace}-operator-webhook", from_anywhere([WEBHOOK_PORT])),
            (f"{namespace}-egress", allow_all_egress()),
        ],
        DCGM_NAMESPACE: [
            (f"{DCGM_NAMESPACE}-default-deny", default_deny_ingress()),
            (f"{DCGM_NAMESPACE}-scrape", from_namespaces({}, [namespace], [DCGM_PORT])),
            (f"{DCGM_NAMESPACE}-egress", allow_all_egress()),
        ],
    }


def _meta(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "ray-efa-eks"}}


def exporter_pod_monitor(namespace: str) -> dict[str, Any]:
    """The EFA exporter's pods; ``honorLabels`` keeps its ``node`` (else Prometheus renames it ``exported_node``)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta("efa-exporter", namespace),
        "spec": {
            "namespaceSelector": {"matchNames": [EXPORTER_NAMESPACE]},
            "selector": {"matchLabels": {"app.kubernetes.io/name": EXPORTER_LABELS["app.kubernetes.io/name"]}},
            "podMetricsEndpoints": [{"port": "metrics", "honorLabels": True, "interval": "15s"}],
        },
    }


def _ray_cluster_label() -> list[dict[str, Any]]:
    return [{"action": "replace", "sourceLabels": [RAY_CLUSTER_LABEL], "targetLabel": "ray_io_cluster"}]


def ray_pod_monitors(namespace: str, ray_namespace: str, team_namespaces: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Ray's documented KubeRay scrape: the head's metrics, autoscaler and dashboard ports; the workers' metrics port.

    The head container declares only ``metrics`` by name (KubeRay adds it), so the other two go by number."""
    head_eps = [{"port": "metrics", "relabelings": _ray_cluster_label()}]
    head_eps += [
        {"portNumber": METRICS_PORTS[p], "relabelings": _ray_cluster_label()} for p in ("as-metrics", "dash-metrics")
    ]
    ns = {"matchNames": [ray_namespace, *team_namespaces]}
    return [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": _meta("ray-head", namespace),
            "spec": {
                "namespaceSelector": ns,
                "selector": {"matchLabels": {RAY_NODE_TYPE: "head"}},
                "podMetricsEndpoints": head_eps,
            },
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": _meta("ray-workers", namespace),
            "spec": {
                "namespaceSelector": ns,
                "selector": {"matchLabels": {RAY_NODE_TYPE: "worker"}},
                "podMetricsEndpoints": [{"port": "metrics", "relabelings": _ray_cluster_label()}],
            },
        },
    ]


def prometheus_rule(namespace: str, thresholds: AlertThresholds) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta("ray-efa-eks-fabric", namespace),
        "spec": {"groups": alert_groups(thresholds)},
    }


def dashboard_config_map(namespace: str, line_rate_gbps: float) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            **_meta("ray-efa-eks-dashboard", namespace),
            "labels": {"app.kubernetes.io/part-of": "ray-efa-eks", **DASHBOARD_LABEL},
        },
        "data": {"ray-efa-eks-fabric.json": json.dumps(dashboard(line_rate_gbps), indent=1)},
    }


def custom_objects(args: ObservabilityArgs) -> list[dict[str, Any]]:
    """The CRD-shaped objects (validated against the chart's CRDs in tests)."""
    objs = ray_pod_monitors(args.namespace, args.ray_namespace, tuple(args.team_namespaces))
    if args.efa:
        objs.insert(0, exporter_pod_monitor(args.namespace))
    objs.append(prometheus_rule(args.namespace, args.thresholds))
    return objs


class Observability(pulumi.ComponentResource):
    """Metrics stack: kube-prometheus-stack + Grafana, DCGM exporter, scrape objects, alert rules, dashboard."""

    def __init__(self, name: str, args: ObservabilityArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("ray-efa-eks:index:Observability", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        ns = k8s.core.v1.Namespace(
            f"{name}-ns", metadata={"name": args.namespace, "labels": dict(BASELINE_LABELS)}, opts=child
        )
        gpu_ns = k8s.core.v1.Namespace(
            f"{name}-gpu-ns", metadata={"name": DCGM_NAMESPACE, "labels": dict(PRIVILEGED_LABELS)}, opts=child
        )
        self.kps = k8s.helm.v3.Release(
            f"{name}-kps",
            name=KPS_CHART,
            chart=KPS_CHART,
            version=KPS_CHART_VERSION,
            repository_opts={"repo": KPS_REPO},
            namespace=args.namespace,
            values=merge(kps_values(args), args.extra_values.get("kps", {})),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[ns, *args.depends_on])),
        )
        after_crds = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.kps]))
        self.dcgm = k8s.helm.v3.Release(
            f"{name}-dcgm",
            name=DCGM_CHART,
            chart=DCGM_CHART,
            version=DCGM_CHART_VERSION,
            repository_opts={"repo": DCGM_REPO},
            namespace=DCGM_NAMESPACE,
            values=merge(dcgm_values(args.startup_taints), args.extra_values.get("dcgm", {})),
            opts=pulumi.ResourceOptions.merge(after_crds, pulumi.ResourceOptions(depends_on=[gpu_ns, self.kps])),
        )
        for obj in custom_objects(args):
            k8s.apiextensions.CustomResource(
                f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}",
                api_version=obj["apiVersion"],
                kind=obj["kind"],
                metadata=obj["metadata"],
                spec=obj["spec"],
                opts=after_crds,
            )
        if args.network_policy:
            for where, policies in network_policies(args.namespace).items():
                in_ns = pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(depends_on=[ns if where == args.namespace else gpu_ns])
                )
                for policy, spec in policies:
                    k8s.networking.v1.NetworkPolicy(
                        f"{name}-{policy}", metadata=_meta(policy, where), spec=spec, opts=in_ns
                    )
        cm = dashboard_config_map(args.namespace, args.line_rate_gbps)
        k8s.core.v1.ConfigMap(
            f"{name}-dashboard",
            metadata=cm["metadata"],
            data=cm["data"],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[ns])),
        )
        self.grafana_service = GRAFANA_SERVICE
        self.register_outputs({"grafanaService": GRAFANA_SERVICE})
