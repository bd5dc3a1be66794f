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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("ray.job_submission")
pytest.importorskip("aiohttp")  # ray[default]: the dashboard and the Jobs API

from ray_efa_eks.components.addons.efa_check import Deadlines, check_script  # noqa: E402
from ray_efa_eks.components.ray.raycluster import AUTH_TOKEN_KEY, TOKEN_LENGTH  # noqa: E402

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
    req = urllib.request.Request(
        f"{url}/api/jobs/",
        data=json.dumps({"entrypoint": "true"}).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
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
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
    )
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


def run_all(cmds: dict[str, list[str]], env: dict[str, str], timeout: float) -> dict[str, subprocess.CompletedProcess]:
    """``run`` for each command, all started at once (each waits on the head, not on the others)."""
    with ThreadPoolExecutor(len(cmds)) as pool:
        futures = {k: pool.submit(run, cmd, env, timeout) for k, cmd in cmds.items()}
        return {k: f.result() for k, f in futures.items()}


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
    check = root / "ray_efa_eks" / "efacheck"  # where the job's python -m finds the check (CHECK_MODULE)
    check.mkdir(parents=True)
    (root / "ray_efa_eks" / "__init__.py").write_text("")
    (check / "__init__.py").write_text("")
    (check / "efa_check.py").write_text(
        'import json, os\nprint(json.dumps({"verdict": "efa", "authed": os.environ.get("RAY_AUTH_MODE")}))\n'
    )
    return root


def test_job_script_without_token_never_gets_past_the_head(cluster, home, mount, trained):
    # A 1 s head wait (production: 600 s) instead of a 15 s `timeout`: the script gives up in its first loop,
    # where `ray job list` is refused every time, and says so (exit 2, the "unreachable" line only that loop prints).
    script = check_script(cluster, working_dir=str(mount), deadlines=Deadlines(head_wait_s=1))
    procs = {
        "script": ["bash", "-c", script],
        "list": [f"{BIN}/ray", "job", "list", "--address", cluster],
        "submit": [f"{BIN}/ray", "job", "submit", "--address", cluster, "--no-wait", "--", "echo", "hi"],
    }
    r = run_all(procs, base_env(home), timeout=60)  # side by side: each only waits for the head's refusal
    out = r["script"].stdout + r["script"].stderr
    assert r["script"].returncode == 2, out
    assert '"unreachable"' in out and "did not answer within 1 s" in out, out
    assert "could not list earlier" not in out and "efa-check-" not in out, out  # nothing after the head's wait
    listing, submit = r["list"], r["submit"]
    assert listing.returncode != 0 and "Authentication required" in listing.stdout + listing.stderr
    assert submit.returncode != 0 and "Unauthorized" in submit.stdout + submit.stderr


def test_job_script_with_the_job_env_submits_and_passes(cluster, home, mount, default_run, trained):
    script = check_script(cluster, working_dir=str(mount))
    r = run(["bash", "-c", script], base_env(home, **job_container_env(default_run)), timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout + r.stderr
    assert '"verdict": "efa"' in out and "succeeded" in out.lower(), out[-3000:]


# -- python -m ray_efa_eks.training submit ------------------------------------------------------------------------


def submit_cmd(cluster: str, *train: str) -> list[str]:
    return [sys.executable, "-m", "ray_efa_eks.training", "submit", "--address", cluster, "--", *train]


def submit(cluster: str, env: dict[str, str], *train: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run(submit_cmd(cluster, *train), env, timeout=timeout)


@pytest.fixture(scope="module")
def trained(cluster, home, tmp_path_factory):
    """The token-authenticated training job, submitted as soon as the cluster answers: it trains on the worker nodes
    while the tests before ``test_submit_with_token_trains_to_completion`` run, whose processes only talk to the
    Jobs API (the check script's stand-in job runs on the 0-CPU head). Yields (process, storage path, output
    files); that test waits for it."""
    root = tmp_path_factory.mktemp("trained")
    out, err = root / "stdout", root / "stderr"
    with open(out, "w") as o, open(err, "w") as e:  # files, not pipes: nobody reads until the end
        proc = subprocess.Popen(
            submit_cmd(
                cluster,
                "--steps",
                "2",
                "--checkpoint-every",
                "2",
                "--report-every",
                "2",
                "--storage-path",
                str(root),
                "--name",
                "submitted",
                "--json",
            ),
            env=base_env(home, RAY_AUTH_TOKEN=TOKEN),
            stdout=o,
            stderr=e,
            text=True,
            cwd=REPO,
        )
    try:
        yield proc, root, out, err
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_submit_refused_without_the_token(cluster, home, trained):
    """No token and a wrong one, side by side (each process only waits for the Jobs API's refusal)."""
    cmd = submit_cmd(cluster, "--steps", "2")
    with ThreadPoolExecutor(2) as pool:
        runs = {
            k: pool.submit(run, cmd, base_env(home, **auth), 60)
            for k, auth in {"no-token": {}, "wrong-token": {"RAY_AUTH_TOKEN": "not-the-token"}}.items()
        }
        results = {k: f.result() for k, f in runs.items()}
    for auth, r in results.items():
        assert r.returncode == 2, (auth, r.stdout + r.stderr)
        assert "refused" in r.stderr and "RAY_AUTH_TOKEN" in r.stderr, (auth, r.stderr)
        assert "Traceback" not in r.stderr and "submitted" not in r.stdout, (auth, r.stdout + r.stderr)


def test_submit_with_token_trains_to_completion(trained):
    proc, storage, out, err = trained
    code = proc.wait(timeout=300)
    stdout, stderr = out.read_text(), err.read_text()
    assert code == 0, stdout[-4000:] + stderr[-2000:]
    summary = json.loads(next(ln for ln in reversed(stdout.splitlines()) if ln.startswith("{")))
    assert summary["steps"] == 2 and summary["world_size"] == 2 and summary["nodes"] == 2
    assert (storage / "submitted" / "step_000002" / ".metadata").exists()
    assert "SUCCEEDED" in stdout.splitlines()[-1]


def test_submitted_job_that_exhausts_max_failures_returns_its_exit_code(cluster, home, tmp_path):
    r = submit(
        cluster,
        base_env(home, RAY_AUTH_TOKEN=TOKEN),
        "--steps",
        "3",
        "--checkpoint-every",
        "1",
        "--report-every",
        "1",
        "--fail-at-step",
        "2",
        "--max-failures",
        "0",
        "--storage-path",
        str(tmp_path),
        "--name",
        "doomed",
    )
    assert r.returncode == 1, r.stdout[-4000:] + r.stderr[-2000:]
    # Ray Train reports the dead rank (WorkerGroupError); rarely the controller is reported dead instead.
    assert "error: training run 'doomed' failed" in r.stdout, r.stdout[-6000:]
    assert (
        "failed after --max-failures 0 restart(s): rank" in r.stdout
        and "rank 1: " in r.stdout
        or "controller died" in r.stdout
    )
    assert "FAILED, exit 1" in r.stdout.splitlines()[-1]
