"""Ctrl-C in the middle of a real local training run: `[train]` progress first, then exit 130 and a JSON line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "ray-efa-eks"
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


def test_ctrl_c_mid_training_prints_progress_then_exits_130(tmp_path):
    """docs/training.md: `train` prints `[train]` progress while it runs; Ctrl-C ends it with 130 and, with --json, a last
    stdout line {"error": "interrupted ...", "exit_code": 130} (tools/command.py documents 130 for every command)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(
        [
            str(BIN),
            "train",
            "--json",
            "--steps",
            "2000",
            "--report-every",
            "2",
            "--checkpoint-every",
            "1000",
            "--storage-path",
            str(tmp_path),
            "--name",
            "ctrl-c",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    progress: list[str] = []
    deadline = time.monotonic() + 400
    try:
        for line in proc.stdout:  # stdout: the driver's own lines and the controller's (streamed) prints
            if "[train] step" in line:
                progress.append(line)
                if len(progress) >= 2:
                    break
            if time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(progress) >= 2, f"no [train] progress during the run:\n{err[-3000:]}"
    # piped: the [train] lines are plain, without Ray's colours or (TrainController pid=...) prefix
    assert all(p.startswith("[train] step") and "\x1b[" not in p for p in progress), progress
    assert "Failed to query Ray Train Controller actor state" not in out + err
    assert proc.returncode == 130, (proc.returncode, out[-2000:], err[-3000:])
    last = json.loads(out.strip().splitlines()[-1])
    assert last["exit_code"] == 130 and "interrupted" in last["error"] and "--name ctrl-c" in last["error"], last
    assert "error: interrupted" in err
    own = [ln for ln in err.splitlines() if not ln.startswith("\x1b[36m(")]  # Ray's actors' own output aside
    assert not TRACEBACK.search("\n".join(own)), err[-3000:]
