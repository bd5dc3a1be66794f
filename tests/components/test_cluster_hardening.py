"""Least privilege beyond the Ray namespace, under Pulumi mocks: the monitoring stack (no lifecycle API,
NetworkPolicies, DCGM without SYS_ADMIN), the VPC CNI's strict mode with a policy for every namespace the stack runs
pods in, the control-plane audit trail, the node role, and the Pod Security label of every namespace. Values are
checked against the pinned charts' own defaults (tests/fixtures/charts/), NetworkPolicies against kubernetes-validate
and the evaluator of tests/components/test_least_privilege.py."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ray_efa_eks.components.observability import observability
from ray_efa_eks.components.observability.dashboard import all_exprs
from ray_efa_eks.components.kube import merge
from ray_efa_eks.components.observability.metrics_rules import AlertThresholds, alert_groups
from ray_efa_eks.tools import rules
from ray_efa_eks.tools.layout import Resource, from_mockrun
from ray_efa_eks.tools.mockrun import run_program
from tests.components.test_least_privilege import K8S_VERSION, NP, admitted, policies_of, selecting

CHARTS = Path(__file__).parents[1] / "fixtures" / "charts"
HELM = "kubernetes:helm.sh/v3:Release"
PSS = "pod-security.kubernetes.io/enforce"


def _defaults(folder: str) -> dict:
    return yaml.safe_load((CHARTS / folder / "values.yaml").read_text())


def release(run, chart: str) -> dict:
    return next(r for r in run.of_type(HELM) if r["chart"] == chart)


def pod(ns: str, **labels: str) -> dict:
    return {"name": f"{ns}-pod", "ns": ns, "labels": labels}


# -- monitoring: Prometheus without its lifecycle API --------------------------------------------------------------


def test_prometheus_reloads_by_signal_so_it_serves_no_quit_endpoint(default_run):
    """prometheus-operator adds --web.enable-lifecycle whenever the reload strategy is HTTP, the default (the chart's
    ``reloadStrategy: ""``; pkg/prometheus/promcfg.go v0.93.0 line 1245). ``ProcessSignal`` is one of the two enum
    values of the Prometheus CRD's ``spec.reloadStrategy`` (example/prometheus-operator-crd/
    monitoring.coreos.com_prometheuses.yaml v0.93.0: HTTP, ProcessSignal)."""
    values = release(default_run, "kube-prometheus-stack")["values"]
    defaults = _defaults(f"kube-prometheus-stack-{observability.KPS_CHART_VERSION}")
    assert defaults["prometheus"]["prometheusSpec"]["reloadStrategy"] == ""
    assert values["prometheus"]["prometheusSpec"]["reloadStrategy"] == "ProcessSignal"


# -- monitoring and gpu-metrics NetworkPolicies --------------------------------------------------------------------


def test_monitoring_admits_its_own_pods_and_the_webhook_port_only(default_run):
    policies = policies_of(default_run)
    prometheus = pod("monitoring", app="prometheus")
    grafana = pod("monitoring", **{"app.kubernetes.io/name": "grafana"})
    ray_worker = pod("ray", **{"ray.io/cluster": "ray", "ray.io/node-type": "worker"})
    api_server = {"name": "api-server", "ns": "<control plane>", "labels": {}}
    for dst in (prometheus, grafana):
        assert selecting(policies, dst)
        for port in (9090, 3000, 8080):
            assert not admitted(policies, ray_worker, dst, port), (dst["labels"], port)
            assert not admitted(policies, pod("default"), dst, port)
    assert admitted(policies, grafana, prometheus, 9090)  # Grafana's datasource
    assert admitted(policies, prometheus, grafana, 3000)  # and Prometheus scrapes its own namespace
    assert admitted(
        policies, api_server, pod("monitoring", app="kube-prometheus-stack-operator"), observability.WEBHOOK_PORT
    )
    assert not admitted(policies, ray_worker, prometheus, 9090)  # POST /-/quit from a job: refused twice over


def test_dcgm_admits_the_monitoring_namespace_on_its_port_only(default_run):
    policies = policies_of(default_run)
    dcgm = pod(observability.DCGM_NAMESPACE, **{"app.kubernetes.io/name": "dcgm-exporter"})
    assert admitted(policies, pod("monitoring", app="prometheus"), dcgm, observability.DCGM_PORT)
    assert not admitted(policies, pod("ray", **{"ray.io/cluster": "ray"}), dcgm, observability.DCGM_PORT)
    assert not admitted(policies, pod("monitoring"), dcgm, 5555)
    for p in policies:
        kubernetes_validate.validate(
            {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", **p}, K8S_VERSION, strict=True
        )


# -- strict mode: every namespace the stack runs pods in has a policy for every pod --------------------------------

POD_NAMESPACES = ("kube-system", "kuberay-system", "monitoring", "gpu-metrics", "efa-node-agent", "ray")


def test_the_cni_enforces_strict_and_every_pod_has_a_policy_and_its_egress(default_run):
    """Strict mode denies a pod no policy selects (its DNS lookups included): each namespace the stack puts pods in
    (its own, the charts' and kube-system's CoreDNS) has a policy selecting every pod, and one letting it reach
    DNS, the API server and S3 (all egress: what these policies narrow is ingress)."""
    cni = default_run.one("eks:index:Cluster")["vpcCniOptions"]
    assert cni["enableNetworkPolicy"] is True
    assert cni["configurationValues"] == {"env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}
    policies = policies_of(default_run)
    namespaces = {r["namespace"] for r in default_run.of_type(HELM)} | {
        r["metadata"]["namespace"] for r in default_run.of_type("kubernetes:apps/v1:DaemonSet")
    }
    assert namespaces <= set(POD_NAMESPACES) | {"image-prepull"}
    # the pre-pull pods need no network at all (the kubelet pulls): one policy denies them everything
    prepull = [p["spec"] for p in policies if p["metadata"]["namespace"] == "image-prepull"]
    assert prepull == [{"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}]
    assert not admitted(policies, pod("ray"), pod("image-prepull"), 80)
    for ns in POD_NAMESPACES:
        stranger = pod(ns, app="anything")
        egress = [p for p in policies if p["metadata"]["namespace"] == ns and "Egress" in p["spec"]["policyTypes"]]
        assert [p["spec"] for p in egress] == [{"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}], ns
        assert selecting(policies, stranger) or ns == "efa-node-agent", ns
    # CoreDNS (and every other kube-system pod) keeps standard mode's reach
    coredns = pod("kube-system", **{"k8s-app": "kube-dns"})
    assert admitted(policies, pod("ray"), coredns, 53, "UDP") and admitted(policies, pod("default"), coredns, 53)


def test_standard_mode_and_no_policies_when_network_policy_is_off():
    run = run_program({"networkPolicy": "false", "efaCheck": "false"})
    assert not run.of_type(NP)
    assert "configurationValues" not in run.one("eks:index:Cluster")["vpcCniOptions"]


# -- DCGM without SYS_ADMIN ----------------------------------------------------------------------------------------


def test_dcgm_drops_sys_admin_and_lists_no_profiling_counter(default_run):
    values = release(default_run, "dcgm-exporter")["values"]
    defaults = _defaults(f"dcgm-exporter-{observability.DCGM_CHART_VERSION}")
    assert "SYS_ADMIN" in defaults["securityContext"]["capabilities"]["add"]  # what the chart would do
    effective = merge(defaults, values)  # Helm: maps merge, lists are replaced
    assert effective["securityContext"]["capabilities"] == {"add": [], "drop": ["ALL"]}
    assert effective["securityContext"]["allowPrivilegeEscalation"] is False
    counters = [ln.split(",")[0] for ln in values["customMetrics"].splitlines() if ln and not ln.startswith("#")]
    assert not [c for c in counters if c.startswith("DCGM_FI_PROF_")]
    read = set(re.findall(r"DCGM_FI_[A-Z_]+", " ".join(e for _, e in all_exprs(40.0))))
    read |= set(re.findall(r"DCGM_FI_[A-Z_]+", str(alert_groups(AlertThresholds()))))
    assert read and read <= set(counters)
    # the chart reads customMetrics (templates/metrics-configmap.yaml) though its values.yaml only shows it commented
    assert (
        "# customMetrics: |"
        in (CHARTS / f"dcgm-exporter-{observability.DCGM_CHART_VERSION}" / "values.yaml").read_text()
    )


# -- the audit trail -----------------------------------------------------------------------------------------------


def test_audit_and_authenticator_logs_go_to_a_log_group_with_a_retention(default_run):
    cluster = default_run.one("eks:index:Cluster")
    assert cluster["enabledClusterLogTypes"] == ["audit", "authenticator"]
    (group,) = default_run.of_type("aws:cloudwatch/logGroup:LogGroup")
    assert group["name"] == f"/aws/eks/{cluster['name']}/cluster" and group["retentionInDays"] == 90
    eks = next(r for r in default_run.resources if r.type == "eks:index:Cluster")
    log = next(r for r in default_run.resources if r.type == "aws:cloudwatch/logGroup:LogGroup")
    assert log.urn in eks.options["dependencies"]  # EKS writes into it, and never creates its own
    assert any("CloudWatch Logs" in n and "$0.50/GB" in n for n in default_run.outputs["costNotes"])


# -- Pod Security labels on every namespace ------------------------------------------------------------------------


def test_every_namespace_the_stack_creates_enforces_a_pod_security_level(default_run):
    levels = {
        r["metadata"]["name"]: (r["metadata"].get("labels") or {}).get(PSS)
        for r in default_run.of_type("kubernetes:core/v1:Namespace")
    }
    assert levels == {
        "ray": "baseline",
        "kuberay-system": "baseline",
        "monitoring": "baseline",
        "gpu-metrics": "privileged",
        "efa-node-agent": "privileged",
        "image-prepull": "restricted",
    }


# -- the plan rule -------------------------------------------------------------------------------------------------


def _with(run, chart: str, values: dict) -> list[Resource]:
    """The run's resources as the plan reads them, ``values`` merged into ``chart``'s release the way a user's
    ``extra_values`` would be."""
    out = []
    for r in from_mockrun(run):
        if r.type == HELM and r.props.get("chart") == chart:
            r = replace(r, props={**r.props, "values": merge(r.props["values"], values)})
        out.append(r)
    return out


@pytest.mark.parametrize(
    "chart,values,problem",
    [
        (
            "kube-prometheus-stack",
            {"prometheus": {"prometheusSpec": {"reloadStrategy": "HTTP"}}},
            "--web.enable-lifecycle",
        ),
        ("kube-prometheus-stack", {"prometheus": {"prometheusSpec": {"reloadStrategy": ""}}}, "--web.enable-lifecycle"),
        ("dcgm-exporter", {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "SYS_ADMIN"),
        ("dcgm-exporter", {"securityContext": {"privileged": True}}, "privileged"),
    ],
)
def test_the_monitoring_rule_refuses_overrides_that_bring_it_back(default_run, chart, values, problem):
    assert rules.check(_with(default_run, chart, {}), only=["monitoring-hardened"]) == []
    found = rules.check(_with(default_run, chart, values), only=["monitoring-hardened"])
    assert len(found) == 1 and problem in found[0].problem, found


def test_the_monitoring_rule_wants_a_policy_over_every_monitoring_pod(default_run):
    kept = [
        r for r in from_mockrun(default_run) if not (r.type == NP and r.props["metadata"]["namespace"] == "monitoring")
    ]
    found = rules.check(kept, only=["monitoring-hardened"])
    assert [v.problem for v in found] == ["no NetworkPolicy of namespace monitoring selects its pods"]


# -- the node role -------------------------------------------------------------------------------------------------


def test_the_node_role_pulls_images_and_the_cni_has_its_own_pod_identity_role(default_run):
    node = next(r for r in default_run.resources if r.type == "aws:iam/role:Role" and r.name.endswith("-node"))
    attached = {a["role"]: [] for a in default_run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")}
    for a in default_run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment"):
        attached[a["role"]].append(a["policyArn"].rsplit("/", 1)[-1])
    assert sorted(attached[node.name]) == ["AmazonEC2ContainerRegistryPullOnly", "AmazonEKSWorkerNodePolicy"]
    (cni,) = [
        p
        for p in default_run.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if p["serviceAccount"] == "aws-node"
    ]
    assert cni["namespace"] == "kube-system"
    role = cni["roleArn"].rsplit("/", 1)[-1]
    assert attached[role] == ["AmazonEKS_CNI_Policy"]
    trust = next(
        r
        for r in default_run.of_type("aws:iam/role:Role")
        if (r.inputs.get("description") or "").endswith("AmazonEKS_CNI_Policy")
    )["assumeRolePolicy"]
    assert '"kube-system"' in trust and '"aws-node"' in trust and "pods.eks.amazonaws.com" in trust
    assert "eks-pod-identity-agent" in [a["addonName"] for a in default_run.of_type("aws:eks/addon:Addon")]
    assert rules.check(from_mockrun(default_run), only=["node-role-least-privilege"]) == []


def test_the_node_role_rule_warns_on_the_old_policies(default_run):
    old = []
    for r in from_mockrun(default_run):
        if r.type == "aws:iam/rolePolicyAttachment:RolePolicyAttachment" and r.name.endswith("-node-1"):
            r = replace(r, props={**r.props, "policyArn": "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly"})
        old.append(r)
    node = next(r for r in old if r.type == "aws:iam/role:Role" and r.name.endswith("-node"))
    old.append(
        replace(
            old[-1],
            name="cni-on-node",
            type="aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            props={"role": node.name, "policyArn": "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy"},
        )
    )
    found = rules.check(old, only=["node-role-least-privilege"])
    assert sorted(v.problem.split(":")[0] for v in found) == [
        "the node role holds AmazonEC2ContainerRegistryReadOnly",
        "the node role holds AmazonEKS_CNI_Policy",
    ]
    assert {v.severity for v in found} == {"warning"}
