"""The project's performance targets, measured side by side in one run.

    python benchmarks/run_all.py [--quick] [--only NAME ...]

Runs each benchmark script in its own process, one after the other (so they do not compete for the 2 cores),
reads the JSON summary each prints last, and prints one table: target, goal, measured, met or not, with each
script's wall time and CPU seconds (its process and the children it reaped: on a shared machine the wall clock
also measures the neighbours). Exit 1 if a target is missed or a script fails, 0 otherwise; 64 on bad arguments.
``--quick`` is a smoke run (fewer and shorter repeats): its figures are not ones to quote.

| target                                                   | script                |
|----------------------------------------------------------|-----------------------|
| local main job (`ray-efa-eks train --json`) < 45 s        | (timed here)          |
| Ray Train steady tokens/s >= 0.97 x bare FSDP loop        | train_overhead.py     |
| per-run fabric capture costs < 1% of tokens/s             | fabric_overhead.py    |
| NCCL log reading >= 2x a naive regex, same run (512 ranks) | nccl_log_speed.py     |
| EFA verdict right on every shared NCCL log, line cited    | nccl_log_verdicts.py  |
| offline plan of a 64-GPU-node stack < 3 s                 | plan_speed.py         |
| the gate's time from Job start to verdict (rehearsal)     | gate_latency.py       |
| cold-start parts measurable here (Ray worker join, proof) | worker_start.py       |

Ratios are medians of alternating pairs, with the pairs' spread (min..max) beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_JOB_S = 45.0
TRAIN_RATIO = 0.97
FABRIC_RATIO = 0.99
NCCL_LOG_RATIO = 2.0
PLAN_S = 3.0

Row = tuple[str, str, str, bool | None]
"""(target, goal, measured, met); met None = a figure with no target, reported only."""


def _spread(xs: list[float]) -> str:
    return f"{min(xs):.3f}..{max(xs):.3f}" if xs else "?"


def _train_job(j: dict, wall: float) -> list[Row]:
    ok = wall < TRAIN_JOB_S and j["nodes"] == 2 and j["loss_last"] < j["loss_first"]
    fabric = (j.get("fabric") or {}).get("verdict", "off")
    return [
        (
            "local main job, start to finish",
            f"< {TRAIN_JOB_S:.0f} s",
            f"{wall:.1f} s (nodes={j['nodes']}, loss {j['loss_first']:.2f} -> {j['loss_last']:.2f}, fabric {fabric})",
            ok,
        )
    ]


def _train_overhead(j: dict, wall: float) -> list[Row]:
    med = j.get("pair_median", j["ratio"])
    return [
        (
            "Ray Train / bare FSDP tokens/s",
            f">= {TRAIN_RATIO}",
            f"{med:.3f} median of {len(j['pair_ratios'])} pairs ({_spread(j['pair_ratios'])}; medians "
            f"{j['ray_tokens_per_s']:.0f} / {j['bare_tokens_per_s']:.0f} = {j['ratio']:.3f})",
            med >= TRAIN_RATIO,
        )
    ]


def _fabric_overhead(j: dict, wall: float) -> list[Row]:
    import statistics

    steady, e2e = j["pair_ratios_steady"], j["pair_ratios_e2e"]
    med = statistics.median(steady)
    return [
        (
            "fabric capture on/off, steady tokens/s",
            f">= {FABRIC_RATIO}",
            f"{med:.3f} median of {len(steady)} pairs ({_spread(steady)}); end-to-end "
            f"{statistics.median(e2e):.3f} ({_spread(e2e)})",
            med >= FABRIC_RATIO,
        )
    ]


def _nccl_log_speed(j: dict, wall: float) -> list[Row]:
    med, pairs = j["pair_median"], j["pair_ratios"]
    cpu = j.get("pair_ratios_cpu") or []
    return [
        (
            "NCCL log reading / naive regex, 512 ranks",
            f">= {NCCL_LOG_RATIO:.0f}x, same run",
            f"{med:.2f}x median of {len(pairs)} pairs ({_spread(pairs)}; CPU time "
            f"{j.get('pair_median_cpu', float('nan')):.2f}x, {_spread(cpu)}); {j['nccl_log_mb_s']:.0f} vs "
            f"{j['naive_mb_s']:.0f} MB/s on {j['mb']} MB",
            med >= NCCL_LOG_RATIO,
        )
    ]


def _nccl_log_verdicts(j: dict, wall: float) -> list[Row]:
    return [
        (
            "EFA verdict on the published NCCL logs",
            "all right",
            f"{j['right']} of {j['total']} as their README concludes, deciding line cited",
            j["right"] == j["total"] > 0,
        )
    ]


def _plan_speed(j: dict, wall: float) -> list[Row]:
    med = j.get("command_median_s", j["command_best_s"])
    cpu = j.get("command_cpu_median_s")
    return [
        (
            "offline plan, gpuNodeCount=64",
            f"< {PLAN_S:.0f} s",
            f"{med:.2f} s median whole command ({j['command_best_s']:.2f}..{j.get('command_max_s', med):.2f}"
            + (f", CPU {cpu:.2f} s" if cpu is not None else "")
            + f"; {j['warm_best_s']:.2f} s warm, "
            f"{j['resources']} resources)",
            med < PLAN_S,
        )
    ]


def _gate_latency(j: dict, wall: float) -> list[Row]:
    st = j["stages_median_s"]
    return [
        (
            "gate: Job start -> verdict (local rehearsal)",
            "reported",
            f"{j['total_median_s']:.1f} s median of {j['runs']} ({j['total_min_s']:.1f}..{j['total_max_s']:.1f}; "
            f"head {st['head']:.1f}, submit {st['submit']:.1f}, driver {st['driver']:.1f}, check "
            f"{st['check']:.1f}; exit {j['exit_median_s']:.1f}; CPU {j['cpu_median_s']:.1f} s; "
            f"{j['backend']}: {j['verdict']})",
            None,
        )
    ]


def _worker_start(j: dict, wall: float) -> list[Row]:
    join, cli, proof = j["join"], j["cli"], j["proof"]
    return [
        (
            "cold start: a Ray worker joins a running head (local)",
            "reported",
            f"{join['median_s']:.1f} s median of {j['runs']} ({join['min_s']:.1f}..{join['max_s']:.1f}); ray CLI "
            f"start {cli['median_s']:.1f} s; node proof on 32 EFA devices {proof['median_s'] * 1000:.0f} ms",
            None,
        )
    ]


@dataclass(frozen=True)
class Bench:
    """One benchmark: the command run_all starts (from the repo root) and how its JSON becomes table rows."""

    name: str
    script: str | None
    """File in benchmarks/ (None: a command timed here)."""
    args: tuple[str, ...]
    quick_args: tuple[str, ...]
    timeout_s: int
    rows: Callable[[dict, float], list[Row]]
    missed_exit: int | None = None
    """The script's exit code for "ran, a target missed" (its summary still counts); any other non-zero fails."""


BENCHES: tuple[Bench, ...] = (
    Bench(
        "train_job",
        None,
        ("-m", "ray_efa_eks.tools.command", "train", "--storage-path", "{tmp}"),
        ("-m", "ray_efa_eks.tools.command", "train", "--storage-path", "{tmp}"),
        600,
        _train_job,
    ),
    Bench(
        "train_overhead",
        "train_overhead.py",
        ("--repeats", "5"),
        ("--repeats", "1", "--steps", "40", "--warmup", "20"),
        2400,
        _train_overhead,
    ),
    Bench(
        "fabric_overhead",
        "fabric_overhead.py",
        ("--repeats", "5"),
        ("--repeats", "1", "--steps", "40", "--warmup", "20"),
        2400,
        _fabric_overhead,
    ),
    Bench(
        "nccl_log_speed",
        "nccl_log_speed.py",
        ("--repeats", "5"),
        ("--repeats", "1"),
        900,
        _nccl_log_speed,
        missed_exit=1,
    ),
    Bench("nccl_log_verdicts", "nccl_log_verdicts.py", (), (), 600, _nccl_log_verdicts, missed_exit=1),
    Bench("plan_speed", "plan_speed.py", ("--runs", "5"), ("--runs", "1"), 600, _plan_speed, missed_exit=1),
    Bench("gate_latency", "gate_latency.py", ("--runs", "3"), ("--runs", "1"), 1800, _gate_latency),
    Bench("worker_start", "worker_start.py", ("--runs", "3"), ("--runs", "1"), 600, _worker_start),
)
"""Every script in benchmarks/ (tests/test_benchmarks.py checks none is left out), in the order they run."""


def run(b: Bench, quick: bool) -> tuple[list[Row], float, float]:
    """Run one benchmark; (rows, wall s, CPU s). A script that fails is a missed row saying why."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [x.format(tmp=tmp) for x in (b.quick_args if quick else b.args)]
        cmd = [sys.executable, *((os.path.join(HERE, b.script),) if b.script else ()), *args, "--json"]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=b.timeout_s)
        except subprocess.TimeoutExpired:
            return (
                [(b.name, "finishes", f"killed after {b.timeout_s} s", False)],
                time.perf_counter() - t0,
                float("nan"),
            )
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    lines = proc.stdout.strip().splitlines()
    try:
        summary = json.loads(lines[-1]) if lines else None
    except ValueError:
        summary = None
    rows, why = None, None
    if proc.returncode not in (0, b.missed_exit):
        why = f"exited {proc.returncode}"
    elif not isinstance(summary, dict):
        why = "no JSON summary on its last line"
    else:
        try:
            rows = b.rows(summary, wall)
        except (KeyError, TypeError, ValueError) as e:
            why = f"unreadable summary ({type(e).__name__}: {e})"
    if rows is None:
        sys.stderr.write(f"--- {b.name}: {' '.join(cmd)}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}\n")
        return [(b.name, "finishes", f"{why}; its output is above", False)], wall, cpu
    return rows, wall, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter repeats (a smoke run, not figures to quote)")
    ap.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        choices=[b.name for b in BENCHES],
        help="run only these: " + ", ".join(b.name for b in BENCHES),
    )
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:
        return 64 if e.code == 2 else int(e.code or 0)
    table: list[tuple[Row, float, float]] = []
    for b in BENCHES:
        if a.only and b.name not in a.only:
            continue
        print(f"[run_all] {b.name} ...", flush=True)
        rows, wall, cpu = run(b, a.quick)
        for i, row in enumerate(rows):
            table.append((row, wall if i == 0 else float("nan"), cpu if i == 0 else float("nan")))
        print(f"[run_all] {b.name}: {wall:.0f} s, CPU {cpu:.0f} s", flush=True)
    load = os.getloadavg()
    print(
        f"\n{os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min), "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}{', --quick (smoke run)' if a.quick else ''}"
    )
    w = max(len(r[0][0]) for r in table)
    g = max(len(r[0][1]) for r in table)
    print(f"{'target':<{w}}  {'goal':<{g}}  {'met':<6}  {'wall s':>6}  {'CPU s':>6}  measured")
    for (name, goal, got, ok), wall, cpu in table:
        met = "-" if ok is None else "met" if ok else "MISSED"
        print(f"{name:<{w}}  {goal:<{g}}  {met:<6}  {wall:6.0f}  {cpu:6.0f}  {got}".replace("   nan", "      "))
    return 0 if all(r[0][3] is not False for r in table) else 1


if __name__ == "__main__":
    sys.exit(main())
