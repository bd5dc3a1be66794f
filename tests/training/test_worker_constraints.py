"""The GPU worker pods' hardening, rehearsed on CPU: a Ray cluster whose every process runs as a container with the
rendered securityContext would (root without any capability, ``no_new_privs``, a small ``RLIMIT_MEMLOCK``) starts,
its workers join, a Ray Train run trains and reports, and the Jobs API runs a job.

What a process here can share with the pod: the capability sets (``setpriv --bounding-set=-all --inh-caps=-all
--ambient-caps=-all``, as ``drop: [ALL]``), ``no_new_privs`` (``allowPrivilegeEscalation: false``; the runtime sets
the same prctl, runc ``NoNewPrivileges``) and the memlock limit (64 KiB: no page pinned by ``mlock`` beyond it; CPU
Ray and gloo need none). Not the seccomp profile (RuntimeDefault is containerd's; no syscall Ray makes on CPU is in
its deny list, which covers e.g. ``mount``, ``kexec_load``, ``bpf``) nor the GPU and EFA devices.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.job_submission")
pytest.importorskip("aiohttp")  # ray[default]: the dashboard and the Jobs API
pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
MEMLOCK = 64 * 1024
"""Bytes: the kernel's old default ``RLIMIT_MEMLOCK`` (newer kernels give 8 MiB), smaller than a node's."""

CHILD = """
import json, resource, sys, time
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
caps = {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)
from ray_efa_eks.efacheck.local_cluster import local_cluster
from ray_efa_eks.training.trainer import build_trainer
from ray.job_submission import JobStatus, JobSubmissionClient
with local_cluster(worker_nodes=2, dashboard=True) as c:
    import ray
    # a worker process of the cluster: what its raylet started it with
    @ray.remote(num_cpus=1)
    def inside():
        s = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
        return int(s["CapEff"], 16), int(s["CapBnd"], 16), int(s["NoNewPrivs"]), resource.getrlimit(
            resource.RLIMIT_MEMLOCK)[0]
    worker = ray.get(inside.remote())
    result = build_trainer(num_workers=2, storage_path=sys.argv[1], name="constrained",
                           train_config={"steps": 6, "checkpoint_every": 3, "report_every": 3}).fit()
    client = JobSubmissionClient("http://" + c.webui_url)
    job = client.submit_job(entrypoint=sys.executable + " -c 'import ray; ray.init(); print(ray.cluster_resources())'")
    end = time.monotonic() + 300
    while client.get_job_status(job) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        assert time.monotonic() < end, "job did not finish"
        time.sleep(2)
    print(json.dumps({"caps": caps, "no_new_privs": int(status["NoNewPrivs"]), "memlock": memlock,
                      "worker": worker, "step": result.return_value["step"], "loss": result.return_value["loss"],
                      "loss_first": result.return_value["loss_first"],
                      "job": str(client.get_job_status(job)), "job_log": client.get_job_logs(job)[-2000:]}), flush=True)
"""


def rendered_worker(run) -> tuple[dict, list[dict]]:
    rc = run.one("kubernetes:ray.io/v1:RayCluster")
    (group,) = rc["spec"]["workerGroupSpecs"]
    pod = group["template"]["spec"]
    return pod, [*pod.get("initContainers", []), *pod["containers"]]


def test_every_worker_container_drops_everything_and_cannot_escalate(default_run):
    """What the rehearsal below reproduces is what the stack renders: no capability added, all dropped, no
    escalation, RuntimeDefault seccomp for the pod; and that passes the namespace's Pod Security level."""
    from tests.helpers.pod_security import violations

    pod, containers = rendered_worker(default_run)
    assert [c["name"] for c in containers] == ["efa-provider-check", "ray-worker"]
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    for c in containers:
        assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}, c["name"]
    assert violations(pod, "baseline") == []
    assert [v for v in violations(pod, "restricted") if "runAsNonRoot" not in v] == []


@pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("setpriv") and shutil.which("prlimit")),
    reason="needs root (to drop capabilities it has) and util-linux setpriv/prlimit",
)
def test_ray_joins_trains_and_runs_a_job_without_capabilities(default_run, tmp_path):
    _, containers = rendered_worker(default_run)
    ctx = next(c for c in containers if c["name"] == "ray-worker")["securityContext"]
    assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["allowPrivilegeEscalation"] is False
    cmd = [
        "setpriv",
        "--no-new-privs",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--",
        "prlimit",
        f"--memlock={MEMLOCK}:{MEMLOCK}",
        "--",
        sys.executable,
        "-c",
        CHILD,
        str(tmp_path),
    ]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["caps"] == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": 0, "CapAmb": 0}
    assert out["no_new_privs"] == 1 and out["memlock"] == [MEMLOCK, MEMLOCK]
    assert out["worker"] == [0, 0, 1, MEMLOCK]  # a Ray worker process inherits all of it
    assert out["step"] == 6 and out["loss"] < out["loss_first"]
    assert out["job"] == "SUCCEEDED", out["job_log"]
