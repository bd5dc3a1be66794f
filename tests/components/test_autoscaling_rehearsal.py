"""CPU rehearsal of GPU capacity that follows the jobs: Ray's own autoscaler (v2) scales the GPU worker
group as the stack renders it, on one machine.

The autoscaling config is what KubeRay's autoscaler sidecar derives from the mock run's RayCluster (Ray's own
``_derive_autoscaling_config_from_ray_cr``): min/max replicas, the resources per worker (44 CPU, 4 GPU, 172 GiB on
g6.12xlarge), the worker pods' env and the autoscaler container's env (the reconcile timeouts) are the stack's.
Two things are scaled down and say so: the idle timeout (rendered 1200 s; ``IDLE_S`` here) and an instance's boot
(EC2 launch + image pull, minutes; ``BOOT_S`` here). Nodes are Ray processes on this machine (Ray's fake multi-node
provider, :mod:`tests.helpers.autoscaling`); GPUs are logical.

One cluster, one sequence: a user's job through the Jobs API on an empty cluster needs ``gpuNodeCount`` GPU-shaped
nodes (a STRICT_SPREAD placement group, as Ray Train spreads ranks); while the autoscaler's instances are still
booting, the gate's own node wait (``efacheck.topology``: ``request_resources`` for ``gpuNodeCount`` bundles, then
withdrawn) is submitted too. Both wait, both succeed; the nodes go after the idle timeout. Every assertion reads
what the autoscaler and the GCS reported over time (the sampled timeline), not what the jobs assumed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray.job_submission")
pytest.importorskip("aiohttp")  # ray[default]: dashboard + Jobs API

from ray_efa_eks.tools.mockrun import run_program  # noqa: E402
from tests.helpers.autoscaling import ANSWER, autoscaling_config, head_env, plain_env  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
IDLE_S = 6.0
"""The rehearsal's idle timeout (the stack renders ``gpuIdleTimeoutSeconds``, 1200 s by default)."""
BOOT_S = 6.0
"""How long a launched instance takes to start Ray here (EC2 launch + a tens-of-GB image pull on AWS)."""

USER_JOB = """
import json, os, sys, time
import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
nodes, gpus = int(sys.argv[1]), float(sys.argv[2])
ray.init()
t = time.monotonic()
pg = placement_group([{"CPU": 1, "GPU": gpus}] * nodes, strategy="STRICT_SPREAD")
ray.get(pg.ready())
print(f"placement group ready after {time.monotonic() - t:.1f} s", flush=True)

@ray.remote(num_gpus=gpus, num_cpus=1)
def rank():
    return {"node": ray.get_runtime_context().get_node_id()[-5:],
            "env": {k: os.environ.get(k) for k in ("NCCL_SOCKET_IFNAME", "FI_PROVIDER", "RAY_EFA_EKS_SPEC_HASH")}}

out = ray.get([rank.options(scheduling_strategy=PlacementGroupSchedulingStrategy(pg, i)).remote()
               for i in range(nodes)])
print("RANKS " + json.dumps(out), flush=True)
"""

GATE_WAIT = """
import json, sys
import ray
from ray_efa_eks.efacheck.topology import ask_autoscaler, wait_topology
ray.init()
backend, nodes = wait_topology(int(sys.argv[1]), int(sys.argv[2]), 120, ask=ask_autoscaler)
print("TOPOLOGY " + json.dumps({"backend": backend, "nodes": len(nodes)}), flush=True)
"""


def rendered() -> tuple[dict, tuple[int, int]]:
    """The default stack's RayCluster, and the nodes x GPUs its deploy gate asks Ray for (the Job's own command)."""
    run = run_program()
    rc = run.one("kubernetes:ray.io/v1:RayCluster")
    script = run.one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]["containers"][0]["command"][2]
    nodes, gpus = (
        int(re.search(rf"--{flag} (\d+)", script).group(1)) for flag in ("expect-nodes", "expect-gpus-per-node")
    )
    return {"metadata": dict(rc["metadata"]), "spec": rc["spec"]}, (nodes, gpus)


class Rehearsal:
    """The cluster's process (:func:`tests.helpers.autoscaling.serve`) and a Jobs API client."""

    def __init__(self, cr: dict, tmp: Path):
        cfg = tmp / "autoscaling.json"
        cfg.write_text(json.dumps(autoscaling_config(cr, idle_timeout_s=IDLE_S, boot_delay_s=BOOT_S)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
        env.update(
            head_env(cr),
            REHEARSAL_CONFIG=str(cfg),
            PYTHONPATH=str(REPO),
            RAY_USAGE_STATS_ENABLED="0",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        )
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
        self.url, self.session_dir = info["url"], info["session_dir"]
        from ray.job_submission import JobSubmissionClient

        end = time.monotonic() + 120  # the Jobs API answers a little after the dashboard URL is known
        while True:
            try:
                self.jobs = JobSubmissionClient(self.url)
                break
            except Exception:  # noqa: BLE001
                assert time.monotonic() < end, f"Jobs API at {self.url} not ready after 120 s"
                time.sleep(1)

    def answer(self):
        """The next answer; what the cluster's driver printed in between (autoscaler events) is kept."""
        for line in self.proc.stdout:
            if line.startswith(ANSWER):
                return json.loads(line[len(ANSWER) :])
            self.events.append(line.rstrip())
        raise AssertionError(f"the rehearsal cluster exited ({self.proc.wait()}): {self.events[-20:]}")

    def said(self) -> list[str]:
        """The autoscaler's last events, as a driver prints them ("(autoscaler +4s) Adding 2 node(s) ...")."""
        return [e for e in self.events if "(autoscaler" in e][-6:]

    def timeline(self) -> list:
        self.proc.stdin.write("timeline\n")
        self.proc.stdin.flush()
        return self.answer()

    def until(self, what, timeout: float, poll: float = 0.5):
        end = time.monotonic() + timeout
        while True:
            tl = self.timeline()
            got = what(tl)
            if got or time.monotonic() > end:
                return got, tl
            time.sleep(poll)

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _last(tl: list) -> dict:
    return tl[-1][1] if tl else {}


def _gpu(sample: dict) -> list[dict]:
    return [i for i in sample.get("instances", []) if i["type"] == "gpu"]


def test_gpu_nodes_follow_the_jobs(tmp_path):
    cr, (gate_nodes, gate_gpus) = rendered()
    group = next(g for g in cr["spec"]["workerGroupSpecs"] if g["groupName"] == "gpu")
    max_nodes, min_nodes = int(group["maxReplicas"]), int(group["minReplicas"])
    gpus = int(group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    assert (min_nodes, max_nodes, gpus) == (0, 2, 4), "the default stack: 0..gpuNodeCount g6.12xlarge workers"
    assert (gate_nodes, gate_gpus) == (max_nodes, gpus), "the gate asks for what the worker group can give"
    (tmp_path / "user_job.py").write_text(USER_JOB)
    (tmp_path / "gate_wait.py").write_text(GATE_WAIT)
    t_start = time.monotonic()
    r = Rehearsal(cr, tmp_path)
    try:
        t0 = time.monotonic()
        print(f"cluster up in {t0 - t_start:.1f} s")
        assert _gpu(_last(r.timeline())) == [], "no GPU instance before any job (minReplicas 0)"
        runtime_env = {"working_dir": str(tmp_path)}
        user = r.jobs.submit_job(entrypoint=f"python user_job.py {max_nodes} {gpus}", runtime_env=runtime_env)
        # a) the user's job alone makes the autoscaler launch the instances; b) they are still booting (ALLOCATED,
        # no raylet) when the gate's wait is submitted
        booting, tl = r.until(lambda tl: any(len(_gpu(s)) == max_nodes and not s["ray_nodes"] for _, s in tl), 60)
        assert booting, f"the autoscaler launched no {max_nodes} GPU instances: {tl[-3:]}; it said {r.said()}"
        gate = r.jobs.submit_job(entrypoint=f"python gate_wait.py {gate_nodes} {gate_gpus}", runtime_env=runtime_env)
        still = _last(r.timeline())
        assert not still["ray_nodes"], f"the nodes joined before the gate's job was submitted: {still}"
        statuses = {user: [], gate: []}
        end = time.monotonic() + 120
        while time.monotonic() < end and not all(
            s and s[-1] in ("SUCCEEDED", "FAILED", "STOPPED") for s in statuses.values()
        ):
            for j, seen in statuses.items():
                st = str(r.jobs.get_job_status(j).value)
                if not seen or seen[-1] != st:
                    seen.append(st)
            time.sleep(0.5)
        logs = {j: r.jobs.get_job_logs(j) for j in statuses}
        for j, seen in statuses.items():  # waited (PENDING/RUNNING), never failed, then succeeded
            assert seen[-1] == "SUCCEEDED" and "FAILED" not in seen, f"{j}: {seen}\n{logs[j][-3000:]}"
        print("job statuses seen:", statuses)
        t_done = time.monotonic()
        ranks = json.loads(logs[user].split("RANKS ", 1)[1].splitlines()[0])
        assert len({x["node"] for x in ranks}) == max_nodes, ranks
        worker_env = plain_env(group["template"]["spec"]["containers"][0])
        for x in ranks:  # each node's raylet carries the pod template's env, as KubeRay's pod does
            assert x["env"] == {k: worker_env[k] for k in x["env"]}, x
        assert json.loads(logs[gate].split("TOPOLOGY ", 1)[1].splitlines()[0]) == {
            "backend": "nccl",
            "nodes": max_nodes,
        }
        assert f"asked Ray's autoscaler for {max_nodes} node(s) of {gpus} GPU(s)" in logs[gate]
        # the workers go after the idle timeout (the gate's request withdrawn, no job left)
        gone, tl = r.until(lambda tl: _gpu(_last(tl)) == [] and not _last(tl)["ray_nodes"], IDLE_S + 60)
        t_gone = time.monotonic()
        assert gone, (
            f"GPU nodes still there {t_gone - t_done:.0f} s after the jobs ended: {_last(tl)}; "
            f"the autoscaler said {r.said()}"
        )
    finally:  # what the autoscaler did, printed (pytest shows it with a failure): the timeline and its own log
        tl = r.timeline()
        r.proc.stdin.write("monitor\n")
        r.proc.stdin.flush()
        monitor = r.answer()
        t_close = time.monotonic()
        r.close()
        print(f"rehearsal {t_close - t0:.1f} s, teardown {time.monotonic() - t_close:.1f} s")
        print("\n".join(r.events) + "\nmonitor.log:\n" + "\n".join(monitor))
        for t, s in tl:
            print(t, json.dumps(s))
    launched = {i["instance"] for _, s in tl for i in _gpu(s) if i["state"] == "pending"}
    joined = {n.split(":")[0] for _, s in tl for n in s.get("ray_nodes", [])}
    assert len(launched) == len(joined) == max_nodes, (
        f"launched {sorted(launched)}, joined {sorted(joined)}: not {max_nodes} instances, each booted once"
    )
    for state in ("pending", "running"):  # never more than maxReplicas at once (the report may lag a beat, so
        # a joined instance can still be listed pending: each state is counted on its own)
        most = max(len([i for i in _gpu(s) if (i["state"] == "pending") == (state == "pending")]) for _, s in tl)
        assert most == max_nodes, f"{most} {state} GPU instances at once, maxReplicas {max_nodes}"
    assert max(len(s.get("ray_nodes", [])) for _, s in tl) == max_nodes
    # removed after the idle timeout: from the start of the last streak in which both were idle to their removal
    full = [
        k
        for k, (_, s) in enumerate(tl)
        if len(_gpu(s)) == max_nodes and all(i["state"] in ("idle", "active") for i in _gpu(s))
    ]
    gone_at = next(k for k in range(full[-1] + 1, len(tl)) if len(_gpu(tl[k][1])) < max_nodes)
    k = gone_at - 1
    while k - 1 in full and all(i["state"] == "idle" for i in _gpu(tl[k - 1][1])):
        k -= 1
    assert all(i["state"] == "idle" for i in _gpu(tl[k][1])), tl[k]
    idle, removed = tl[k][0], tl[gone_at][0]
    assert IDLE_S - 1 <= removed - idle <= IDLE_S + 20, f"idle from {idle} s, removed at {removed} s"
