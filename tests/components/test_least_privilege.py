"""Under Pulumi mocks: what each pod of the Ray namespace may do and who may reach it.

- the gate Job carries no Kubernetes API token;
- NetworkPolicy: every pod template we create is selected, the flows Ray, the gate and Prometheus need are
  admitted, and anything else (another pod of the namespace, another namespace, the wrong port) is refused; judged
  by an evaluator of the NetworkPolicy semantics (kubernetes.io/docs/concepts/services-networking/network-policies/)
  over the labels KubeRay really puts on the pods (ray-operator/controllers/ray/common/pod.go ``labelPod``);
- Ray pods know their region and do not probe IMDS;
- head and gate pods pass Pod Security ``baseline`` and everything of ``restricted`` but runAsNonRoot.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from ray_efa_eks.components.kube import METRICS_PORTS
from ray_efa_eks.tools.mockrun import run_program
from tests.helpers.pod_security import violations

K8S_VERSION = "1.33.0"
NP = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RC = "kubernetes:ray.io/v1:RayCluster"
JOB = "kubernetes:batch/v1:Job"


@pytest.fixture(scope="module")
def run():
    return run_program()


# -- KubeRay's pods and a NetworkPolicy evaluator ------------------------------------------------------------------


def kuberay_labels(template: dict, cluster: str, node_type: str, group: str) -> dict[str, str]:
    """The labels KubeRay 1.7 gives a Ray pod (common/pod.go labelPod): its own over the template's, the three
    ray.io keys not overridable."""
    labels = {
        "ray.io/is-ray-node": "yes",
        "ray.io/identifier": f"{cluster}-{node_type}",
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    labels.update((template.get("metadata") or {}).get("labels") or {})
    labels.update({"ray.io/cluster": cluster, "ray.io/node-type": node_type, "ray.io/group": group})
    return labels


def pods_we_create(run) -> list[dict]:
    """Every pod the stack makes in the Ray namespace: (name, namespace, labels, spec)."""
    rc = run.one(RC)
    ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
    head = rc["spec"]["headGroupSpec"]["template"]
    pods = [{"name": "head", "ns": ns, "labels": kuberay_labels(head, name, "head", "headgroup"), "spec": head}]
    for g in rc["spec"]["workerGroupSpecs"]:
        pods.append(
            {
                "name": f"worker-{g['groupName']}",
                "ns": ns,
                "labels": kuberay_labels(g["template"], name, "worker", g["groupName"]),
                "spec": g["template"],
            }
        )
    for job in run.of_type(JOB):
        t = job["spec"]["template"]
        pods.append({"name": "gate", "ns": job["metadata"]["namespace"], "labels": t["metadata"]["labels"], "spec": t})
    return pods


def _matches(selector: dict, labels: dict) -> bool:
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        has, val = e["key"] in labels, labels.get(e["key"])
        if not {
            "In": has and val in e.get("values", []),
            "NotIn": not has or val not in e.get("values", []),
            "Exists": has,
            "DoesNotExist": not has,
        }[e["operator"]]:
            return False
    return True


def _ns_labels(ns: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": ns}  # the API server sets it on every namespace


def _peer_admits(peer: dict, policy_ns: str, src: dict) -> bool:
    if "ipBlock" in peer:
        return False  # pod traffic in this model
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    ns_ok = _matches(ns_sel, _ns_labels(src["ns"])) if ns_sel is not None else src["ns"] == policy_ns
    pod_ok = _matches(pod_sel, src["labels"]) if pod_sel is not None else True
    return ns_ok and pod_ok


def selecting(policies: list[dict], dst: dict) -> list[dict]:
    return [
        p
        for p in policies
        if p["metadata"]["namespace"] == dst["ns"]
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and _matches(p["spec"]["podSelector"], dst["labels"])
    ]


def admitted(policies: list[dict], src: dict, dst: dict, port: int, protocol: str = "TCP") -> bool:
    """Whether ``src`` may open ``port`` on ``dst``: isolated pods admit the union of their policies' rules."""
    chosen = selecting(policies, dst)
    if not chosen:
        return True
    for p in chosen:
        for rule in p["spec"].get("ingress") or []:
            peers = rule.get("from")
            if peers is not None and not any(_peer_admits(peer, p["metadata"]["namespace"], src) for peer in peers):
                continue
            ports = rule.get("ports")
            if ports is None or any(
                pp.get("protocol", "TCP") == protocol and pp.get("port") in (None, port) for pp in ports
            ):
                return True
    return False


def policies_of(run) -> list[dict]:
    return [{"metadata": r["metadata"], "spec": r["spec"]} for r in run.of_type(NP)]


def by_name(pods: list[dict], name: str) -> dict:
    return next(p for p in pods if p["name"] == name)


# -- 1. gate Job: no API token -------------------------------------------------------------------------------------


def test_gate_job_has_no_api_token(run):
    spec = run.one(JOB)["spec"]["template"]["spec"]
    assert spec.get("automountServiceAccountToken") is False
    sa = spec.get("serviceAccountName")
    if sa:  # a dedicated account must not mount one either
        acct = next(r for r in run.of_type("kubernetes:core/v1:ServiceAccount") if r["metadata"]["name"] == sa)
        assert acct["automountServiceAccountToken"] is False
    # the gate's own container sees no token: only the image audit (init container) mounts its projected one
    tokens = {
        v["name"]
        for v in spec["volumes"]
        if "projected" in v and any("serviceAccountToken" in s for s in v["projected"]["sources"])
    }
    for c in spec["containers"]:
        assert not tokens & {m["name"] for m in c.get("volumeMounts", [])}, c["name"]
    assert [c["name"] for c in spec.get("initContainers", []) if tokens & {m["name"] for m in c["volumeMounts"]}] == [
        "image-audit"
    ]


def test_image_audit_may_read_pods_of_the_ray_namespace_only(run):
    spec = run.one(JOB)["spec"]["template"]["spec"]
    ns = run.one(JOB)["metadata"]["namespace"]
    bindings = [
        b
        for b in run.of_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")
        if any(s["name"] == spec["serviceAccountName"] for s in b["subjects"])
    ]
    assert len(bindings) == 1 and bindings[0]["metadata"]["namespace"] == ns
    role = next(
        r
        for r in run.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
        if r["metadata"]["name"] == bindings[0]["roleRef"]["name"]
    )
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    # the one cluster-wide binding is the node agent's (nodes are cluster-scoped), never the gate's
    assert [b["subjects"] for b in run.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")] == [
        [{"kind": "ServiceAccount", "name": "node-agent", "namespace": "efa-node-agent"}]
    ]
    (init,) = spec["initContainers"]
    assert init["command"][:3] == ["python", "-m", "ray_efa_eks.efacheck.image_fleet"]
    alone = {"securityContext": spec["securityContext"], "containers": [init], "volumes": spec["volumes"]}
    assert violations(alone, "restricted") == []  # non-root, no capabilities, RuntimeDefault


# -- 2. NetworkPolicy over every Ray pod ---------------------------------------------------------------------------


def test_every_pod_we_create_is_selected_by_a_policy(run):
    policies = policies_of(run)
    for pod in pods_we_create(run):
        assert selecting(policies, pod), f"{pod['name']} is selected by no NetworkPolicy"
    for p in policies:
        kubernetes_validate.validate(
            {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", **p}, K8S_VERSION, strict=True
        )
    assert run.one("eks:index:Cluster")["vpcCniOptions"]["enableNetworkPolicy"] is True


RAY_PORTS = [6379, 8265, 10001, 52365, 8080, 10002, 19999, 43211]
"""GCS, dashboard, client, dashboard agent, metrics, worker port range ends, and a random (raylet, object manager,
NCCL bootstrap, TCPStore) port."""


def test_ray_pods_reach_each_other_on_every_port(run):
    policies, pods = policies_of(run), pods_we_create(run)
    ray = [p for p in pods if p["name"] != "gate"]
    assert len(ray) >= 2
    for src in ray:
        for dst in ray:
            for port in RAY_PORTS:
                assert admitted(policies, src, dst, port), (src["name"], dst["name"], port)


def test_gate_reaches_the_jobs_api_only(run):
    policies, pods = policies_of(run), pods_we_create(run)
    gate, head, worker = by_name(pods, "gate"), by_name(pods, "head"), by_name(pods, "worker-gpu")
    assert admitted(policies, gate, head, 8265)
    for port in (6379, 10001, 52365, 8080):
        assert not admitted(policies, gate, head, port), port
    assert not admitted(policies, gate, worker, 52365)
    # nothing may reach the gate's pod
    for src in pods:
        assert not admitted(policies, src, gate, 8265)


def test_prometheus_scrapes_metrics_ports_only(run):
    policies, pods = policies_of(run), pods_we_create(run)
    prom = {"name": "prometheus", "ns": "monitoring", "labels": {"app.kubernetes.io/name": "prometheus"}}
    for dst in (by_name(pods, "head"), by_name(pods, "worker-gpu")):
        for port in METRICS_PORTS.values():
            assert admitted(policies, prom, dst, port), (dst["name"], port)
        for port in (6379, 8265, 10001, 52365):
            assert not admitted(policies, prom, dst, port), (dst["name"], port)


def test_unrelated_pods_are_refused(run):
    policies, pods = policies_of(run), pods_we_create(run)
    strangers = [
        {"name": "same-ns", "ns": pods[0]["ns"], "labels": {"app": "debug"}},
        {"name": "other-ns", "ns": "default", "labels": {}},
        {"name": "ray-lookalike", "ns": "default", "labels": {"ray.io/cluster": "ray"}},
    ]
    for src in strangers:
        for dst in pods:
            for port in RAY_PORTS:
                assert not admitted(policies, src, dst, port), (src["name"], dst["name"], port)


def test_the_evaluator_can_fail(run):
    """With the head-only policy of before, the workers were open to every pod: the tests above would see it."""
    pods = pods_we_create(run)
    old = [p for p in policies_of(run) if p["metadata"]["name"].endswith("head-ingress")]
    old[0]["spec"] = {
        "podSelector": {"matchLabels": {"ray-efa-eks/role": "head"}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {}}]}],
    }
    stranger = {"name": "same-ns", "ns": pods[0]["ns"], "labels": {"app": "debug"}}
    assert admitted(old, stranger, by_name(pods, "worker-gpu"), 52365)
    assert not selecting(old, by_name(pods, "worker-gpu"))


def test_network_policy_escape_hatch():
    run = run_program({"networkPolicy": "false", "efaCheck": "false"})
    assert not run.of_type(NP)


# -- 4. region and IMDS --------------------------------------------------------------------------------------------


def ray_containers(run):
    rc = run.one(RC)["spec"]
    for g in [rc["headGroupSpec"], *rc["workerGroupSpecs"]]:
        yield from g["template"]["spec"]["containers"]


@pytest.mark.parametrize("region", ["us-east-1", "ap-northeast-1"])
def test_ray_pods_know_their_region_and_skip_imds(region):
    run = run_program(region=region)
    for c in ray_containers(run):
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == region, c["name"]
        assert env["AWS_EC2_METADATA_DISABLED"] == "true", c["name"]
        assert not any(k.startswith("AWS_CONTAINER_") for k in env)  # left to the Pod Identity webhook


# -- 8. Pod Security -----------------------------------------------------------------------------------------------


def test_head_and_gate_pass_baseline_and_restricted_but_non_root(run):
    pods = pods_we_create(run)
    for name in ("head", "gate"):
        tmpl = by_name(pods, name)["spec"]
        assert violations(tmpl, "baseline") == [], name
        left = {m.split(":", 1)[0] for m in violations(tmpl, "restricted")}
        assert left == {"restricted Running as Non-root"}, (name, violations(tmpl, "restricted"))


def test_pod_security_check_sees_a_regression(run):
    tmpl = copy.deepcopy(by_name(pods_we_create(run), "head")["spec"])
    tmpl["spec"]["containers"][0]["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}
    assert violations(tmpl, "baseline")
    assert "restricted Capabilities" in json.dumps(violations(tmpl, "restricted"))


# -- 3. the KubeRay operator watches the Ray namespace only ---------------------------------------------------------

KUBERAY_DEFAULTS = Path(__file__).parents[1] / "fixtures" / "charts" / "kuberay-operator-1.7.0" / "values.yaml"
DOCUMENTED_ONLY = {"watchNamespace", "useKubernetesProxy"}
"""Keys the 1.7.0 values.yaml documents in comments only (``# watchNamespace:``) and its templates read."""


def kuberay_rbac(values: dict, release_ns: str) -> dict:
    """What kuberay-operator 1.7.0 renders for RBAC and the watch flag, as its templates decide it (read at tag
    v1.7.0: role.yaml/rolebinding.yaml ``if and .Values.rbacEnable (not .Values.singleNamespaceInstall)``;
    multiple_namespaces_role(binding).yaml ``if and .Values.rbacEnable .Values.singleNamespaceInstall
    .Values.crNamespacedRbacEnable`` over ``default (list .Release.Namespace) .Values.watchNamespace``;
    deployment.yaml ``--watch-namespace``: the release namespace with singleNamespaceInstall and no list, else the
    joined list; leader_election_role.yaml a Role in the release namespace whenever rbacEnable)."""
    rbac, single = values.get("rbacEnable"), values.get("singleNamespaceInstall")
    watched = values.get("watchNamespace") or None
    out = {"ClusterRole": bool(rbac and not single), "Roles": [], "watch": None}
    if rbac and single and values.get("crNamespacedRbacEnable"):
        out["Roles"] = list(watched or [release_ns])
    if single and not watched:
        out["watch"] = release_ns
    elif watched:
        out["watch"] = ",".join(watched)
    return out


def test_kuberay_operator_watches_only_the_ray_namespace(run):
    release = run.one("kubernetes:helm.sh/v3:Release", "kuberay")
    defaults = yaml.safe_load(KUBERAY_DEFAULTS.read_text())
    ours = release["values"]
    for key in ours:  # every key we set is one the chart has
        assert key in defaults or (key in DOCUMENTED_ONLY and f"# {key}:" in KUBERAY_DEFAULTS.read_text()), key
    merged = {**defaults, **ours}
    ray_ns = run.one(RC)["metadata"]["namespace"]
    assert kuberay_rbac(merged, release["namespace"]) == {"ClusterRole": False, "Roles": [ray_ns], "watch": ray_ns}
    # the chart's defaults alone: cluster-wide
    assert kuberay_rbac(defaults, "kuberay-system") == {"ClusterRole": True, "Roles": [], "watch": None}


def test_kuberay_release_waits_for_the_namespace_it_puts_a_role_in(run):
    release = run.one("kubernetes:helm.sh/v3:Release", "kuberay")
    ns = next(r for r in run.of_type("kubernetes:core/v1:Namespace") if r["metadata"]["name"] == "ray")
    assert ns.urn in release.options["dependencies"]
    rc = run.one(RC)
    assert release.urn in rc.options["dependencies"]  # the CRD comes with the operator


def test_watch_values_refuse_an_empty_list():
    from ray_efa_eks.components.ray.kuberay import watch_values

    assert watch_values(None) == {}
    with pytest.raises(ValueError, match="watch_namespaces"):
        watch_values([])
