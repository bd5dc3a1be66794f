"""benchmarks/: every script answers --help, and run_all runs every script there (no timing here: the figures
belong to the scripts, run by hand or by run_all)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import runpy
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


def _run_all():
    spec = importlib.util.spec_from_file_location("bench_run_all", BENCH / "run_all.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--help`` prints usage and exits 0 without measuring anything (run in-process: one import of torch/ray)."""
    monkeypatch.setattr(sys, "argv", [script, "--help"])
    monkeypatch.syspath_prepend(str(BENCH))  # fabric_overhead imports its sibling train_overhead
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        runpy.run_path(str(BENCH / script), run_name="__main__")
    assert e.value.code in (0, None), out.getvalue()
    assert out.getvalue().startswith("usage:"), out.getvalue()
    if script != "run_all.py":  # run_all reads each script's last-line JSON summary
        assert "--json" in out.getvalue(), out.getvalue()


def test_run_all_knows_every_script() -> None:
    ra = _run_all()
    known = {b.script for b in ra.BENCHES if b.script}
    assert known == set(SCRIPTS) - {"run_all.py"}, "add the new script to run_all.BENCHES (or remove the stale one)"
    assert len({b.name for b in ra.BENCHES}) == len(ra.BENCHES)


def test_run_all_quick_args_are_accepted_by_each_script() -> None:
    """--quick's and the full run's arguments parse (each script's parser, with --help appended, exits 0)."""
    ra = _run_all()
    for b in ra.BENCHES:
        if not b.script:
            continue
        for args in (b.args, b.quick_args):
            argv = [b.script, *args, "--json", "--help"]
            out = io.StringIO()
            with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
                old, sys.argv = sys.argv, argv
                sys.path.insert(0, str(BENCH))
                try:
                    runpy.run_path(str(BENCH / b.script), run_name="__main__")
                finally:
                    sys.argv = old
                    sys.path.remove(str(BENCH))
            assert e.value.code in (0, None), (b.name, args, out.getvalue())
            if "--steps" in args:  # the training benchmarks refuse steps that are not whole report windows
                steps, warmup = int(args[args.index("--steps") + 1]), int(args[args.index("--warmup") + 1])
                assert steps % warmup == 0 and steps >= 2 * warmup, (b.name, args)


def test_run_all_table_rows_from_summaries() -> None:
    """Each script's JSON summary (the shape it prints) becomes a row judged against the charter's target."""
    ra = _run_all()
    rows = {b.name: b.rows for b in ra.BENCHES}
    job = {"nodes": 2, "loss_first": 7.0, "loss_last": 4.5}
    assert rows["train_job"](job, 44.0)[0][3] is True and rows["train_job"](job, 46.0)[0][3] is False
    tr = {
        "bare_tokens_per_s": 100.0,
        "ray_tokens_per_s": 99.0,
        "ratio": 0.99,
        "pair_median": 0.965,
        "pair_ratios": [0.9, 0.965, 1.0],
    }
    assert rows["train_overhead"](tr, 1)[0][3] is False  # judged on the pairs' median, not the medians' ratio
    fab = {"pair_ratios_steady": [0.98, 0.995, 1.01], "pair_ratios_e2e": [0.9, 0.95, 0.97]}
    row = rows["fabric_overhead"](fab, 1)[0]
    assert row[3] is True and "0.995" in row[2] and "0.980..1.010" in row[2]
    nl = {
        "mb": 60.9,
        "nccl_log_mb_s": 300.0,
        "naive_mb_s": 100.0,
        "pair_ratios": [1.5, 1.9, 3.5],
        "pair_median": 1.9,
        "pair_ratios_cpu": [2.1, 2.2, 2.3],
        "pair_median_cpu": 2.2,
    }
    assert rows["nccl_log_speed"](nl, 1)[0][3] is False  # the pairs' median in the same run, not MB/s
    assert rows["nccl_log_speed"]({**nl, "pair_median": 2.0}, 1)[0][3] is True
    assert rows["nccl_log_verdicts"]({"right": 10, "total": 10}, 1)[0][3] is True
    assert rows["nccl_log_verdicts"]({"right": 0, "total": 0}, 1)[0][3] is False
    pl = {
        "command_best_s": 2.5,
        "command_median_s": 3.1,
        "command_max_s": 4.0,
        "command_cpu_median_s": 2.0,
        "warm_best_s": 0.3,
        "resources": 64,
    }
    assert rows["plan_speed"](pl, 1)[0][3] is False  # the median counts
    gl = {
        "runs": 3,
        "verdict": "undetermined",
        "backend": "gloo",
        "total_median_s": 20.0,
        "total_min_s": 18.0,
        "total_max_s": 30.0,
        "exit_median_s": 28.0,
        "cpu_median_s": 8.0,
        "stages_median_s": {"head": 1.0, "submit": 2.0, "driver": 3.0, "check": 14.0, "tail": 8.0},
    }
    assert rows["gate_latency"](gl, 1)[0][3] is None  # reported, no target set


def test_gate_latency_reads_stages_from_the_output() -> None:
    """The driver's own 'Connected to Ray cluster' timestamp splits submit->verdict; arrival time otherwise."""
    import time

    spec = importlib.util.spec_from_file_location("bench_gate", BENCH / "gate_latency.py")
    gl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gl)
    base = time.mktime(time.strptime("2026-12-04 17:29:30", "%Y-%m-%d %H:%M:%S"))
    line = "2026-12-04 17:29:36,343\tINFO worker.py:2015 -- Connected to Ray cluster. View the dashboard at x\n"
    lines = [(base + 1, "Job submitted\n"), (base + 9, line), (base + 20, '  "verdict": "undetermined",\n')]
    assert gl.driver_connected(lines, base + 2, base + 20) == pytest.approx(base + 6.343, abs=0.01)
    assert gl.driver_connected(lines[:1] + lines[2:], base + 2, base + 20) == base + 2
    out = 'x\n{\n  "verdict": "undetermined",\n  "code": 2\n}\nEFA check failed (exit 2)\n'
    assert gl.verdict_of(out) == {"verdict": "undetermined", "code": 2} and gl.verdict_of("no json") is None
