"""The whole stack's deploy sequence, rehearsed on one machine from the objects a stack renders.

Pieces: the mock run ``plan`` uses (:func:`tests.helpers.mockruns.shared_run`); a Kubernetes API
(:mod:`tests.helpers.kubeapi`: the rendered RBAC and admission policy); pods run as processes
(:mod:`tests.helpers.kubelet`); and Ray (head + Ray's autoscaler, fed the rendered RayCluster as KubeRay's sidecar
derives it, :mod:`tests.helpers.autoscaling`). :class:`Deploy` plays the parts no container of the stack plays:

- KubeRay: the head pod exists (Running, with the image digest the kubelet would report) as soon as Ray's head is
  up; a worker pod per instance the autoscaler launches;
- the node autoscaler (Cluster Autoscaler) and EKS: an instance the autoscaler launches is a node of the GPU node
  group, with the group's labels and taints (the startup taint included) and the kubelet's own labels;
- the DaemonSet controller: each DaemonSet whose template selects and tolerates the node gets a pod there, run
  with the rendered containers (the node agent proves the node on a fake sysfs, :mod:`tests.helpers.sysfs`);
- the scheduler, for the worker pod only: placed when the node carries no taint the template does not tolerate
  (the startup taint goes only when the node agent removes it); then its init containers run (``fi_info`` is a
  stand-in that answers from the node's fake sysfs) and, once they pass, its Ray container starts (the
  autoscaler's instance starts its raylet with the group's rendered env);
- an instance the autoscaler ends takes its pods and node with it.

Scaled down, and said where: the idle timeout, the boot of an instance (``BOOT_S``), the image audit's and the
gate's waits (the rehearsal rewrites ``--wait-s``), the node agent's proof interval.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from tests.helpers import sysfs as fake_sysfs
from tests.helpers.autoscaling import ANSWER, autoscaling_config, head_env, json_numbers, plain_env
from tests.helpers.kubeapi import KubeApi
from tests.helpers.kubelet import Objects, Pod
from tests.helpers.mockruns import shared_run

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "d" * 64
"""The digest every Ray pod's kubelet reports (``status.containerStatuses[].imageID``), unless a scenario says."""
TOKEN = "rehearsal-ray-auth-token"
"""The Ray auth token: the mocks leave the RandomPassword behind the Secret unresolved."""
BOOT_S = 2.0
IDLE_S = 8.0
TAINT_EFFECT = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


class Stack:
    """The rendered objects of one config (one shared mock run)."""

    def __init__(self, config: dict[str, Any] | None = None):
        self.config = config or {}
        self.run = shared_run(config)
        self.objects = [
            json_numbers(r.inputs)
            for r in self.run.resources
            if r.type.startswith("kubernetes:") and isinstance(r.inputs.get("kind"), str)
        ]
        rc = self.run.one("kubernetes:ray.io/v1:RayCluster").inputs
        self.ray_cluster = {"metadata": json_numbers(dict(rc["metadata"])), "spec": json_numbers(rc["spec"])}
        self.job = json_numbers(self.run.one("kubernetes:batch/v1:Job").inputs)
        self.daemonsets = [o for o in self.objects if o["kind"] == "DaemonSet"]
        self.node_groups = {
            r.name: json_numbers(r.inputs) for r in self.run.resources if r.type == "eks:index:ManagedNodeGroup"
        }

    def gpu_group(self) -> dict[str, Any]:
        return next(g for g in self.node_groups.values() if (g.get("labels") or {}).get("ray-efa-eks/role") == "gpu")

    def worker_group(self) -> dict[str, Any]:
        return self.ray_cluster["spec"]["workerGroupSpecs"][0]


def matches(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """nodeSelector and required node affinity (``In``/``Exists`` terms) against the node's labels."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms")
    if not terms:
        return True
    for term in terms:
        ok = True
        for e in term.get("matchExpressions") or []:
            if e["operator"] == "In":
                ok &= labels.get(e["key"]) in e["values"]
            elif e["operator"] == "Exists":
                ok &= e["key"] in labels
            elif e["operator"] == "NotIn":
                ok &= labels.get(e["key"]) not in e["values"]
        if ok:
            return True
    return False


def untolerated(spec: dict[str, Any], node: dict[str, Any]) -> list[str]:
    """The node's NoSchedule/NoExecute taints the pod does not tolerate (scheduler's TaintToleration)."""
    out = []
    for t in (node.get("spec") or {}).get("taints") or []:
        if t.get("effect") == "PreferNoSchedule":
            continue
        if not any(
            (tol.get("key") in (None, t["key"]))
            and (tol.get("operator") == "Exists" or tol.get("value") == t.get("value"))
            and tol.get("effect") in (None, "", t.get("effect"))
            for tol in spec.get("tolerations") or []
        ):
            out.append(t["key"])
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayHead:
    """Ray's head and autoscaler, in a child process (:func:`tests.helpers.autoscaling.serve`)."""

    def __init__(self, stack: Stack, tmp: Path, gate_dir: Path, token: str | None):
        tmp.mkdir(parents=True, exist_ok=True)
        cfg = tmp / "autoscaling.json"
        cfg.write_text(
            json.dumps(
                autoscaling_config(
                    stack.ray_cluster, idle_timeout_s=IDLE_S, boot_delay_s=BOOT_S, gate_dir=str(gate_dir)
                )
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
        env.update(
            head_env(stack.ray_cluster),
            REHEARSAL_CONFIG=str(cfg),
            PYTHONPATH=str(REPO),
            RAY_USAGE_STATS_ENABLED="0",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        )
        head = stack.ray_cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        env.update(plain_env(head))  # the head pod's rendered env (RAY_EFA_EKS_IMAGE/SPEC_HASH: the gate's stale test)
        if token:  # the head pod's env (RAY_AUTH_MODE=token, the Secret's token): every Ray process inherits it
            env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
        self.events: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.helpers.autoscaling import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        info = self.answer()
        self.url, self.gcs = info["url"], info["gcs"]

    def answer(self) -> Any:
        for line in self.proc.stdout:
            if line.startswith(ANSWER):
                return json.loads(line[len(ANSWER) :])
            self.events.append(line.rstrip())
        raise AssertionError(f"the rehearsal's Ray head exited ({self.proc.wait()}): {self.events[-20:]}")

    def ask(self, what: str) -> Any:
        self.proc.stdin.write(what + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Deploy:
    """One stack deployed here: the API, the Ray head, and the controllers' loop (see the module docstring)."""

    def __init__(
        self,
        stack: Stack,
        tmp: Path,
        *,
        failing: set[int] | None = None,
        digests: dict[int, str] | None = None,
        ray: bool = True,
        proof_interval_s: str | None = "2",
    ):
        self.stack, self.tmp = stack, tmp
        self.gate_dir = tmp / "instances"
        """Where the current head's provider writes its instances (one folder per head: ids restart at 1)."""
        self.api = KubeApi(stack.objects, tmp / "api")
        self.ns = stack.ray_cluster["metadata"].get("namespace") or "ray"
        self.cluster = stack.ray_cluster["metadata"]["name"]
        self.objects = Objects.of(stack.objects, {"auth_token": TOKEN})
        self.failing = set(failing or ())
        """GPU nodes (by launch index) whose sysfs has no EFA device: their proof fails."""
        self.digests = digests or {}
        """Per GPU node index: the digest its worker pod's kubelet reports (default :data:`DIGEST`)."""
        self.log: list[tuple[float, str]] = []
        self.t0 = time.monotonic()
        self.node_pods: dict[str, list[Pod]] = {}
        self.workers: dict[str, str] = {}
        """instance id -> node name, for every instance launched."""
        self.placed: list[str] = []
        self.stop = threading.Event()
        self.terminated: list[str] = []
        self.proof_interval_s = proof_interval_s
        """The node agent's proof interval here (None: the rendered one)."""
        self.api.put_node(
            self._node(
                "system-node-0",
                next(g for g in stack.node_groups.values() if g["labels"].get("ray-efa-eks/role") == "system"),
            )
        )
        self.head: RayHead | None = None
        if ray:
            self._start_head(stack)
        else:
            self.gate_dir.mkdir(parents=True)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _start_head(self, stack: Stack) -> None:
        """KubeRay's head pod (Ray's head and the autoscaler sidecar KubeRay adds), from ``stack``'s RayCluster."""
        head = stack.ray_cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        token = TOKEN if any(e.get("name") == "RAY_AUTH_MODE" for e in head.get("env") or []) else None
        n = len(list(self.tmp.glob("head*")))
        self.gate_dir = self.tmp / f"instances{n}"
        self.gate_dir.mkdir(parents=True)
        self.head = RayHead(stack, self.tmp / f"head{n}", self.gate_dir, token)
        from tests.helpers.kubelet import EXECUTED

        for c in ("ray-head", "autoscaler"):
            EXECUTED.append(
                {
                    "template": f"RayCluster/{self.cluster}/head",
                    "container": c,
                    "init": False,
                    "exit": None,
                    "argv": ["ray start --head", "(local_cluster, the autoscaler's monitor)"],
                    "env": {},
                }
            )
        self._put_ray_pod("head", f"{self.cluster}-head", "system-node-0", DIGEST, "ray-head")
        self.event("ray head up (head pod Running)")

    def recreate(self, stack: Stack) -> None:
        """A second ``up`` whose RayCluster spec changed: KubeRay (upgradeStrategy Recreate) deletes every Ray pod
        and creates them from the new spec: a new head here, the workers again only when asked for."""
        with self.api.lock:
            for key in [k for k, p in self.api.pods.items() if "ray.io/cluster" in p["metadata"]["labels"]]:
                self.api.pods.pop(key)
        self.head.close()
        self.stack = stack
        self.event("RayCluster spec changed: every Ray pod deleted, recreated from the new spec")
        self._start_head(stack)

    def launch(self, group: str = "gpu") -> str:
        """An instance launched without Ray (the node-level shapes): what the autoscaler's provider writes."""
        iid = f"manual{len(list(self.gate_dir.glob('*.launched'))):05d}"
        (self.gate_dir / f"{iid}.launched").write_text(json.dumps({"type": group}))
        return iid

    def event(self, what: str) -> None:
        self.log.append((round(time.monotonic() - self.t0, 1), what))

    def steps(self) -> list[str]:
        return [w for _, w in self.log]

    # -- the cluster's objects ------------------------------------------------------------------------------------
    def _node(self, name: str, group: dict[str, Any]) -> dict[str, Any]:
        itype = (group.get("labels") or {}).get("ray-efa-eks/instance-type") or group["instanceTypes"][0]
        labels = {
            **(group.get("labels") or {}),
            "node.kubernetes.io/instance-type": itype,
            "kubernetes.io/hostname": name,
        }
        taints = [
            {"key": t["key"], "value": t.get("value"), "effect": TAINT_EFFECT[t["effect"]]}
            for t in group.get("taints") or []
        ]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": taints} if taints else {},
            "status": {"conditions": []},
        }

    def _put_ray_pod(self, kind: str, name: str, node: str, digest: str, container: str) -> None:
        image = self.stack.job["spec"]["template"]["spec"]["containers"][0]["image"]
        self.api.put_pod(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": self.ns,
                    "labels": {"ray.io/cluster": self.cluster, "ray.io/node-type": kind},
                },
                "spec": {"nodeName": node},
                "status": {
                    "phase": "Running",
                    "containerStatuses": [
                        {"name": container, "image": image, "imageID": f"{image.split(':')[0]}@{digest}", "ready": True}
                    ],
                },
            }
        )

    # -- the controllers' loop ------------------------------------------------------------------------------------
    def _loop(self) -> None:
        pending: dict[str, float] = {}
        while not self.stop.is_set():
            for f in sorted(self.gate_dir.iterdir()) if self.gate_dir.exists() else []:
                raw, _, what = f.name.partition(".")
                iid = f"{self.gate_dir.name}/{raw}"  # ids restart with each head
                if what == "launched" and iid not in self.workers:
                    self._launch(iid)
                    pending[iid] = time.monotonic()
                elif what == "terminated" and iid in self.workers and not (self.tmp / f"{iid}.gone").exists():
                    self._terminate(iid)
                    pending.pop(iid, None)
            for iid in list(pending):
                if self._try_place(iid):
                    pending.pop(iid)
            self.stop.wait(0.3)

    def _launch(self, iid: str) -> None:
        index = len(self.workers)
        name = f"gpu-node-{index}"
        self.workers[iid] = name
        self.event(
            f"instance {iid[-5:]} launched: node {name} joins with taints "
            + ",".join(
                t["key"].split("/")[-1] for t in self._node(name, self.stack.gpu_group())["spec"].get("taints", [])
            )
        )
        node = self._node(name, self.stack.gpu_group())
        root = self.tmp / "nodes" / name
        itype = node["metadata"]["labels"]["node.kubernetes.io/instance-type"]
        devices = () if index in self.failing else self._devices(itype)
        # the device plugins (NVIDIA's, the EFA one: chart pods, not run here) advertise what the node has
        from ray_efa_eks.components.nodes.instances import CATALOGUE

        node["status"]["allocatable"] = {
            "nvidia.com/gpu": str(CATALOGUE[itype].gpus),
            **({"vpc.amazonaws.com/efa": str(len(devices))} if devices else {}),
        }
        self.api.put_node(node)
        sysfs = fake_sysfs.kernel_sysfs(root / "sys", devices=devices)
        (root / "bin").mkdir(parents=True)
        fi = root / "bin" / "fi_info"  # libfabric as the image has it: `-l` lists the registered providers (efa among
        # them, device or not); `-p efa` opens the provider on a device: only where the node has an EFA device
        fi.write_text(
            "#!/bin/sh\nif [ \"$1\" = -l ]; then\n"
            "  printf 'efa:\\n\\tversion: 122.0\\ntcp:\\n\\tversion: 122.0\\n'; exit 0\nfi\n"
            + (
                "echo 'provider: efa'; echo '    fabric: efa'; exit 0\n"
                if devices
                else "echo 'fi_getinfo: -61 (No data available)' >&2; exit 61\n"
            )
        )
        fi.chmod(0o755)
        pods = []
        for ds in self.stack.daemonsets:
            spec = ds["spec"]["template"]["spec"]
            if not matches(spec, node) or untolerated(spec, node):
                continue
            ds_ns = ds["metadata"].get("namespace", "default")
            pod = Pod(
                f"DaemonSet/{ds['metadata']['name']}",
                spec,
                name=f"{ds['metadata']['name']}-{name}",
                namespace=ds_ns,
                node=name,
                api=self.api,
                objects=self.objects,
                root=root / "pods" / ds_ns,
                host_paths={
                    "/sys/class/infiniband": str(sysfs / "class" / "infiniband"),
                    "/sys/devices": str(sysfs / "devices"),
                },
                aliases={"/sys/module": str(sysfs / "module")},
                rewrite=self._rewrite_node_agent,
                env={"PATH_PREFIX": str(root / "bin")},
            )
            pods.append(pod.start())
            self.event(f"DaemonSet {ds['metadata']['name']} pod started on {name}")
        self.node_pods[name] = pods

    @staticmethod
    def _devices(itype: str) -> tuple:
        from ray_efa_eks.components.nodes.instances import CATALOGUE

        n = CATALOGUE[itype].max_efa_interfaces or 0
        return tuple(fake_sysfs.efa_device(0x10 + i, 0) for i in range(n))

    def _rewrite_node_agent(self, container: str, argv: list[str]) -> list[str]:
        """Each exporter its own port (a pod's network namespace lets every node's exporter bind 9810); the proof
        every :attr:`proof_interval_s` instead of the rendered interval."""
        out = list(argv)
        for flag, value in (("--port", str(free_port())), ("--interval", self.proof_interval_s)):
            if flag in out and value is not None:
                out[out.index(flag) + 1] = value
        return out

    def _try_place(self, iid: str) -> bool:
        name = self.workers[iid]
        node = self.api.node(name)
        spec = self.stack.worker_group()["template"]["spec"]
        if untolerated(spec, node):
            return False
        index = int(name.rsplit("-", 1)[1])
        pod = Pod(
            f"RayCluster/{self.cluster}/{self.stack.worker_group()['groupName']}",
            {**spec, "containers": []},
            name=f"{self.cluster}-gpu-worker-{iid[-5:]}",
            namespace=self.ns,
            node=name,
            api=self.api,
            objects=self.objects,
            root=self.tmp / "nodes" / name / "worker",
            env={"PATH_PREFIX": str(self.tmp / "nodes" / name / "bin")},
        )
        startup = any("startup-taint" in t["key"] for t in self.stack.gpu_group().get("taints") or [])
        self.event(
            f"node {name}: "
            + (
                "startup taint gone (the node agent's proof removed it)"
                if startup
                else "no startup taint on this shape (no node agent)"
            )
            + "; worker pod placed there"
        )
        pod.start()
        if pod.phase == "Failed":
            self.event(f"worker pod on {name}: init container failed: {pod.describe()[-300:]}")
            return True
        self._put_ray_pod("worker", pod.name, name, self.digests.get(index, DIGEST), "ray-worker")
        from tests.helpers.kubelet import EXECUTED

        EXECUTED.append(
            {
                "template": pod.template_id,
                "container": "ray-worker",
                "init": False,
                "exit": None,
                "argv": ["ray", "start", "(the autoscaler's instance: the group's rendered env)"],
                "env": {},
            }
        )
        (self.tmp / f"{iid}.ready").touch()
        self.placed.append(name)
        self.event(f"worker pod {pod.name} Running on {name}: Ray container starts")
        return True

    def _terminate(self, iid: str) -> None:
        (self.tmp / f"{iid}.gone").touch()
        name = self.workers[iid]
        for ns, pname in list(self.api.pods):
            if self.api.pods[(ns, pname)]["spec"].get("nodeName") == name:
                self.api.delete_pod(ns, pname)
        for pod in self.node_pods.pop(name, []):
            pod.stop()
        with self.api.lock:
            self.api.nodes.pop(name, None)
        self.terminated.append(name)  # last: a reader that sees it finds the node and its pods gone
        self.event(f"instance {iid[-5:]} terminated: node {name} and its pods gone")

    # -- the gate Job ---------------------------------------------------------------------------------------------
    def gate_pod(self, wait_s: float, topology_wait_s: float, edit: Callable[[str], str] | None = None) -> Pod:
        """The gate Job's pod on the system node, its waits shortened (the audit's ``--wait-s``, the check's)."""
        spec = self.stack.job["spec"]["template"]["spec"]
        aliases = {"http://" + a: self.head.url for a in self._dashboard_addresses()}

        def rewrite(container: str, argv: list[str]) -> list[str]:
            out = list(argv)
            if "--wait-s" in out and container != "efa-check":
                out[out.index("--wait-s") + 1] = str(wait_s)
            if container == "efa-check":
                out[-1] = out[-1].replace(f"--wait-s {self._topology_wait()}", f"--wait-s {topology_wait_s:g}")
                if edit:  # the liveness cases: one rendered option of the check changed
                    out[-1] = edit(out[-1])
            return out

        return Pod(
            "Job/efa-check",
            spec,
            name=self.stack.job["metadata"]["name"] + "-x",
            namespace=self.ns,
            node="system-node-0",
            api=self.api,
            objects=self.objects,
            root=self.tmp / "gate" / str(len(list((self.tmp).glob("gate*")))),
            aliases=aliases,
            rewrite=rewrite,
        )

    def _topology_wait(self) -> str:
        import re

        script = self.stack.job["spec"]["template"]["spec"]["containers"][0]["command"][2]
        return re.search(r"--wait-s (\d+)", script).group(1)

    def _dashboard_addresses(self) -> list[str]:
        import re

        script = self.stack.job["spec"]["template"]["spec"]["containers"][0]["command"][2]
        return re.findall(r"addr=http://(\S+)", script)

    def timeline(self) -> list:
        return self.head.ask("timeline")

    def wait_for(self, what, timeout: float, why: str) -> None:
        end = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < end, f"{why} within {timeout} s; steps: {self.steps()}"
            time.sleep(0.5)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        for pods in self.node_pods.values():
            for p in pods:
                p.stop()
        if self.head:
            self.head.close()
        self.api.close()


def rendered_containers(stack: Stack) -> dict[tuple[str, str], bool]:
    """Every container the stack renders, ``(template, container) -> is an init container``, named as the
    rehearsal records what it ran: ``Job/<name without its hash>``, ``DaemonSet/<name>``,
    ``RayCluster/<name>/head`` (with the ``autoscaler`` container KubeRay adds when in-tree autoscaling is on) and
    ``RayCluster/<name>/<group>``. Charts' workloads (Helm releases) are not rendered by the stack and not listed."""
    out: dict[tuple[str, str], bool] = {}

    def add(tid: str, spec: dict[str, Any]) -> None:
        for c in spec.get("initContainers") or []:
            out[(tid, c["name"])] = True
        for c in spec.get("containers") or []:
            out[(tid, c["name"])] = False

    for o in stack.objects:
        spec = ((o.get("spec") or {}).get("template") or {}).get("spec")
        if o["kind"] == "Job" and spec:
            add(f"Job/{o['metadata']['name'].rsplit('-', 1)[0]}", spec)
        elif o["kind"] in ("DaemonSet", "Deployment", "StatefulSet") and spec:
            add(f"{o['kind']}/{o['metadata']['name']}", spec)
    rc = stack.ray_cluster
    name = rc["metadata"]["name"]
    add(f"RayCluster/{name}/head", rc["spec"]["headGroupSpec"]["template"]["spec"])
    if rc["spec"].get("enableInTreeAutoscaling"):
        out[(f"RayCluster/{name}/head", "autoscaler")] = False
    for g in rc["spec"]["workerGroupSpecs"]:
        add(f"RayCluster/{name}/{g['groupName']}", g["template"]["spec"])
    return out
