"""Ray's own autoscaler (v2) on one machine, fed the RayCluster the stack renders.

KubeRay's autoscaler sidecar turns the RayCluster into Ray's autoscaling config with
``ray.autoscaler._private.kuberay.autoscaling_config._derive_autoscaling_config_from_ray_cr``; the rehearsal calls
that same function on the mock run's RayCluster, so min/max replicas, the resources per worker, the idle timeout
and the autoscaler's env are the stack's, not numbers retyped here. Only the provider is swapped: KubeRay's (pods)
for :class:`BootingNodeProvider`, Ray's fake multi-node provider (``ray.autoscaler._private.fake_multi_node``,
Ray processes on this machine) with a boot delay, loaded as an ``external`` provider because the 2.58 wheel lacks
the ``example.yaml`` that ``type: fake_multinode`` reads its defaults from (``providers._get_default_config``).
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
from typing import Any

from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_ID, FakeMultiNodeProvider
from ray._private.ray_constants import RESOURCES_ENVIRONMENT_VARIABLE as RESOURCES_ENV
from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

PROVIDER = f"{__name__}.BootingNodeProvider"
"""What ``provider.module`` names; the autoscaler process imports it (PYTHONPATH must reach the repo root)."""
ANSWER = "@rehearsal "
"""Marks :func:`serve`'s answers among what its driver prints."""
OBJECT_STORE = 80 * 1024**2
"""Each fake node's object store (test-only: the autoscaler config's ``object_store_memory`` pseudo-resource,
which the fake provider pops before starting Ray); Ray's default would take 30% of this machine per node."""


def json_numbers(value: Any) -> Any:
    """Numbers as the API server stores them (JSON): the mocks hand integral values over as floats (2.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: json_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_numbers(v) for v in value]
    return value


def plain_env(container: dict) -> dict[str, str]:
    """A container's env with literal values (``valueFrom`` entries need a kubelet; left out)."""
    return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}


def autoscaling_config(
    ray_cr: dict, *, idle_timeout_s: float | None, boot_delay_s: float, gate_dir: str | None = None
) -> dict:
    """Ray's autoscaling config for ``ray_cr`` (the rendered RayCluster: ``metadata`` + ``spec``), as KubeRay's
    sidecar derives it, with the provider swapped for :class:`BootingNodeProvider`.

    ``idle_timeout_s`` replaces the rendered idle timeout (``autoscalerOptions.idleTimeoutSeconds``, 20 min by
    default, and a group's own ``idleTimeoutSeconds`` if it has one: the rehearsal cannot wait that long; None keeps
    what Ray derived); ``boot_delay_s`` is how long a launched "instance" takes before its raylet starts (EC2 launch
    + image pull, minutes on AWS). Each worker type's raylet gets its pod template's env.
    """
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    cr = json_numbers(copy.deepcopy(ray_cr))
    cr["metadata"].setdefault("namespace", "ray")
    config = _derive_autoscaling_config_from_ray_cr(cr)
    if idle_timeout_s is not None:
        config["idle_timeout_minutes"] = idle_timeout_s / 60.0
    groups = {g["groupName"]: g for g in cr["spec"]["workerGroupSpecs"]}
    worker_env = {name: plain_env(g["template"]["spec"]["containers"][0]) for name, g in groups.items()}
    for name, node_type in config["available_node_types"].items():
        if name in groups:
            node_type["resources"]["object_store_memory"] = OBJECT_STORE
            if idle_timeout_s is not None and "idle_timeout_s" in node_type:
                node_type["idle_timeout_s"] = float(idle_timeout_s)
    config["provider"] = {
        "type": "external",
        "module": PROVIDER,
        "head_node_id": FAKE_HEAD_NODE_ID,
        "head_node_type": config["head_node_type"],
        "launch_multiple": True,
        "disable_node_updaters": True,
        "disable_launch_config_check": True,
        "boot_delay_s": boot_delay_s,
        "worker_env": worker_env,
        "gate_dir": gate_dir,
    }
    return config


def head_env(ray_cr: dict) -> dict[str, str]:
    """What the head's processes (GCS, the autoscaler) need: the autoscaler container's rendered env
    (``autoscalerOptions.env``: the reconcile timeouts), autoscaler v2 on, and the fake provider's ids for the head
    (KubeRay sets ``RAY_CLOUD_INSTANCE_ID`` / ``RAY_NODE_TYPE_NAME`` on each Ray pod)."""
    spec = json_numbers(ray_cr["spec"])
    env = plain_env(spec.get("autoscalerOptions") or {})
    env.update(
        {
            "RAY_enable_autoscaler_v2": "1" if (spec.get("autoscalerOptions") or {}).get("version") == "v2" else "0",
            "RAY_FAKE_CLUSTER": "1",
            "RAY_CLOUD_INSTANCE_ID": FAKE_HEAD_NODE_ID,
            "RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID,
            "RAY_NODE_TYPE_NAME": "headgroup",
            "AUTOSCALER_UPDATE_INTERVAL_S": "1",
        }
    )
    return env


class BootingNodeProvider(FakeMultiNodeProvider):
    """The fake provider, with instances that take ``boot_delay_s`` to start Ray, as a cloud node does.

    ``create`` records the instance at once (the cloud answered: the autoscaler sees it ALLOCATED) and starts its
    raylet later, off the autoscaler's thread, with the worker group's env; ``terminate`` of a still-booting
    instance cancels the boot, and of the head does nothing, as with KubeRay. The GCS is the head's
    (``RAY_ADDRESS``, set by ``local_cluster``).
    """

    def __init__(self, provider_config: dict, cluster_name: str):
        provider_config = {
            **provider_config,
            "gcs_address": provider_config.get("gcs_address") or os.environ["RAY_ADDRESS"],
        }
        super().__init__(provider_config, cluster_name)
        self._nodes[self._head_node_id]["tags"][TAG_RAY_USER_NODE_TYPE] = provider_config["head_node_type"]
        self._boot_delay_s = float(provider_config.get("boot_delay_s", 0))
        self._worker_env = provider_config.get("worker_env") or {}
        self._gate_dir = provider_config.get("gate_dir")
        """With it, an instance is a Kubernetes node the rehearsal places a worker pod on: the provider writes
        ``<id>.launched`` (JSON: its type) when it creates one and ``<id>.terminated`` when it ends one, and a launched
        instance's raylet (the worker pod's Ray container) starts only once ``<id>.ready`` exists."""

    def _create_node_with_resources_and_labels(self, node_config, tags, count, resources, labels):
        with self.lock:
            node_id = self._next_hex_node_id()
            self._nodes[node_id] = {"tags": self._tags(node_id, tags), "node": None}
        if self._gate_dir:
            with open(os.path.join(self._gate_dir, f"{node_id}.launched"), "w") as f:
                json.dump({"type": tags[TAG_RAY_USER_NODE_TYPE], "resources": resources}, f)
        threading.Thread(
            target=self._boot,
            args=(node_id, node_config, tags, count, resources, labels),
            daemon=True,
            name=f"boot-{node_id[-5:]}",
        ).start()

    @staticmethod
    def _tags(node_id: str, tags: dict) -> dict:
        from ray.autoscaler.tags import (
            NODE_KIND_WORKER,
            STATUS_UP_TO_DATE,
            TAG_RAY_NODE_KIND,
            TAG_RAY_NODE_NAME,
            TAG_RAY_NODE_STATUS,
        )

        return {
            TAG_RAY_NODE_KIND: NODE_KIND_WORKER,
            TAG_RAY_USER_NODE_TYPE: tags[TAG_RAY_USER_NODE_TYPE],
            TAG_RAY_NODE_NAME: node_id,
            TAG_RAY_NODE_STATUS: STATUS_UP_TO_DATE,
            **tags,
        }

    def _boot(self, node_id, node_config, tags, count, resources, labels) -> None:
        time.sleep(self._boot_delay_s)
        while self._gate_dir and not os.path.exists(os.path.join(self._gate_dir, f"{node_id}.ready")):
            with self.lock:
                if node_id not in self._nodes:
                    return  # terminated before its pod was placed
            time.sleep(0.2)
        env = dict(self._worker_env.get(tags[TAG_RAY_USER_NODE_TYPE], {}))
        resources = dict(resources)
        if "memory" in resources:  # the pod's memory limit: Ray's node reads it from here (RayParams refuses it
            # as a custom resource, and the fake provider passes only CPU/GPU/object store as arguments)
            env[RESOURCES_ENV] = json.dumps({"memory": resources.pop("memory")})
        with self.lock:
            if node_id not in self._nodes:
                return  # terminated while booting
            counter, saved = self._next_node_id, {k: os.environ.get(k) for k in env}
            self._next_node_id = int(node_id[-5:]) - 1  # the parent starts Ray under this instance's id
            os.environ.update(env)  # the raylet and its workers inherit the pod template's env
            try:
                del self._nodes[node_id]
                super()._create_node_with_resources_and_labels(node_config, tags, count, resources, labels)
            finally:
                self._next_node_id = counter
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v

    def terminate_node(self, node_id):
        if node_id == self._head_node_id:
            return  # as KubeRay's provider: "Not possible to delete head node" (v2 cloud_providers/kuberay)
        if self._gate_dir:
            open(os.path.join(self._gate_dir, f"{node_id}.terminated"), "w").close()
        super().terminate_node(node_id)

    def _terminate_node(self, node):
        if node.get("node") is not None:  # None: still booting, the boot thread sees it gone and stops
            super()._terminate_node(node)


def _sample(gcs_address: str) -> dict:
    """The autoscaler's view (``get_cluster_status``: the instances it launched and their state) and the GCS's
    (alive worker nodes), at one moment."""
    import ray
    from ray.autoscaler.v2.sdk import get_cluster_status

    status = get_cluster_status(gcs_address)
    alive = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] != FAKE_HEAD_NODE_ID]

    def nodes(infos, state):  # "instance": the autoscaler's own id while pending, the cloud instance's after
        return [
            {
                "instance": n.instance_id[-5:],
                "type": n.ray_node_type_name,
                "state": state,
                "status": n.node_status,
                "details": n.details,
            }
            for n in infos
        ]

    instances = (
        nodes(status.pending_nodes, "pending") + nodes(status.active_nodes, "active") + nodes(status.idle_nodes, "idle")
    )
    instances = [i for i in instances if i["instance"] != FAKE_HEAD_NODE_ID[-5:]]
    return {
        "instances": sorted(instances, key=lambda i: i["instance"]),
        "dead": sorted(n.instance_id[-5:] for n in status.failed_nodes),
        "launches": sum(r.count for r in status.pending_launches),
        "ray_nodes": sorted(
            n["NodeID"][-5:]
            + ":"
            + ",".join(f"{k}={v:g}" for k, v in sorted(n["Resources"].items()) if k in ("CPU", "GPU"))
            for n in alive
        ),
    }


def serve() -> None:
    """The cluster's process (commands on stdin, answers on stdout, one JSON line each): a 0-CPU head with the
    Jobs API and Ray's autoscaler reading ``$REHEARSAL_CONFIG``; a sampler records every change of the
    autoscaler's and the GCS's view. ``timeline`` prints the changes so far as ``[[t, sample], ...]``,
    ``monitor`` the autoscaler log's last lines. Answers start with :data:`ANSWER`: the driver's stdout also
    carries what the autoscaler tells drivers ("Adding 2 node(s) of type gpu.")."""
    import json
    import sys

    from ray_efa_eks.efacheck.local_cluster import local_cluster

    head = {
        "autoscaling_config": os.environ["REHEARSAL_CONFIG"],
        "env_vars": {
            k: os.environ[k]
            for k in ("RAY_OVERRIDE_NODE_ID_FOR_TESTING", "RAY_CLOUD_INSTANCE_ID", "RAY_NODE_TYPE_NAME")
        },
    }
    for k in head["env_vars"]:  # the head's only: the fake nodes' raylets get their own from the provider
        os.environ.pop(k)
    with local_cluster(worker_nodes=0, dashboard=True, head_args=head) as c:
        timeline: list = []
        t0 = time.monotonic()
        stop = threading.Event()

        def sampler() -> None:
            last = None
            while not stop.is_set():
                try:
                    s = _sample(c.address)
                except Exception as e:  # noqa: BLE001 - a slow GCS answer: record it, sample again
                    s = {"error": f"{type(e).__name__}: {e}"}
                if s != last:
                    timeline.append([round(time.monotonic() - t0, 2), s])
                    last = s
                stop.wait(0.25)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        print(
            ANSWER
            + json.dumps(
                {"url": "http://" + c.webui_url, "gcs": c.address, "session_dir": c.head_node.get_session_dir_path()}
            ),
            flush=True,
        )
        log = os.path.join(c.head_node.get_session_dir_path(), "logs", "monitor.log")
        for line in sys.stdin:
            if line.strip() == "timeline":
                print(ANSWER + json.dumps(timeline), flush=True)
            elif line.strip() == "monitor":  # the autoscaler's own log: its instance transitions, for a failure
                with open(log, errors="replace") as f:
                    lines = [ln.rstrip() for ln in f if ln[:2] == "20" and "legacy field" not in ln]
                print(ANSWER + json.dumps(lines[-60:]), flush=True)
        stop.set()
        th.join(5)
        ours = os.environ["RAY_TMPDIR"]  # local_cluster's private temp root: only this cluster's processes name it
    _kill_leftovers(ours)


def _kill_leftovers(marker: str) -> None:
    """Kill what the autoscaler started and did not stop (a run that failed with nodes up): the fake nodes' Ray
    processes are the monitor's children, which ``Cluster.shutdown`` does not know; each names our temp root."""
    import signal

    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
