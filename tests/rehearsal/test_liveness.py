"""Every option the stack renders into the gate's image audit and the node agent's proof is live: changed, the
outcome of a rehearsal scenario changes (a verdict, a taint, a count).

Each container runs as the kubelet runs it (:mod:`tests.helpers.kubelet`) against the rehearsal's API server (the
rendered RBAC and admission policy), with one rendered option changed. The options are read from the rendered
command, so a new option the stack renders fails :func:`test_every_rendered_option_has_a_case` until it has a case
here. The gate check's topology flags (``--expect-nodes``, ``--expect-gpus-per-node``) are changed in the fixed-fleet
scenario of test_deploy_sequence.py (they need Ray); its EFA flags and the worker env the run's fabric capture and
memory check read are not covered by the rehearsal (they decide only on a GPU run).
"""

from __future__ import annotations

import copy
import json
import time

import pytest

pytest.importorskip("celpy")

from tests.helpers.argv import flags, set_flag  # noqa: E402
from tests.helpers.kubelet import Pod  # noqa: E402
from tests.helpers.rehearsal import DIGEST, Deploy, Stack  # noqa: E402

pytestmark = pytest.mark.rehearsal
TAINT = "startup-taint.cluster-autoscaler.kubernetes.io/efa-unproven"


# -- the image audit (the gate pod's sidecar) ---------------------------------------------------------------------


def audit(tmp_path, change=None, seconds: float = 3.0) -> dict:
    """The sidecar, rendered (``change`` applied to its command), run beside a head and two running workers for
    ``seconds``: its last pass, or how it ended."""
    stack = Stack()
    d = Deploy(stack, tmp_path, ray=False)
    try:
        d._put_ray_pod("head", "ray-head", "system-node-0", DIGEST, "ray-head")
        for i in range(2):
            d._put_ray_pod("worker", f"ray-gpu-worker-{i}", f"gpu-node-{i}", DIGEST, "ray-worker")
        spec = copy.deepcopy(stack.job["spec"]["template"]["spec"])
        (sidecar,) = spec["initContainers"]
        if change:
            sidecar["command"] = change(sidecar["command"])
        pod = Pod(
            "Job/efa-check",
            {**spec, "containers": []},
            name="gate-x",
            namespace=d.ns,
            node="system-node-0",
            api=d.api,
            objects=d.objects,
            root=tmp_path / "gate",
        ).start(startup_deadline_s=20)
        time.sleep(seconds)
        running = pod.procs["image-audit"].poll() is None
        pod.stop()
        lines = [ln for ln in pod.log("image-audit").splitlines() if ln.startswith('{"image_fleet"')]
        last = json.loads(lines[-1])["image_fleet"] if lines else {}
        return {
            "verdict": last.get("verdict"),
            "reason": (last.get("failure") or {}).get("reason", ""),
            "passes": len(lines),
            "running": running,
            "phase": pod.phase,
            "file": (pod.volumes["image-fleet"] / "image-fleet.json").exists(),
        }
    finally:
        d.close()


AUDIT_CASES = {
    "--namespace": (lambda a: set_flag(a, "--namespace", "default"), "verdict", "cannot list the Ray pods"),
    "--cluster": (lambda a: set_flag(a, "--cluster", "other"), "verdict", "0 Ray pod(s) running, 3 expected"),
    "--expect-pods": (lambda a: set_flag(a, "--expect-pods", "4"), "verdict", "3 Ray pod(s) running, 4 expected"),
    "--watch": (lambda a: set_flag(a, "--watch", None), "running", None),
    "--poll-s": (lambda a: set_flag(a, "--poll-s", "0.5"), "passes", None),
    "--out": (lambda a: set_flag(a, "--out", "/var/run/ray-efa-eks/elsewhere.json"), "file", None),
    "--token-dir": (lambda a: set_flag(a, "--token-dir", "/var/run/ray-efa-eks"), "verdict", "ServiceAccount token"),
}


def test_the_rendered_audit_passes(tmp_path):
    base = audit(tmp_path)
    assert base["verdict"] == "ok" and base["running"] and base["passes"] == 1 and base["file"], base


@pytest.mark.parametrize("flag", sorted(AUDIT_CASES))
def test_each_audit_option_changes_the_outcome(tmp_path, flag):
    change, what, says = AUDIT_CASES[flag]
    base = {"verdict": "ok", "running": True, "passes": 1, "file": True}
    got = audit(tmp_path, change)
    assert got[what] != base[what], (flag, got)
    if says:
        assert says in got["reason"], got


# -- the node agent's proof ---------------------------------------------------------------------------------------


def node_agent(stack: Stack) -> dict:
    """The node agent's DaemonSet (the one whose pod runs ``fabric-proof``)."""
    (ds,) = [
        d
        for d in stack.daemonsets
        if any(c["name"] == "fabric-proof" for c in d["spec"]["template"]["spec"]["containers"])
    ]
    return ds


def prove(
    tmp_path,
    change=None,
    env=None,
    failed_worker_in: str | None = None,
    interval: str | None = "2",
    seconds: float = 8.0,
) -> dict:
    """A GPU node joins; the node agent's pods run on it (``change`` applied to fabric-proof's command, ``env`` to
    its env); after ``seconds``: is the startup taint gone, and how many proofs ran."""
    stack = Stack()
    stack.daemonsets = copy.deepcopy(stack.daemonsets)
    ds = node_agent(stack)
    proof = next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "fabric-proof")
    if change:
        proof["command"] = change(proof["command"])
    if env:
        proof["env"] = [e for e in proof["env"] if e["name"] not in env] + [
            {"name": k, "value": v} for k, v in env.items()
        ]
    d = Deploy(stack, tmp_path, ray=False, proof_interval_s=interval)
    d.stack.worker_group = lambda: {
        "groupName": "gpu",
        "template": {
            "spec": {
                "tolerations": [{"key": TAINT, "operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists"}],
                "containers": [],
            }
        },
    }  # never place a worker here: the proof alone decides the taint
    try:
        if failed_worker_in:  # a worker on this node whose efa-provider-check failed
            d.api.put_pod(
                {
                    "metadata": {
                        "name": "ray-gpu-worker-bad",
                        "namespace": failed_worker_in,
                        "labels": {"ray.io/node-type": "worker", "ray.io/cluster": "ray"},
                    },
                    "spec": {"nodeName": "gpu-node-0"},
                    "status": {
                        "phase": "Failed",
                        "initContainerStatuses": [
                            {
                                "name": "efa-provider-check",
                                "state": {
                                    "terminated": {"exitCode": 1, "reason": "Error", "message": "fi_info: no efa"}
                                },
                            }
                        ],
                    },
                }
            )
        d.launch()
        d.wait_for(lambda: "gpu-node-0" in d.node_pods, 20, "the node agent started")
        time.sleep(seconds)
        node = d.api.node("gpu-node-0")
        log = "".join(p.log("fabric-proof") for p in d.node_pods["gpu-node-0"])
        reads = sum(1 for u, m, path, _ in d.api.requests if m == "GET" and path == "/api/v1/nodes/gpu-node-0")
        return {
            "tainted": TAINT in [t["key"] for t in node["spec"].get("taints") or []],
            "reads": reads,
            "log": log[-1500:],
        }
    finally:
        d.close()


PROOF_CASES = {
    "--expect-devices": dict(change=lambda a: set_flag(a, "--expect-devices", "g6.12xlarge=2")),
    "--sysfs": dict(change=lambda a: set_flag(a, "--sysfs", "/host/sys/class")),
    "--module-root": dict(change=lambda a: set_flag(a, "--module-root", "/host/sys")),
    "--token-dir": dict(change=lambda a: set_flag(a, "--token-dir", "/tmp")),
    "--workers-namespace": dict(
        failed_worker_in="ray", change=lambda a: set_flag(a, "--workers-namespace", "elsewhere")
    ),
    "--interval": dict(interval=None, change=lambda a: set_flag(a, "--interval", "1")),
    "--skip-provider": dict(change=lambda a: set_flag(a, "--skip-provider", None)),
    "NODE_NAME": dict(env={"NODE_NAME": "gpu-node-9"}),
}
"""Per option, the change; the outcome compared with the rendered option in the same scenario."""


def base_of(case: dict) -> dict:
    return {k: v for k, v in case.items() if k in ("failed_worker_in", "interval")}


@pytest.mark.parametrize("option", sorted(PROOF_CASES))
def test_each_node_agent_option_changes_the_outcome(tmp_path, option):
    case = PROOF_CASES[option]
    base = prove(tmp_path / "rendered", **base_of(case))
    got = prove(tmp_path / "changed", **case)
    if option == "--interval":  # the rendered 60 s reads its node once in the window; 1 s, several times
        assert got["reads"] > base["reads"] + 2, (base, got)
    elif option == "--skip-provider":  # the agent's slim image has no libfabric: the provider finding names the
        # workers' efa-provider-check instead of running fi_info; without the flag the agent runs fi_info itself
        assert "--skip-provider" in base["log"] and "--skip-provider" not in got["log"], (base["log"], got["log"])
    elif option == "--workers-namespace":  # the failed worker in `ray` puts the taint back, naming it; elsewhere
        # it is never seen (and the Role lets the agent list pods in `ray` only: the listing is refused)
        assert "ray/ray-gpu-worker-bad" in base["log"] and "ray/ray-gpu-worker-bad" not in got["log"], (
            base["log"],
            got["log"],
        )
    else:
        assert not base["tainted"] and got["tainted"], (base["log"], got["log"])


def test_every_rendered_option_has_a_case():
    stack = Stack()
    (sidecar,) = stack.job["spec"]["template"]["spec"]["initContainers"]
    assert set(flags(sidecar["command"])) == set(AUDIT_CASES)
    ds = node_agent(stack)
    proof = next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "fabric-proof")
    env = {e["name"] for e in proof.get("env") or [] if not e["name"].startswith("PYTHON")}
    assert set(flags(proof["command"])) | env == set(PROOF_CASES)
