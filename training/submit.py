"""``submit``: the training package and the efacheck modules it imports shipped as a Ray job's working_dir, the
job's command, its submission to the Jobs API (every request with a deadline), its log followed and its exit code
returned."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence
from urllib.parse import urlsplit

from . import reach
from ..efacheck.exit_codes import EXIT_USAGE
from .cli import url_problem
from .errors import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, CliError, first_line

EFACHECK_FILES = (
    "__init__.py",
    "cli.py",
    "exit_codes.py",
    "storage_uri.py",
    "nccl_log.py",
    "nccl_input.py",
    "nccl_parse.py",
    "nccl_report.py",
    "nccl_verdict.py",
    "efa_counters.py",
    "verdict_metrics.py",
    "local_cluster.py",
)
"""The efacheck modules training imports (``training/fabric.py``: the gate's verdict code; the run's verdict as a
metric; the local Ray cluster), closed under their own imports; ``submit`` ships them next to ``training``
(tests/test_architecture.py checks both)."""
COMPONENTS_FILES = ("__init__.py", "config/__init__.py", "config/url_rule.py")
"""The library modules training imports (``training/cli.py``: the URL rule ``remoteWriteUrl`` keeps), stdlib only;
``submit`` ships them next to ``training`` (tests/test_architecture.py checks it)."""
NAMESPACE = "ray_efa_eks"
"""The package ``training`` and ``efacheck`` live in; a submitted job keeps that layout (components/payload.py)."""
AGENT_WAIT_S = 60.0
"""How long submit retries while a freshly started head has no job agent yet ("No available agent")."""
TOKEN_HINT = (
    "the cluster runs Ray token auth: export RAY_AUTH_TOKEN=$(pulumi stack output rayAuthToken "
    "--show-secrets) (or RAY_AUTH_TOKEN_PATH=<file>) and retry"
)


def submit_entrypoint(train_args: Sequence[str]) -> str:
    """The job's command: the training args pass through unchanged; with no --storage-path the
    job uses the cluster's $RAY_EFA_EKS_STORAGE_PATH (set on the pods)."""
    return shlex.join(["python", "-m", f"{NAMESPACE}.training", "--address", "auto", *train_args])


def stage_package(dest: Path) -> Path:
    """Lay the job's working_dir out in ``dest`` (components/payload.py, the builder the gate and the node agent
    use): ``ray_efa_eks/__init__.py``, this package's sources (no __pycache__) under ``ray_efa_eks/training`` and
    the efacheck and library modules it imports (:data:`EFACHECK_FILES`, :data:`COMPONENTS_FILES`) under
    ``ray_efa_eks/efacheck`` and ``ray_efa_eks/components``.

    The package is found through the import system, so an installed ``ray_efa_eks.training`` ships only its own
    files, never the site-packages around it; in the job the working_dir's ``ray_efa_eks`` (a regular package,
    ahead of anything installed) is the one imported, under the same names as here.
    """
    from ..components import payload  # stdlib only: the one builder of the code a pod runs

    try:
        return payload.write(
            payload.build({"training": None, "efacheck": EFACHECK_FILES, "components": COMPONENTS_FILES}), dest
        )
    except FileNotFoundError as e:
        raise CliError(EXIT_FAILED, f"cannot stage the job's code: {e}") from None


def set_token_mode() -> None:
    """Ray's Jobs SDK sends the token only when RAY_AUTH_MODE=token; a token in the env is enough here."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        os.environ.setdefault("RAY_AUTH_MODE", "token")


def job_exit_code(status: str, driver_exit_code: Optional[int]) -> int:
    """SUCCEEDED -> 0; otherwise the driver's own non-zero exit code, else 1."""
    if status == "SUCCEEDED":
        return EXIT_OK
    return driver_exit_code if driver_exit_code else EXIT_FAILED


@dataclass(frozen=True)
class SubmitRequest:
    """``submit``'s own options, as its parser read them (the training arguments after ``--`` travel apart)."""

    address: str = "http://127.0.0.1:8265"
    """The Jobs API (dashboard) URL."""
    pip: tuple[str, ...] = ()
    """pip packages for the job's runtime env."""
    env: tuple[str, ...] = ()
    """KEY=VALUE entries for the job's env (checked by the CLI)."""
    no_wait: bool = False
    """Return after submitting (exit 0)."""


def main_submit(sub: SubmitRequest, train: Sequence[str]) -> int:
    """Ship the training package, submit ``python -m ray_efa_eks.training --address auto <train>`` and follow the job;
    its exit code (or 0 with ``no_wait``)."""
    set_token_mode()
    why = url_problem(sub.address, "submit --address")
    if why:
        raise CliError(EXIT_USAGE, f"{why} (the Jobs API URL)")
    parts = urlsplit(sub.address)
    reach.probe(
        parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), f"the Ray Jobs API ({sub.address})"
    )
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    env: dict[str, Any] = {}
    if sub.pip:
        env["pip"] = list(sub.pip)
    if sub.env:
        env["env_vars"] = dict(kv.split("=", 1) for kv in sub.env)
    entry = submit_entrypoint(train)
    jobs = f"the Ray Jobs API at {sub.address}"
    try:
        client = bounded(f"{jobs}: the version check", lambda: JobSubmissionClient(sub.address))
        with tempfile.TemporaryDirectory(prefix="ray-efa-eks-submit-") as tmp:
            env["working_dir"] = str(stage_package(Path(tmp)))
            deadline = time.monotonic() + AGENT_WAIT_S
            while True:
                try:
                    job_id = bounded(
                        f"{jobs}: the package upload and job submission",
                        lambda: client.submit_job(entrypoint=entry, runtime_env=env),
                        UPLOAD_TIMEOUT_S,
                    )
                    break
                except RuntimeError as e:  # a head that just started has no job agent yet (HTTP 500)
                    if "No available agent" not in str(e) or time.monotonic() > deadline:
                        raise
                    time.sleep(2)
    except AuthenticationError as e:
        raise CliError(
            EXIT_UNREACHABLE, f"the Ray Jobs API at {sub.address} refused the request ({first_line(e)}); {TOKEN_HINT}"
        ) from None
    except ConnectionError as e:
        raise CliError(EXIT_UNREACHABLE, f"cannot reach the Ray Jobs API at {sub.address}: {first_line(e)}") from None
    except RuntimeError as e:  # the SDK's "Request failed with status code ..."
        raise CliError(
            EXIT_UNREACHABLE, f"the Ray Jobs API at {sub.address} did not take the job: {first_line(e)}"
        ) from None
    print(f"submitted {job_id}: {entry}", flush=True)
    if sub.no_wait:
        return EXIT_OK

    async def follow() -> None:
        async for chunk in client.tail_job_logs(job_id):
            print(chunk, end="", flush=True)

    def stream() -> None:
        try:
            asyncio.run(follow())
        except Exception as e:  # the log stream broke; the job's status still decides
            print(f"[submit] log stream ended: {first_line(e)}", file=sys.stderr, flush=True)

    logs = threading.Thread(target=stream, name="job-logs", daemon=True)  # a stuck stream cannot hold the exit
    logs.start()
    status_of = f"{jobs}: the status of {job_id}"
    try:
        info = bounded(status_of, lambda: client.get_job_info(job_id))
        while not info.status.is_terminal():
            logs.join(1.0)
            info = bounded(status_of, lambda: client.get_job_info(job_id))
    except (ConnectionError, RuntimeError) as e:
        raise CliError(
            EXIT_UNREACHABLE,
            f"{jobs} stopped answering about {job_id} ({first_line(e)}); the job "
            f"may still run: `ray job status {job_id}`",
        ) from None
    logs.join(LOG_DRAIN_S)  # the rest of the log, once the job has ended
    status = str(info.status.value if hasattr(info.status, "value") else info.status)
    code = job_exit_code(status, info.driver_exit_code)
    detail = f" ({first_line(Exception(info.message))})" if info.message and code else ""
    print(
        f"job {job_id}: {status}, exit {info.driver_exit_code if info.driver_exit_code is not None else '-'}{detail}",
        flush=True,
    )
    return code


REQUEST_TIMEOUT_S = 30.0
"""Deadline of each Jobs API request of ``submit`` (the version check, each status poll): a server that accepts the
connection and never answers (a stuck ``kubectl port-forward``) ends the command with exit 2."""
UPLOAD_TIMEOUT_S = 120.0
"""Deadline of the job submission, which uploads the training package (~100 KiB) first."""
LOG_DRAIN_S = 5.0
"""How long the end of the job's log may take to arrive once the job has ended."""


def bounded(what: str, call: Any, timeout: Optional[float] = None) -> Any:
    """``call()`` with a deadline: Ray's Jobs SDK sends its requests without one (``requests`` with no timeout,
    ray/dashboard/modules/dashboard_sdk.py ``_do_request``). Runs in a daemon thread, so a request that never ends
    cannot hold the process; CliError(2) when ``timeout`` (default :data:`REQUEST_TIMEOUT_S`) passes first."""
    limit = REQUEST_TIMEOUT_S if timeout is None else timeout
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            outcome.append((False, e))

    worker = threading.Thread(target=run, name="jobs-api", daemon=True)
    worker.start()
    worker.join(limit)
    if not outcome:
        raise CliError(
            EXIT_UNREACHABLE,
            f"{what}: no answer within {limit:g} s; is the cluster up (and `kubectl "
            "port-forward` alive)? Retry once it answers",
        )
    ok, value = outcome[0]
    if not ok:
        raise value
    return value
