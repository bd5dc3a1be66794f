"""The metrics stack: chart values against the pinned charts' own defaults, CRD-shaped objects against the CRDs,
and what the stack registers with observability on and off.

Chart defaults: tests/fixtures/charts/{kube-prometheus-stack-88.5.3,dcgm-exporter-4.8.2}/ (verbatim copies of
/work/shared/charts/). CRDs: tests/schemas/monitoring.coreos.com_*.yaml (kube-prometheus-stack 88.5.3's crds
sub-chart; tests/schemas/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from ray_efa_eks.components.config.config import ConfigError, StackConfig
from ray_efa_eks.components.observability.dashboard import TOKENS_METRIC, all_exprs, dashboard
from ray_efa_eks.components.observability.metrics_rules import AlertThresholds
from ray_efa_eks.components.addons.node_agent import APP_LABELS
from ray_efa_eks.components.kube import FABRIC_STARTUP_TAINT
from ray_efa_eks.components.addons.node_agent import NAMESPACE as AGENT_NS
from ray_efa_eks.components.observability.observability import (
    DCGM_CHART_VERSION,
    DCGM_NAMESPACE,
    KPS_CHART_VERSION,
    ObservabilityArgs,
    custom_objects,
    dcgm_values,
    kps_values,
)
from ray_efa_eks.tools.mockrun import run_program

TESTS = Path(__file__).parents[1]
CHARTS = TESTS / "fixtures" / "charts"
SCHEMAS = TESTS / "schemas"
HELM = "kubernetes:helm.sh/v3:Release"


def _defaults(folder: str) -> dict:
    return yaml.safe_load((CHARTS / folder / "values.yaml").read_text())


def _schema(plural: str) -> dict:
    crd = yaml.safe_load((SCHEMAS / f"monitoring.coreos.com_{plural}.yaml").read_text())
    return next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]


def validate(obj: dict, schema: dict) -> None:
    """Validate without checking the schema itself: the CRDs carry Go regexes (``^(?i)(abort|warn)?$``) that
    Python's ``re`` refuses as a pattern, on fields we never set."""
    jsonschema.Draft7Validator(schema).validate(obj)


def unknown_keys(ours: dict, defaults: dict, path: str = "") -> list[str]:
    """Keys we set that the chart's values.yaml does not have. Below a default that is an empty map, a list or a
    scalar (``resources: {}``, ``nodeSelector: {}``, ``remoteWrite: []``) the value is free-form: not descended."""
    out = []
    for k, v in ours.items():
        here = f"{path}.{k}" if path else k
        if k not in defaults:
            out.append(here)
        elif isinstance(v, dict) and isinstance(defaults[k], dict) and defaults[k]:
            out += unknown_keys(v, defaults[k], here)
    return out


def _args(**kw) -> ObservabilityArgs:
    return ObservabilityArgs(provider=None, **kw)  # type: ignore[arg-type]


def test_kps_values_exist_in_the_pinned_chart():
    values = kps_values(
        _args(
            remote_write_url="https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            region="us-east-1",
        )
    )
    assert unknown_keys(values, _defaults(f"kube-prometheus-stack-{KPS_CHART_VERSION}")) == []


def test_dcgm_values_exist_in_the_pinned_chart():
    """``customMetrics`` is read by the chart (templates/metrics-configmap.yaml) but only shown commented out in its
    values.yaml."""
    assert unknown_keys(dcgm_values(), _defaults(f"dcgm-exporter-{DCGM_CHART_VERSION}")) == ["customMetrics"]
    assert "# customMetrics: |" in (CHARTS / f"dcgm-exporter-{DCGM_CHART_VERSION}" / "values.yaml").read_text()


def test_the_key_check_can_fail():
    defaults = _defaults(f"kube-prometheus-stack-{KPS_CHART_VERSION}")
    assert unknown_keys(
        {"prometheus": {"prometheusSpec": {"retentionTime": "1d"}}, "grafana": {"resources": {}}}, defaults
    ) == ["prometheus.prometheusSpec.retentionTime", "grafana.resources"]


def test_prometheus_selects_every_monitor_and_rule():
    """With the chart's defaults Prometheus only picks up objects labelled release=<name>; ours carry no such label."""
    spec = kps_values(_args())["prometheus"]["prometheusSpec"]
    for k in (
        "serviceMonitorSelectorNilUsesHelmValues",
        "podMonitorSelectorNilUsesHelmValues",
        "ruleSelectorNilUsesHelmValues",
    ):
        assert spec[k] is False


def test_sigv4_only_for_amp():
    amp = kps_values(
        _args(
            remote_write_url="https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            region="eu-west-1",
        )
    )["prometheus"]["prometheusSpec"]
    assert amp["remoteWrite"] == [{"url": amp["remoteWrite"][0]["url"], "sigv4": {"region": "eu-west-1"}}]
    other = kps_values(_args(remote_write_url="https://mimir.example.com/api/v1/push"))["prometheus"]["prometheusSpec"]
    assert other["remoteWrite"] == [{"url": "https://mimir.example.com/api/v1/push"}]
    assert "remoteWrite" not in kps_values(_args())["prometheus"]["prometheusSpec"]


def test_resources_are_guaranteed_and_fit_the_system_node():
    v = kps_values(_args())
    sized = [
        v["prometheus"]["prometheusSpec"]["resources"],
        v["prometheusOperator"]["resources"],
        v["prometheusOperator"]["prometheusConfigReloader"]["resources"],
    ]
    for r in sized:
        assert r["requests"] == r["limits"]
    cpu = sum(int(r["requests"]["cpu"].rstrip("m")) for r in sized)
    mem = sum(
        int(r["requests"]["memory"][:-2]) * (1024 if r["requests"]["memory"].endswith("Gi") else 1) for r in sized
    )
    # m7i.xlarge allocatable ~3920m / ~14.9Gi; the Ray head 2 CPU / 8Gi, operator 100m / 512Mi, daemonsets and
    # CoreDNS ~0.4 CPU / ~0.5Gi: what is left must hold the metrics stack
    assert cpu <= 3920 - 2000 - 100 - 400 and mem <= (14.9 - 8 - 0.5 - 0.5) * 1024


@pytest.mark.parametrize("efa", [True, False])
def test_custom_objects_match_the_crds(efa):
    objs = custom_objects(_args(efa=efa))
    kinds = [o["kind"] for o in objs]
    assert kinds.count("PrometheusRule") == 1 and kinds.count("PodMonitor") == (3 if efa else 2)
    for o in objs:
        validate(o, _schema({"PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}[o["kind"]]))


def test_the_crd_check_can_fail():
    mon = custom_objects(_args())[0]
    bad = {**mon, "spec": {**mon["spec"], "podMetricsEndpoints": [{"port": "metrics", "honorLabels": "yes"}]}}
    with pytest.raises(jsonschema.ValidationError):
        validate(bad, _schema("podmonitors"))


def test_exporter_monitor_keeps_the_node_label():
    mon = custom_objects(_args())[0]
    assert mon["spec"]["namespaceSelector"] == {"matchNames": [AGENT_NS]}
    assert mon["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == APP_LABELS["app.kubernetes.io/name"]
    assert mon["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True


def test_alerts_use_the_node_agents_startup_taint():
    assert AlertThresholds().startup_taint == FABRIC_STARTUP_TAINT


def test_dashboard_queries_and_sidecar_label():
    d = dashboard(40.0)
    assert [p["title"] for p in d["panels"]] == [
        "EFA throughput per node vs line rate",
        "EFA error counters",
        "GPU utilization",
        "GPU memory used",
        "Ray Train throughput",
        "Fabric verdicts",
    ]
    assert any(TOKENS_METRIC in e for _, e in all_exprs(40.0))
    assert "4e+10" in json.dumps(d)  # the line rate, in bits/s
    sidecar = _defaults(f"kube-prometheus-stack-{KPS_CHART_VERSION}")["grafana"]["sidecar"]["dashboards"]
    run = run_program()
    cm = run.one("kubernetes:core/v1:ConfigMap", "observability-dashboard")
    assert cm["metadata"]["labels"][sidecar["label"]] == sidecar["labelValue"]
    assert json.loads(cm["data"]["ray-efa-eks-fabric.json"])["uid"] == d["uid"]


def test_stack_installs_the_metrics_stack_by_default(default_run):
    releases = {r["chart"]: r for r in default_run.of_type(HELM)}
    assert releases["kube-prometheus-stack"]["version"] == KPS_CHART_VERSION
    assert releases["dcgm-exporter"]["version"] == DCGM_CHART_VERSION
    assert releases["kube-prometheus-stack"]["namespace"] == "monitoring"
    assert releases["dcgm-exporter"]["namespace"] == DCGM_NAMESPACE
    namespaces = {
        r["metadata"]["name"]: r["metadata"].get("labels", {})
        for r in default_run.of_type("kubernetes:core/v1:Namespace")
    }
    assert namespaces["monitoring"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert namespaces[DCGM_NAMESPACE]["pod-security.kubernetes.io/enforce"] == "privileged"
    kinds = sorted(r.type for r in default_run.resources if r.type.startswith("kubernetes:monitoring.coreos.com"))
    assert kinds == ["kubernetes:monitoring.coreos.com/v1:PodMonitor"] * 3 + [
        "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
    ]
    rule = default_run.one("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    below = next(r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == "EfaBelowLineRate")
    assert "< 1.25e+09" in below["expr"]  # g6.12xlarge: 40 Gbit/s = 5e9 B/s, a quarter of it


def test_observability_off_installs_none_of_it():
    run = run_program({"observability": False})
    assert not [r for r in run.of_type(HELM) if r["chart"] in ("kube-prometheus-stack", "dcgm-exporter")]
    assert not [r for r in run.resources if r.type.startswith("kubernetes:monitoring.coreos.com")]


def test_retention_and_remote_write_reach_prometheus():
    url = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-abc/api/v1/remote_write"
    run = run_program({"metricsRetention": "3d", "metricsRemoteWriteUrl": url})
    spec = next(r for r in run.of_type(HELM) if r["chart"] == "kube-prometheus-stack")["values"]["prometheus"][
        "prometheusSpec"
    ]
    assert spec["retention"] == "3d" and spec["remoteWrite"] == [{"url": url, "sigv4": {"region": "us-east-1"}}]


@pytest.mark.parametrize(
    "url, region, signed",
    [
        # a workspace in another region than the stack's: signed for the workspace's (AMP's endpoints name their region)
        (
            "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            "us-west-2",
            "us-east-1",
        ),
        (
            "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            "us-east-1",
            "eu-west-1",
        ),
        # the dual-stack and FIPS data-plane endpoints are AMP too (AWS General Reference, AMP endpoints)
        (
            "https://aps-workspaces.ap-southeast-2.api.aws/workspaces/ws-1/api/v1/remote_write",
            "us-west-2",
            "ap-southeast-2",
        ),
        (
            "https://aps-workspaces-fips.us-gov-west-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            "us-east-1",
            "us-gov-west-1",
        ),
        ("https://mimir.example.com/api/v1/push", "us-west-2", None),
    ],
)
def test_remote_write_is_signed_for_the_workspaces_region_not_the_stacks(url, region, signed):
    run = run_program({"metricsRemoteWriteUrl": url}, region=region)
    spec = next(r for r in run.of_type(HELM) if r["chart"] == "kube-prometheus-stack")["values"]["prometheus"][
        "prometheusSpec"
    ]
    assert spec["remoteWrite"] == [{"url": url, **({"sigv4": {"region": signed}} if signed else {})}]


@pytest.mark.parametrize(
    "key,value,words",
    [
        (
            "metricsRemoteWriteUrl",
            "https://aps-workspaces.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            "aps-workspaces.REGION.amazonaws.com",
        ),
        (
            "metricsRemoteWriteUrl",
            "https://aps-workspaces.us-east-1x.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            "aps-workspaces.REGION.amazonaws.com",
        ),
        (
            "metricsRemoteWriteUrl",
            "https://aps-workspaces.us_east_1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            "aps-workspaces.REGION.amazonaws.com",
        ),
        ("metricsRemoteWriteUrl", "https://aps-workspaces.us-east-1.example.amazonaws.com/workspaces/ws-1", "REGION"),
        ("metricsRetention", "15 days", "Prometheus duration"),
        ("metricsRetention", "0d", "above zero"),
        ("metricsRemoteWriteUrl", "aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1", "scheme"),
        ("metricsRemoteWriteUrl", "https://user:secret@example.com/push", "credentials"),
        ("metricsRemoteWriteUrl", "https://example.com:0/push", "port 0"),
    ],
)
def test_bad_metrics_config_is_refused_naming_the_key(key, value, words):
    with pytest.raises(ConfigError) as e:
        StackConfig.from_mapping({key: value})
    assert key in str(e.value) and words in str(e.value)


# --- node health: EKS node auto repair and the node monitoring agent -------------------------------------------


def test_both_node_groups_repair_and_the_monitoring_agent_runs(default_run):
    from ray_efa_eks.components.nodes.node_groups import node_repair

    mngs = default_run.of_type("eks:index:ManagedNodeGroup")
    assert len(mngs) == 2 and all(node_repair in m.transforms for m in mngs)
    addon = default_run.one("aws:eks/addon:Addon", "node-monitoring-agent")
    assert addon["addonName"] == "eks-node-monitoring-agent"


def test_node_repair_sets_only_the_eks_node_group_child():
    import pulumi

    from ray_efa_eks.components.nodes.node_groups import node_repair

    def args(typ, props):
        return pulumi.ResourceTransformArgs(
            custom=True, type_=typ, name="gpu-mng", props=props, opts=pulumi.ResourceOptions()
        )

    out = node_repair(
        args(
            "aws:eks/nodeGroup:NodeGroup",
            {"nodeGroupName": "g", "nodeRepairConfig": {"maxParallelNodesRepairedCount": 1}},
        )
    )
    assert out.props == {
        "nodeGroupName": "g",
        "nodeRepairConfig": {"maxParallelNodesRepairedCount": 1, "enabled": True},
    }
    assert node_repair(args("aws:ec2/launchTemplate:LaunchTemplate", {})) is None
