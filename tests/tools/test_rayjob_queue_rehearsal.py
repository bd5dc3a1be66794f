"""Rehearsal on CPU of what a queued RayJob may not do: start a two-node job on one node, or run past its team's
quota. Real Ray 2.58 runs the rendered jobs; Kueue's admission is the test double tests/helpers/kueue_admission.py
(docs/team-jobs.md, "What is tested without a cluster", says what it follows and what it leaves out).

The cluster: a 0-CPU head with the Jobs API and one "GPU node" (1 CPU, 1 logical GPU: a g6.8xlarge's one GPU);
a second one joins when a test asks. The jobs are rendered for ``gpuInstanceType: g6.8xlarge`` and run ``--use-gpu``
on gloo (``RAY_EFA_EKS_TRAIN_BACKEND=gloo``: the GPU path's placement on logical GPUs, the compute on CPU). They are
submitted as KubeRay's submitter does (``ray job submit --runtime-env-json ... --no-wait``, common/job.go
``BuildJobSubmitCommand``), with the code written out as the ConfigMap mounts it.

Slow (a local Ray cluster and three training runs): ``flock /work/ray.lock .venv/bin/python -m pytest -q
tests/tools/test_rayjob_queue_rehearsal.py``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ray.job_submission")
pytest.importorskip("aiohttp")  # ray[default]: the dashboard and the Jobs API

from ray_efa_eks.tools.command import main  # noqa: E402
from tests.helpers.crd import plain  # noqa: E402
from tests.helpers.ray_jobs import submit  # noqa: E402
from tests.helpers.kueue_admission import Kueue  # noqa: E402
from tests.helpers.mockruns import shared_run  # noqa: E402

BIN = str(Path(sys.executable).parent)
TEAMS = json.dumps(["vision:1nodes:borrow", "nlp:1nodes"])
STACK = {"gpuInstanceType": "g6.8xlarge", "jobQueues": TEAMS}
SERVER = """
import sys
from ray_efa_eks.efacheck.local_cluster import add_worker_node, local_cluster
with local_cluster(worker_nodes=1, cpus_per_node=1, num_gpus=1, dashboard=True) as c:
    print("http://" + c.webui_url, flush=True)
    for line in sys.stdin:
        add_worker_node(c, num_cpus=1, num_gpus=1)
        print("added", flush=True)
"""


def render(team: str, name: str, nodes: int, train: list[str]) -> tuple[dict, dict]:
    """``ray-efa-eks rayjob --dry-run`` for the stack above: the ConfigMap and the RayJob."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(
            [
                "rayjob",
                "--defaults",
                "--config",
                f"gpuInstanceType={STACK['gpuInstanceType']}",
                "--config",
                f"jobQueues={TEAMS}",
                "--queue",
                team,
                "--bucket",
                "ckpt",
                "--name",
                name,
                "--nodes",
                str(nodes),
                "--dry-run",
                "--",
                *train,
            ]
        )
    assert code == 0
    cm, job = yaml.safe_load_all(buf.getvalue())
    return cm, job


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path_factory.mktemp("cluster"),
    )
    url = proc.stdout.readline().strip()
    assert url.startswith("http://"), "the local cluster did not start"

    def add_node() -> None:
        proc.stdin.write("add\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "added"

    yield url, env, add_node
    proc.stdin.close()
    proc.wait(timeout=120)


class Submitted:
    """A job handed to the cluster's Jobs API as KubeRay's submitter hands it."""

    def __init__(self, url: str, env: dict, cm: dict, job: dict, tmp: Path, sid: str):
        from ray.job_submission import JobSubmissionClient

        self.client, self.sid = JobSubmissionClient(url), sid
        code = tmp / f"code-{sid}"
        (vol,) = job["spec"]["submitterPodTemplate"]["spec"]["volumes"]
        for item in vol["configMap"]["items"]:  # the ConfigMap as the submitter pod mounts it
            (code / item["path"]).parent.mkdir(parents=True, exist_ok=True)
            (code / item["path"]).write_text(cm["data"][item["key"]])
        self.storage = tmp / f"store-{sid}"
        runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
        runtime_env["working_dir"] = str(code)
        runtime_env["env_vars"] = {
            "RAY_EFA_EKS_STORAGE_PATH": str(self.storage),  # the pods' env, here the job's
            "RAY_EFA_EKS_TRAIN_BACKEND": "gloo",
        }  # logical GPUs: compute on CPU
        submit(url, env, runtime_env, sid, job["spec"]["entrypoint"].split())

    def status(self) -> str:
        return str(self.client.get_job_status(self.sid))

    def logs(self) -> str:
        return self.client.get_job_logs(self.sid)

    def wait_for(self, text: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while text not in (log := self.logs()) and not self.status().endswith(("SUCCEEDED", "FAILED", "STOPPED")):
            assert time.monotonic() < deadline, f"no {text!r} in {timeout_s:g} s: {log[-3000:]}"
            time.sleep(2)
        return log

    def end(self, timeout_s: float = 600) -> tuple[str, str]:
        deadline = time.monotonic() + timeout_s
        while not (status := self.status()).endswith(("SUCCEEDED", "FAILED", "STOPPED")):
            assert time.monotonic() < deadline, f"job {self.sid} still {status} after {timeout_s:g} s"
            time.sleep(2)
        return status, self.logs()


def test_two_node_job_whose_second_node_never_comes_ends_with_exit_6_and_no_step(cluster, tmp_path):
    url, env, _ = cluster  # one GPU node (runs before the test that adds the second)
    cm, job = render("vision", "lonely", 2, ["--use-gpu", "--steps", "4", "--wait-for-workers-s", "6"])
    assert job["spec"]["entrypoint"].endswith("--wait-for-workers-s 6 --workers 2")  # its own wait, not the default
    run = Submitted(url, env, cm, job, tmp_path, "lonely-1")
    status, log = run.end()
    message = run.client.get_job_info(run.sid).message or ""
    assert status.endswith("FAILED") and "failed with exit code 6" in message, (message, log[-3000:])
    assert "needs 2 (one per worker)" in log and "waited 6 s: --wait-for-workers-s" in log, log[-3000:]
    assert "[train] step" not in log and not list(run.storage.rglob("checkpoint_*"))


def test_two_node_job_starts_no_step_on_one_node_and_runs_when_the_second_joins(cluster, tmp_path):
    url, env, add_node = cluster
    cm, job = render("vision", "gang", 2, ["--use-gpu", "--steps", "4", "--checkpoint-every", "2", "--name", "gang"])
    (workers,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 2  # Kueue counts 2 pods
    run = Submitted(url, env, cm, job, tmp_path, "gang-1")
    log = run.wait_for("[train] waiting", 300)
    time.sleep(10)  # time enough for a run that does not wait to start its steps on the one node
    log, status = run.logs(), run.status()
    assert status.endswith("RUNNING") and "[train] waiting" in log, (status, log[-3000:])
    assert "[train] step" not in log and not list(run.storage.rglob("checkpoint_*")), log[-3000:]

    add_node()
    status, log = run.end()
    assert status.endswith("SUCCEEDED"), log[-3000:]
    summary = next(ln for ln in log.splitlines() if ln.startswith("[summary]"))
    assert "world=2 nodes=2" in summary and "[fabric]" in log, summary
    print(summary)


def test_over_quota_job_waits_while_the_other_team_runs(cluster, tmp_path):
    url, env, _ = cluster
    objs = [
        plain({k: r[k] for k in ("apiVersion", "kind", "metadata", "spec")})
        for r in shared_run(STACK).resources
        if r.type.startswith("kubernetes:kueue.x-k8s.io/")
    ]
    kueue = Kueue(objs)
    cm_b, job_b = render("nlp", "small", 1, ["--use-gpu", "--steps", "4", "--checkpoint-every", "2", "--name", "small"])
    _, job_a = render("vision", "big", 2, ["--use-gpu", "--steps", "4"])
    b, a = kueue.submit(job_b), kueue.submit(job_a)

    first = kueue.schedule()  # nlp's 1 GPU is its own; vision's 2 need nlp's, which nlp uses
    assert first["small"].admitted and not b["spec"]["suspend"]
    assert not first["big"].admitted and a["spec"]["suspend"] is True, first["big"]
    assert "insufficient unused quota for nvidia.com/gpu" in first["big"].message

    run = Submitted(url, env, cm_b, b, tmp_path, "small-1")  # only the admitted job gets a Ray cluster
    status, log = run.end()
    assert status.endswith("SUCCEEDED") and "[fabric]" in log and "[summary]" in log, log[-3000:]
    assert a["spec"]["suspend"] is True  # still queued while nlp's job ran
    assert list(run.storage.rglob("checkpoint_*"))

    kueue.finish(b)  # KubeRay deleted its cluster: the quota is free, vision may borrow nlp's
    second = kueue.schedule()
    assert second["big"].admitted and a["spec"]["suspend"] is False, second
    print(first["big"].message, "->", second["big"].message)
