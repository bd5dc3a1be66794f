"""The gate Job's shell script (components/addons/efa_check.py check_script) with a stand-in ``ray`` CLI on PATH.

Fast and deterministic: the stand-in records every call and ``ray job logs --follow`` blocks as a running check does,
so the script's signal handling is exercised exactly as bash runs it in the Job's pod (bash is PID 1 there and
gets the kubelet's SIGTERM). The same script against a real local Ray cluster: tests/efacheck/test_gate_rehearsal.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ray_efa_eks.components.addons.efa_check import TERMINATION_GRACE_S, Deadlines, check_args, check_script
from ray_efa_eks.components.nodes.instances import CATALOGUE
from ray_efa_eks.efacheck import efa_check

FAKE_RAY = """#!/bin/bash
echo "ray $*" >> "$CALLS"
case "$1 $2" in
  "job list") exit 0;;
  "job submit") echo "Job '${6}' submitted successfully"; exit 0;;
  "job logs") echo "[efa_check] waiting for the declared topology"; exec sleep 300;;
  "job stop") exit 0;;
  "job status") echo "Job '$4' succeeded"; exit 0;;
esac
exit 1
"""
FAKE_PYTHON = """#!/bin/bash
echo "python $3 $4" >> "$CALLS"
"""
"""Records ``python -m ray_efa_eks.efacheck.gate_steps STEP ARG`` as ``python STEP ARG``."""


@pytest.fixture
def fake_path(tmp_path: Path) -> dict[str, str]:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, text in (("ray", FAKE_RAY), ("python", FAKE_PYTHON)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "CALLS": str(tmp_path / "calls")}


def _calls(env: dict[str, str]) -> list[str]:
    p = Path(env["CALLS"])
    return p.read_text().splitlines() if p.exists() else []


def test_sigterm_mid_check_stops_the_ray_job_then_exits_143(fake_path):
    script = check_script("http://head:8265", check_args(CATALOGUE["g6.12xlarge"], 2, Deadlines()), Deadlines())
    p = subprocess.Popen(
        ["bash", "-c", script],
        env=fake_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        end = time.monotonic() + 30
        while not any(c.startswith("ray job logs") for c in _calls(fake_path)):
            assert time.monotonic() < end and p.poll() is None, _calls(fake_path)
            time.sleep(0.1)
        time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)  # the Job's pod deleted: replacement, pulumi destroy, activeDeadlineSeconds
        out, _ = p.communicate(timeout=20)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # whatever the script left (a broken trap leaves the follower)
        except ProcessLookupError:
            pass
    assert p.returncode == 143, out
    assert time.monotonic() - t0 < TERMINATION_GRACE_S / 4, "the trap must not wait for the followed log to end"
    calls = _calls(fake_path)
    submitted = next(c for c in calls if c.startswith("ray job submit")).split()[6]
    assert submitted.startswith(efa_check.CHECK_JOB_PREFIX)
    assert f"ray job stop --address http://head:8265 {submitted}" in calls, calls
    assert '"stage": "stopped"' in out and f"stopping EFA check job {submitted}" in out
    # earlier check jobs are stopped before this one is submitted
    assert calls.index("python stop-earlier http://head:8265") < calls.index(
        next(c for c in calls if c.startswith("ray job submit"))
    )


def test_the_pod_leaves_the_trap_time_to_stop_the_job():
    from ray_efa_eks.tools.mockrun import run_program

    pod = run_program().one("kubernetes:batch/v1:Job")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == TERMINATION_GRACE_S >= 30
    script = pod["containers"][0]["command"][2]
    assert "trap on_term TERM INT" in script and 'ray job stop --address "$addr" "$id"' in script


def test_the_stopper_and_the_holders_agree_on_the_check_job_prefix():
    from ray_efa_eks.components.addons import efa_check as job

    assert f'"{efa_check.CHECK_JOB_PREFIX}' in job.check_script("http://h:8265", [])  # id="efa-check-..."
    assert "python -m ray_efa_eks.efacheck.gate_steps stop-earlier" in job.check_script("http://h:8265", [])
    from ray_efa_eks.efacheck import gate_steps

    assert gate_steps.CHECK_JOB_PREFIX == efa_check.CHECK_JOB_PREFIX  # what stop-earlier stops
