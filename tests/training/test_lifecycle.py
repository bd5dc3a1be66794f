"""One lifecycle for a run: SIGINT or SIGTERM at a random (seeded) moment of a real local run ends `train` with 130
or 143, one JSON line with the resume hint, within a pod's 30 s grace, and no process of the run left.

Moments (docs/training.md "Stopping a run"): before Ray (just after the command starts), during the local cluster's
start, just after "Connected to Ray cluster", and during a checkpoint (--checkpoint-every 1, after the first
`[train]` line). Each case is one local run stopped early; the seed makes the moments and signals repeatable.
A closed stdout (`train --json | head -1`) is the same path with exit 141.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "ray-efa-eks"
GRACE_S = 30.0
"""A pod's default terminationGracePeriodSeconds."""
RNG = random.Random(49)
SIGNALS = [signal.SIGINT, signal.SIGTERM] * 2
RNG.shuffle(SIGNALS)  # each signal twice, at moments the seed picks
MOMENTS = [
    (moment, signum, RNG.uniform(0.0, 1.0))
    for moment, signum in zip(("before-ray", "ray-starting", "just-connected", "checkpoint"), SIGNALS)
]
MARKER = {
    "before-ray": None,
    "ray-starting": None,
    "just-connected": "Connected to Ray cluster",
    "checkpoint": "[train] step",
}
START_DELAY = {"before-ray": 1.0, "ray-starting": 5.0}
"""Seconds after the command starts (plus the jitter) for the moments no line marks."""


def leftovers(tag: str) -> list[str]:
    """Processes whose environment carries this run's tag (every process of the run inherits it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if tag.encode() in (entry / "environ").read_bytes():
                found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()[:120]!r}")
        except OSError:
            pass
    return found


def start(tmp_path: Path, tag: str, *extra: str, stdout=subprocess.PIPE) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0", "LIFECYCLE_TEST_TAG": tag}
    return subprocess.Popen(
        [
            str(BIN),
            "train",
            "--json",
            "--steps",
            "2000",
            "--report-every",
            "1",
            "--storage-path",
            str(tmp_path),
            "--name",
            "life",
            *extra,
        ],
        cwd=ROOT,
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


def watch(stream, lines: list[str], seen: threading.Event, marker: str | None) -> None:
    for line in stream:
        lines.append(line)
        if marker and marker in line:
            seen.set()


@pytest.mark.parametrize("moment,signum,jitter", MOMENTS, ids=[f"{m}-{s.name}" for m, s, _ in MOMENTS])
def test_signal_at_any_moment(tmp_path, moment, signum, jitter):
    tag = uuid.uuid4().hex
    extra = ("--checkpoint-every", "1") if moment == "checkpoint" else ()
    proc = start(tmp_path, tag, *extra)
    out: list[str] = []
    err: list[str] = []
    seen = threading.Event()
    marker = MARKER[moment]
    readers = [
        threading.Thread(target=watch, args=(proc.stdout, out, seen, marker), daemon=True),
        threading.Thread(target=watch, args=(proc.stderr, err, seen, marker), daemon=True),
    ]
    for r in readers:
        r.start()
    try:
        if marker:
            assert seen.wait(300), f"no {marker!r} line:\n{''.join(err)[-3000:]}"
        else:
            time.sleep(START_DELAY[moment])
        time.sleep(jitter)
        sent = time.monotonic()
        proc.send_signal(signum)
        proc.wait(timeout=GRACE_S + 30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for r in readers:
        r.join(5)
    text = "".join(err)
    want = 143 if signum == signal.SIGTERM else 130
    assert proc.returncode == want, (proc.returncode, "".join(out)[-2000:], text[-3000:])
    assert took < GRACE_S, f"took {took:.1f}s after the signal"
    last = json.loads(out[-1])
    assert last["exit_code"] == want and "--name life" in last["error"] and "resume" in last["error"], last
    assert "SIGTERM received" not in text and "internal error" not in text, text[-3000:]
    time.sleep(1.0)
    assert not leftovers(tag), leftovers(tag)


def test_closed_stdout_stops_the_run_with_141(tmp_path):
    """`train --json | head -1`: the reader is gone after one line; the run stops early (not at --steps), 141."""
    tag = uuid.uuid4().hex
    r, w = os.pipe()
    proc = start(tmp_path, tag, "--checkpoint-every", "1000", stdout=w)
    os.close(w)
    with os.fdopen(r, "rb") as reader:
        first = reader.readline()  # `head -1`
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert first, err[-3000:]
    assert proc.returncode == 141, (proc.returncode, err[-3000:])
    assert time.monotonic() - t0 < 200, "ran on after its reader left"
    own = [ln for ln in err.splitlines() if not ln.lstrip("\x1b[0123456789m").startswith("(")]  # Ray's actors aside
    assert not any("internal error" in ln or ln.startswith("Traceback") for ln in own), err[-3000:]
    time.sleep(1.0)
    assert not leftovers(tag), leftovers(tag)


STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a run that does not stop when asked, like a wedged Ray teardown
subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                  "os = __import__('os'); os.setsid(); time.sleep(300)"])  # a grandchild in its own session
print("started", flush=True)
time.sleep(300)
"""


def test_a_run_that_ignores_the_stop_is_killed_with_all_it_started(monkeypatch, capsys):
    """The run's process ignores SIGINT and left a grandchild in another session: after the grace, both are killed
    and reaped, and the command still answers 143 with the hint (GRACE_S shortened from 20 s for the test)."""
    from ray_efa_eks.training import lifecycle

    monkeypatch.setattr(lifecycle, "GRACE_S", 1.0)
    tag = uuid.uuid4().hex
    monkeypatch.setenv("LIFECYCLE_TEST_TAG", tag)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    t0 = time.monotonic()
    code = lifecycle.supervise(
        [sys.executable, "-c", STUBBORN], name="stub", resume="rerun with --name stub", as_json=True
    )
    took = time.monotonic() - t0
    out = capsys.readouterr().out
    assert code == 143 and took < 3.0 + 1.0 + lifecycle.KILL_WAIT_S + 2, (code, took)
    assert json.loads(out.strip().splitlines()[-1])["exit_code"] == 143
    time.sleep(0.5)
    assert not leftovers(tag), leftovers(tag)


def test_a_run_that_lost_its_name_is_stopped():
    from ray_efa_eks.training import lifecycle

    t0 = time.monotonic()
    code = lifecycle.supervise(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        name="x",
        resume="",
        as_json=False,
        tick=lambda: (75, "lost its name"),
        tick_every=0.2,
    )
    assert code == 75 and time.monotonic() - t0 < 15
