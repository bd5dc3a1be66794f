"""Rehearsal on CPU of two teams' RayJobs, with real Ray 2.58: what ``ray-efa-eks rayjob`` renders runs as KubeRay's
submitter would run it, and the outcome Ray reports comes back through the RayJob's status as the job's exit code.

What is real: the rendered objects (``rayjob --dry-run``), the training code exactly as the ConfigMap carries it
(written out at the paths its ``items`` mount), the entrypoint, ``ray job submit --runtime-env-json ... --no-wait``
and ``ray job logs --follow`` as KubeRay v1.7.0's submitter runs them (common/job.go ``BuildJobSubmitCommand``), Ray's
own JobInfo (status, message) and the training run's fabric verdict on a 2-worker-node CPU cluster with a 0-CPU head.
What is modelled: the pod (the working_dir is the ConfigMap written to a folder, the pods' env a runtime-env
``env_vars``), and KubeRay and Kueue: the fake Kubernetes API (tests/helpers/fake_kube.py) reports the status KubeRay
would write (``jobStatus``, and ``message`` = Ray's JobInfo.message, rayjob_controller.go). Kueue's queueing
(over-quota waits) and a two-node job's wait for its second node are rehearsed in
tests/tools/test_rayjob_queue_rehearsal.py.

Slow (a local Ray cluster with the dashboard and two training jobs): run it with the Ray lock,
``flock /work/ray.lock .venv/bin/python -m pytest -q tests/tools/test_rayjob_rehearsal.py``.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ray.job_submission")
pytest.importorskip("aiohttp")  # ray[default]: the dashboard and the Jobs API

from ray_efa_eks.tools.command import main  # noqa: E402
from tests.helpers.fake_kube import FakeKube  # noqa: E402
from tests.helpers.ray_jobs import submit  # noqa: E402

BIN = str(Path(sys.executable).parent)
TEAMS = 'jobQueues=["vision:2nodes", "nlp:1nodes:borrow"]'
SERVER = """
import sys
from ray_efa_eks.efacheck.local_cluster import local_cluster
with local_cluster(worker_nodes=2, dashboard=True) as c:
    print("http://" + c.webui_url, flush=True)
    sys.stdin.read()
"""


def render(team: str, name: str, train: list[str]) -> tuple[dict, dict]:
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(
            [
                "rayjob",
                "--defaults",
                "--config",
                TEAMS,
                "--queue",
                team,
                "--bucket",
                "ckpt",
                "--name",
                name,
                "--nodes",
                "1",
                "--dry-run",
                "--",
                *train,
            ]
        )
    assert code == 0
    cm, job = yaml.safe_load_all(buf.getvalue())
    return cm, job


def mount(cm: dict, job: dict, where: Path) -> Path:
    """The ConfigMap as the submitter pod sees it: each item's key written at its path."""
    (vol,) = job["spec"]["submitterPodTemplate"]["spec"]["volumes"]
    for item in vol["configMap"]["items"]:
        f = where / item["path"]
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(cm["data"][item["key"]])
    return where


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
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
    yield url, env
    proc.stdin.close()
    proc.wait(timeout=120)


def submitter(url: str, env: dict, job: dict, workdir: Path, storage: Path, sid: str) -> tuple[dict, str]:
    """KubeRay's submitter command for this RayJob (K8sJobMode), then Ray's JobInfo and the followed log."""
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    runtime_env["working_dir"] = str(workdir)  # the mount path, here a folder
    runtime_env["env_vars"] = {"RAY_EFA_EKS_STORAGE_PATH": str(storage)}  # the pods' env, here the job's
    entry = job["spec"]["entrypoint"].split()
    submit(url, env, runtime_env, sid, entry)
    logs = subprocess.run(
        ["ray", "job", "logs", "--address", url, "--follow", sid], env=env, capture_output=True, text=True, timeout=600
    )
    from ray.job_submission import JobSubmissionClient

    info = JobSubmissionClient(url).get_job_info(sid)
    return {
        "status": str(info.status.value if hasattr(info.status, "value") else info.status),
        "message": info.message or "",
    }, logs.stdout


def follow(capsys, info: dict, log: str, team: str, name: str) -> tuple[int, str]:
    """``rayjob`` applying the job and following it while KubeRay (the fake) reports Ray's outcome."""
    final = {"jobDeploymentStatus": "Complete", "jobStatus": info["status"], "message": info["message"]}
    fake = FakeKube([{"_suspend": True}, {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, final], log=log)
    try:
        code = main(
            [
                "rayjob",
                "--defaults",
                "--config",
                TEAMS,
                "--queue",
                team,
                "--bucket",
                "ckpt",
                "--name",
                name,
                "--nodes",
                "1",
                "--server",
                fake.url,
                "--poll-s",
                "0.01",
                "--",
                "--steps",
                "4",
            ]
        )
    finally:
        fake.close()
    return code, capsys.readouterr().out


def test_two_teams_jobs_run_and_exit_with_their_results_and_verdicts(dashboard, tmp_path, capsys):
    url, env = dashboard
    strict_train = ["--require-efa", "--steps", "4", "--checkpoint-every", "2"]
    plain_train = ["--steps", "4", "--checkpoint-every", "2", "--name", "nlp-run"]
    cm_a, job_a = render("vision", "strict", strict_train)
    cm_b, job_b = render("nlp", "plain", plain_train)
    assert job_a["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-vision"
    assert job_b["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-nlp"

    store_a, store_b = tmp_path / "teams/vision", tmp_path / "teams/nlp"
    info_a, log_a = submitter(url, env, job_a, mount(cm_a, job_a, tmp_path / "code-a"), store_a, "strict-1")
    info_b, log_b = submitter(url, env, job_b, mount(cm_b, job_b, tmp_path / "code-b"), store_b, "plain-1")

    # vision's job: --require-efa on CPU (gloo, no NCCL): Ray reports exit 5 and nothing was checkpointed
    assert info_a["status"] == "FAILED" and "failed with exit code 5" in info_a["message"], info_a
    assert "[fabric]" in log_a and not list(store_a.rglob("checkpoint_*")) and not list(store_a.rglob("step_*"))
    # nlp's job: finished, with its fabric verdict in its log and a checkpoint under its own prefix
    assert info_b["status"] == "SUCCEEDED", (info_b, log_b[-3000:])
    assert "[fabric]" in log_b and "[summary]" in log_b and list(store_b.rglob("*"))

    code_a, out_a = follow(capsys, info_a, log_a, "vision", "strict")
    code_b, out_b = follow(capsys, info_b, log_b, "nlp", "plain")
    assert code_a == 5 and "[fabric]" in out_a and "exit 5" in out_a
    assert code_b == 0 and "[fabric]" in out_b and "[summary]" in out_b
    print(f"vision: exit {code_a}; nlp: exit {code_b}")
    for line in (out_a + out_b).splitlines():
        if line.startswith(("[fabric]", "[summary]", "[rayjob]")):
            print(line)
