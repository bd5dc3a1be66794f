"""The node agent: the EFA exporter DaemonSet, its namespace, node-local Service, and the Pod Security
contract of the whole stack (the agent is the only hostPath user; the Ray namespace enforces baseline)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import kubernetes_validate
import pytest

from ray_efa_eks.components.addons import node_agent
from ray_efa_eks.components.kube import GPU_TOLERATION, ROLE_LABEL
from ray_efa_eks.efacheck import efa_counters, efa_exporter
from ray_efa_eks.tools.mockrun import run_program
from tests.helpers.pod_security import violations
from tests.helpers.sysfs import as_mounted, kernel_sysfs, write_counter

K8S_VERSION = "1.33.0"
IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"


def daemonset(run) -> Any:
    return run.one("kubernetes:apps/v1:DaemonSet", "node-agent")


def template(run) -> dict[str, Any]:
    return daemonset(run)["spec"]["template"]


def container(run, name: str = "efa-exporter") -> dict[str, Any]:
    (c,) = [c for c in template(run)["spec"]["containers"] if c["name"] == name]
    return c


def in_namespace(run, ns: str) -> list[Any]:
    return [
        r
        for r in run.resources
        if r.type.startswith("kubernetes:")
        and isinstance(r.inputs.get("metadata"), dict)
        and r.inputs["metadata"].get("namespace") == ns
    ]


def test_every_object_matches_the_kubernetes_schema(default_run) -> None:
    objs = [
        daemonset(default_run),
        default_run.one("kubernetes:core/v1:Service", "node-agent"),
        default_run.one("kubernetes:core/v1:Namespace", "node-agent"),
        default_run.one("kubernetes:core/v1:ServiceAccount", "node-agent"),
        default_run.one("kubernetes:core/v1:ConfigMap", "node-agent"),
        default_run.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "node-agent-ingress"),
        default_run.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "node-agent-egress"),
        *[
            r
            for r in default_run.resources
            if r.name.startswith("node-agent-")
            and r.type.split(":")[1].split("/")[0] in ("rbac.authorization.k8s.io", "admissionregistration.k8s.io")
        ],
    ]
    assert len(objs) == 15  # with the Role + RoleBinding that read the Ray worker pods (grant_worker_read)
    for r in objs:
        group_version = r.type.split(":")[1].replace("core/", "")
        kind = r.type.rsplit(":", 1)[1]
        body = {k: v for k, v in r.inputs.items() if k not in ("apiVersion", "kind")}
        kubernetes_validate.validate({"apiVersion": group_version, "kind": kind, **body}, K8S_VERSION, strict=True)


def test_its_own_privileged_namespace_and_nothing_else_runs_there(default_run) -> None:
    ns = default_run.one("kubernetes:core/v1:Namespace", "node-agent")
    assert ns["metadata"]["name"] == node_agent.NAMESPACE == "efa-node-agent"
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    there = in_namespace(default_run, node_agent.NAMESPACE)
    assert sorted(r.type.rsplit(":", 1)[1] for r in there) == [
        "ConfigMap",
        "DaemonSet",
        "NetworkPolicy",
        "NetworkPolicy",
        "Service",
        "ServiceAccount",
    ]
    assert all(r.name.startswith("node-agent-") for r in there)


def test_the_pod_asks_for_nothing_but_the_two_read_only_sysfs_trees(default_run) -> None:
    spec = template(default_run)["spec"]
    host = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    assert host == {
        "host-sys-infiniband": {"path": "/sys/class/infiniband", "type": "Directory"},
        "host-sys-devices": {"path": "/sys/devices", "type": "Directory"},
    }
    assert [c["name"] for c in spec["containers"]] == ["efa-exporter", "fabric-proof"]
    for c in spec["containers"]:
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert {n: (mounts[n]["mountPath"], mounts[n].get("readOnly")) for n in host} == {
            "host-sys-infiniband": ("/host/sys/class/infiniband", True),
            "host-sys-devices": ("/host/sys/devices", True),
        }
        assert all(m.get("readOnly") for m in mounts.values() if m["name"] != "tmp")
    c = container(default_run)
    # the only Pod Security control it breaks is the hostPath volume itself
    assert [v for v in violations(template(default_run), "baseline") if "HostPath Volumes" not in v] == []
    assert [
        v
        for v in violations(template(default_run), "restricted")
        if "HostPath Volumes" not in v and "Volume Types" not in v
    ] == []
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] != 0 and sc["readOnlyRootFilesystem"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert spec["automountServiceAccountToken"] is False
    assert default_run.one("kubernetes:core/v1:ServiceAccount", "node-agent")["automountServiceAccountToken"] is False
    assert (
        "python" in c["image"] and "@sha256:" in c["image"]
    )  # its own small image (tests/components/test_image_cache.py)
    assert c["resources"]["requests"] == c["resources"]["limits"]


def test_on_efa_gpu_nodes_only_tolerating_the_gpu_and_startup_taints(default_run, p5_run) -> None:
    for run, itype in ((default_run, "g6.12xlarge"), (p5_run, "p5.48xlarge")):
        spec = template(run)["spec"]
        (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert term["matchExpressions"] == [
            {"key": ROLE_LABEL, "operator": "In", "values": ["gpu"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [itype]},
        ]
        assert GPU_TOLERATION in spec["tolerations"]
        assert {"key": "startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven", "operator": "Exists"} in spec[
            "tolerations"
        ]
        assert len(spec["tolerations"]) == 2  # nothing tolerated wholesale


def test_a_node_local_service_and_the_ray_workers_url(default_run) -> None:
    svc = default_run.one("kubernetes:core/v1:Service", "node-agent")
    assert svc["spec"]["internalTrafficPolicy"] == "Local"
    assert svc["spec"]["selector"] == template(default_run)["metadata"]["labels"]
    (port,) = svc["spec"]["ports"]
    c = container(default_run)
    assert port["port"] == c["ports"][0]["containerPort"] == node_agent.EXPORTER_PORT == efa_exporter.DEFAULT_PORT
    assert port["targetPort"] == c["ports"][0]["name"]
    url = (
        f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.cluster.local:{int(port['port'])}/metrics"
    )
    workers = default_run.one("kubernetes:ray.io/v1:RayCluster")["spec"]["workerGroupSpecs"][0]
    env = {e["name"]: e for e in workers["template"]["spec"]["containers"][0]["env"]}
    assert env[efa_counters.EXPORTER_ENV]["value"] == url
    # only the Ray namespace and the metrics scraper's may read it
    pol = default_run.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "node-agent-ingress")["spec"]
    assert pol["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}} for ns in ("monitoring", "ray")
    ]


def test_the_gate_waits_for_the_agent_and_the_agent_for_the_gpu_nodes(default_run) -> None:
    ds = daemonset(default_run)
    job = default_run.one("kubernetes:batch/v1:Job")
    assert ds.urn in job.options["dependencies"]
    gpu = default_run.one("eks:index:ManagedNodeGroup", "gpu")
    assert gpu.urn in ds.options["dependencies"]


def _walk(obj: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{path}.{k}", v
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"gpuInstanceType": "p5.48xlarge"},
        {"checkpointBucket": "false"},
        {"rayTokenAuth": "false", "networkPolicy": "false"},
    ],
)
def test_the_agent_is_the_only_host_path_user_of_every_rendered_object(config) -> None:
    run = run_program(config)
    users = {
        r.name
        for r in run.resources
        for key, _ in _walk(r.inputs)
        if key.endswith((".hostPath", ".hostNetwork", ".hostPID", ".hostIPC", ".privileged"))
        and not key.endswith("securityContext.privileged")
    }
    assert users == {"node-agent-daemonset"}
    privileged = {
        r.name for r in run.resources for key, v in _walk(r.inputs) if key.endswith("securityContext.privileged") and v
    }
    assert privileged == set()


def _ray_pods(run) -> Iterator[tuple[str, dict[str, Any]]]:
    rc = run.one("kubernetes:ray.io/v1:RayCluster")
    yield "head", rc["spec"]["headGroupSpec"]["template"]
    for g in rc["spec"]["workerGroupSpecs"]:
        yield g["groupName"], g["template"]
    for job in run.of_type("kubernetes:batch/v1:Job"):
        yield job.name, job["spec"]["template"]


@pytest.mark.parametrize("run_name", ["default_run", "p5_run"])
def test_the_ray_namespace_enforces_baseline_and_every_pod_passes_it(request, run_name) -> None:
    run = request.getfixturevalue(run_name)
    (ns,) = [r for r in run.of_type("kubernetes:core/v1:Namespace") if r.name == "ray-ns"]
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"
    pods = dict(_ray_pods(run))
    assert {"head", "gpu"} <= set(pods) and any(n.startswith("efa-check") for n in pods)
    for name, t in pods.items():
        assert violations(t, "baseline") == [], name
    # every kind of pod object the stack creates in the Ray namespace is one of those above
    kinds = {r.type for r in in_namespace(run, "ray")}
    assert not kinds & {
        "kubernetes:core/v1:Pod",
        "kubernetes:apps/v1:Deployment",
        "kubernetes:apps/v1:DaemonSet",
        "kubernetes:apps/v1:StatefulSet",
    }


def test_the_old_worker_pods_hostpath_would_be_refused_by_baseline() -> None:
    """The checker can fail: a worker template with the host's /sys mounted breaks baseline."""
    vols, mounts = node_agent.host_sysfs_volumes()
    old = {"spec": {"containers": [{"name": "ray-worker", "image": IMAGE, "volumeMounts": mounts}], "volumes": vols}}
    assert any("HostPath Volumes" in v for v in violations(old, "baseline"))


def test_the_configmap_alone_runs_the_exporter_as_the_daemonset_does(default_run, tmp_path: Path) -> None:
    """The DaemonSet's own command, ConfigMap files and volumes, applied to a kernel-shaped host tree under a
    fake pod root: it serves the host's counters and follows them."""
    spec = template(default_run)["spec"]
    cm = default_run.one("kubernetes:core/v1:ConfigMap", "node-agent")
    c = container(default_run)
    pod = tmp_path / "pod"
    host = tmp_path / "host"
    kernel_sysfs(host / "sys", counters={"rdmap0s30": {"tx_bytes": 41, "rx_bytes": 42}})
    as_mounted(host, pod, spec["volumes"], c["volumeMounts"])
    for v in spec["volumes"]:
        if "configMap" in v:
            (m,) = [m for m in c["volumeMounts"] if m["name"] == v["name"]]
            for item in v["configMap"]["items"]:
                dst = pod / m["mountPath"].lstrip("/") / item["path"]
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text(cm["data"][item["key"]])
    assert sorted(p.name for p in (pod / "opt/ray-efa-eks/ray_efa_eks/efacheck").iterdir()) == sorted(
        node_agent.SHIPPED
    )
    port = efa_exporter_free_port()
    cmd = [sys.executable if a == "python" else a for a in c["command"]]
    cmd = [str(pod) + a if a.startswith(("/host/", "/sys/")) else a for a in cmd]
    cmd[cmd.index("--port") + 1] = str(port)
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    env = {**env, "PYTHONPATH": str(pod) + env["PYTHONPATH"], "NODE_NAME": "node-a", "PATH": os.environ["PATH"]}
    proc = subprocess.Popen(
        [*cmd, "--host", "127.0.0.1"],
        cwd=str(pod) + c["workingDir"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 60
        while True:
            try:
                text = urllib.request.urlopen(url, timeout=2).read().decode()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
                time.sleep(0.1)
        assert 'efa_tx_bytes_total{node="node-a",device="rdmap0s30",port="1"} 41' in text
        assert 'efa_info{node="node-a",driver_version="unknown"} 1' in text  # no /sys/module/efa in the fake pod
        write_counter(pod / "host" / "sys", "rdmap0s30", "tx_bytes", 43)
        snap, why = efa_counters.read_exporter(url, "node-a")
        assert why is None and snap["rdmap0s30"]["tx_bytes"] == 43
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def efa_exporter_free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_instance_types_is_refused_before_anything() -> None:
    with pytest.raises(ValueError, match="instance_types is empty"):
        node_agent.pod_spec(node_agent.NodeAgentArgs(provider=None, image=IMAGE, instance_types=[]), "cm", {})


def test_the_ray_workers_and_the_metrics_scraper_reach_the_exporter_and_no_one_else(default_run) -> None:
    """Judged by the NetworkPolicy evaluator (tests/components/test_least_privilege.py) over every policy the stack renders."""
    from tests.components.test_least_privilege import admitted, pods_we_create, policies_of

    policies = policies_of(default_run)
    exporter = {"ns": node_agent.NAMESPACE, "labels": template(default_run)["metadata"]["labels"]}
    worker = next(p for p in pods_we_create(default_run) if p["name"] == "worker-gpu")
    assert admitted(policies, worker, exporter, node_agent.EXPORTER_PORT)
    assert admitted(policies, {"ns": "monitoring", "labels": {"app": "prometheus"}}, exporter, node_agent.EXPORTER_PORT)
    assert not admitted(policies, {"ns": "default", "labels": {}}, exporter, node_agent.EXPORTER_PORT)
    assert not admitted(policies, worker, exporter, 22)
