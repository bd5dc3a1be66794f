"""Ray token auth offline, with real Ray 2.58 in token mode: the cluster refuses job submissions without the token
and accepts them with it, through the code paths the deployed stack uses.

- The EFA check Job: its own shell script (``check_script``, as the component renders it) with the Job
  container's env (``RAY_AUTH_TOKEN`` from the Secret the RayCluster's ``authOptions`` names).
- ``python -m ray_efa_eks.training submit``: refused without the token (exit 2, one clear line), and with it a
  short training job runs to completion; a job that exhausts ``--max-failures`` comes back as exit 1.

The cluster is shaped like the deployed one (0-CPU head with dashboard + Jobs API, two 1-CPU worker nodes). It
runs in a child process so that the token mode (process-wide in Ray) stays out of the other tests' processes.
"""

from __future__ import annotations

import json
import os
import secrets
import string
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("ray.job_submission")
pytest.importorskip("aiohttp")  # ray[default]: the dashboard and the Jobs API

from ray_efa_eks.components.efa_check import check_script  # noqa: E402
from ray_efa_eks.components.raycluster import AUTH_TOKEN_KEY, TOKEN_LENGTH  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BIN = str(Path(sys.executable).parent)
TOKEN = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(TOKEN_LENGTH))  # as RandomPassword
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS")

SERVER = """
import sys
from ray_efa_eks.efacheck.local_cluster import local_cluster
with local_cluster(worker_nodes=2, dashboard=True) as c:
    print("http://" + c.webui_url, flush=True)
    sys.stdin.read()   # until the test closes the pipe
"""


def base_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without any Ray auth setting, HOME without a ~/.ray/auth_token, the venv's `ray` first."""
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    env.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", RAY_USAGE_STATS_ENABLED="0")
    env.update(extra)
    return env


def _ready(url: str, deadline_s: float = 240) -> None:
    """Until the head's job agent takes a job (the Jobs API answers 500 "No available agent" before)."""
    req = urllib.request.Request(f"{url}/api/jobs/", data=json.dumps({"entrypoint": "true"}).encode(),
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    end = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(req, timeout=90) as r:  # a loaded 2-core box takes its time
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > end:
            raise TimeoutError(f"Jobs API at {url} not ready after {deadline_s}s")
        time.sleep(1)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def cluster(home):
    env = base_env(home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env, cwd=REPO)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://"), f"local cluster did not start (exit {proc.poll()})"
        _ready(url)
        yield url
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the driver's SIGTERM handler still runs local_cluster's cleanup
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def run(cmd: list[str] | str, env: dict[str, str], timeout: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO, **kw)


# -- the stack wires the token the way the local cluster uses it --------------------------------------------------

def job_container_env(run_: object) -> dict[str, str]:
    """The EFA check Job container's env as a pod would see it: secretKeyRefs resolved to the stack's token."""
    rc = run_.one("kubernetes:ray.io/v1:RayCluster")
    secret = run_.one("kubernetes:core/v1:Secret", "auth-token")
    job = run_.one("kubernetes:batch/v1:Job")
    out = {}
    for e in job["spec"]["template"]["spec"]["containers"][0].get("env", []):
        if "valueFrom" in e:
            ref = e["valueFrom"]["secretKeyRef"]
            assert ref == {"name": rc["spec"]["authOptions"]["secretName"], "key": AUTH_TOKEN_KEY}
            assert ref["name"] == secret["metadata"]["name"]
            out[e["name"]] = TOKEN
        else:
            out[e["name"]] = e["value"]
    return out


def test_stack_job_env_carries_the_clusters_token(default_run):
    env = job_container_env(default_run)
    assert env == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}


# -- the EFA check Job's script -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mount(tmp_path_factory) -> Path:
    """The Job's code mount, with a stand-in efa_check that answers at once: the auth path is what is tested."""
    root = tmp_path_factory.mktemp("mount")
    (root / "efacheck").mkdir()
    (root / "efacheck" / "__init__.py").write_text("")
    (root / "efacheck" / "efa_check.py").write_text(
        'import json, os\nprint(json.dumps({"verdict": "efa", "authed": os.environ.get("RAY_AUTH_MODE")}))\n')
    return root


def test_job_script_without_token_never_gets_past_the_head(cluster, home, mount):
    script = check_script(cluster, working_dir=str(mount))
    r = run(["timeout", "15", "bash", "-c", script], base_env(home), timeout=60)
    assert r.returncode == 124, r.stdout + r.stderr  # still waiting: `ray job list` is refused every time
    assert "waiting for Ray head (1)" in r.stdout
    listing = run([f"{BIN}/ray", "job", "list", "--address", cluster], base_env(home), timeout=60)
    assert listing.returncode != 0 and "Authentication required" in listing.stdout + listing.stderr
    submit = run([f"{BIN}/ray", "job", "submit", "--address", cluster, "--no-wait", "--", "echo", "hi"],
                 base_env(home), timeout=60)
    assert submit.returncode != 0 and "Unauthorized" in submit.stdout + submit.stderr


def test_job_script_with_the_job_env_submits_and_passes(cluster, home, mount, default_run):
    script = check_script(cluster, working_dir=str(mount))
    r = run(["bash", "-c", script], base_env(home, **job_container_env(default_run)), timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert '"verdict": "efa"' in out and "succeeded" in out.lower(), out[-3000:]


# -- python -m ray_efa_eks.training submit ------------------------------------------------------------------------

def submit(cluster: str, env: dict[str, str], *train: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "ray_efa_eks.training", "submit", "--address", cluster, "--", *train],
               env, timeout=timeout)


@pytest.mark.parametrize("auth", [{}, {"RAY_AUTH_TOKEN": "not-the-token"}], ids=["no-token", "wrong-token"])
def test_submit_refused_without_the_token(cluster, home, auth):
    r = submit(cluster, base_env(home, **auth), "--steps", "2", timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "refused" in r.stderr and "RAY_AUTH_TOKEN" in r.stderr
    assert "Traceback" not in r.stderr and "submitted" not in r.stdout


def test_submit_with_token_trains_to_completion(cluster, home, tmp_path):
    r = submit(cluster, base_env(home, RAY_AUTH_TOKEN=TOKEN), "--steps", "6", "--checkpoint-every", "3",
               "--report-every", "3", "--storage-path", str(tmp_path), "--name", "submitted", "--json")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    summary = json.loads(next(ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")))
    assert summary["steps"] == 6 and summary["world_size"] == 2 and summary["nodes"] == 2
    assert (tmp_path / "submitted" / "step_000006" / ".metadata").exists()
    assert "SUCCEEDED" in r.stdout.splitlines()[-1]


def test_submitted_job_that_exhausts_max_failures_returns_its_exit_code(cluster, home, tmp_path):
    r = submit(cluster, base_env(home, RAY_AUTH_TOKEN=TOKEN), "--steps", "10", "--checkpoint-every", "5",
               "--report-every", "5", "--fail-at-step", "7", "--max-failures", "0", "--storage-path", str(tmp_path),
               "--name", "doomed")
    assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-2000:]
    # Ray Train reports the dead rank (WorkerGroupError); rarely the controller is reported dead instead.
    assert "error: training run 'doomed' failed" in r.stdout, r.stdout[-6000:]
    assert ("failed after --max-failures 0 restart(s): rank" in r.stdout and "rank 1: " in r.stdout
            or "controller died" in r.stdout)
    assert "FAILED, exit 1" in r.stdout.splitlines()[-1]
