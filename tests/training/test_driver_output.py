"""The driver's copy of the cluster's output through Ray's real ``print_worker_logs`` (no cluster): piped, a
``[train]`` line has no ANSI colour and no ``(TrainController pid=...)`` prefix; Ray Train's "Failed to query Ray Train
Controller actor state" warnings are dropped; other lines keep Ray's prefix."""

from __future__ import annotations

import io

from ray._private import worker

from ray_efa_eks.training.driver_output import filtered

RAY_PRINT = getattr(worker.print_worker_logs, "__wrapped__", worker.print_worker_logs)
"""Ray's own function, also when an in-process `train` earlier in the session installed the filter (install())."""

DATA = {
    "pid": 4242,
    "ip": "10.0.0.9",
    "localhost": "10.0.0.1",
    "actor_name": "TrainController",
    "lines": [
        "[train] step 5/30 loss 2.1 global_tok/s 900 world 2",
        "Failed to query Ray Train Controller actor state. State API may be temporarily unavailable.",
        "some other line",
    ],
}


def test_piped_train_lines_are_plain_and_noise_is_dropped(monkeypatch):
    monkeypatch.setenv("RAY_COLOR_PREFIX", "0")
    out = io.StringIO()
    filtered(RAY_PRINT, piped=True)(dict(DATA), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[train] step 5/30 loss 2.1 global_tok/s 900 world 2"
    assert lines[1] == "(TrainController pid=4242, ip=10.0.0.9) some other line"
    assert len(lines) == 2 and "\x1b[" not in out.getvalue()


def test_on_a_terminal_ray_prefix_stays_but_noise_goes(monkeypatch):
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    out = io.StringIO()
    filtered(RAY_PRINT, piped=False)(dict(DATA), out)
    text = out.getvalue()
    assert "(TrainController pid=4242, ip=10.0.0.9)" in text and "[train] step 5/30" in text
    assert "Failed to query" not in text


def test_unfiltered_ray_prints_both(monkeypatch):
    """The test can fail: Ray itself prefixes the [train] line and prints the warning."""
    monkeypatch.setenv("RAY_COLOR_PREFIX", "0")
    out = io.StringIO()
    RAY_PRINT(dict(DATA), out)
    assert "(TrainController pid=4242, ip=10.0.0.9) [train]" in out.getvalue() and "Failed to query" in out.getvalue()
