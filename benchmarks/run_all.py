"""The project's performance targets, measured side by side in one run.

    python benchmarks/run_all.py [--quick]

Runs each benchmark script in its own process, one after the other (so they do
not compete for the 2 cores), reads the JSON summary each prints last, and
prints one table: target, measured, met or not. Exit 1 if a target is missed.

| target                                       | script                 |
|----------------------------------------------|------------------------|
| Ray Train tokens/s >= 0.97 x bare FSDP loop  | train_overhead.py      |
| local main job (ray-efa-eks train) < 90 s   | (timed here)           |
| NCCL log reading >= 100 MB/s, 512 ranks      | nccl_log_speed.py      |
| EFA verdict right on every shared NCCL log   | nccl_log_verdicts.py   |
| offline plan of a 64-GPU-node stack < 5 s    | plan_speed.py          |
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args: list[str], timeout: int) -> tuple[dict, float]:
    """Run a command from the repo root; return its last-line JSON and wall seconds."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-4000:])
        raise SystemExit(f"{' '.join(args)} exited {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run, not figures to quote)")
    a = ap.parse_args()
    repeats = "2" if a.quick else "5"
    rows = []

    with tempfile.TemporaryDirectory() as tmp:
        job, job_wall = _run(["-m", "ray_efa_eks.training", "--json", "--storage-path", tmp], timeout=600)
    rows.append(("local main job, start to finish", "< 90 s", f"{job_wall:.1f} s "
                 f"(nodes={job['nodes']}, loss {job['loss_first']:.2f} -> {job['loss_last']:.2f})",
                 job_wall < 90 and job["nodes"] == 2 and job["loss_last"] < job["loss_first"]))

    tr, _ = _run(["benchmarks/train_overhead.py", "--json", "--repeats", repeats], timeout=1800)
    rows.append(("Ray Train / bare FSDP tokens/s", ">= 0.97",
                 f"{tr['ratio']:.3f} ({tr['ray_tokens_per_s']:.0f} / {tr['bare_tokens_per_s']:.0f}; "
                 f"pairs {tr['pair_ratios']})", tr["ratio"] >= 0.97))

    nl, _ = _run(["benchmarks/nccl_log_speed.py", "--json"], timeout=600)
    rows.append(("NCCL log reading, 512 ranks", ">= 100 MB/s",
                 f"{nl['nccl_log_mb_s']:.0f} MB/s on {nl['mb']} MB (naive regex {nl['naive_mb_s']:.0f} MB/s)",
                 nl["nccl_log_mb_s"] >= 100))

    nv, _ = _run(["benchmarks/nccl_log_verdicts.py", "--json"], timeout=600)
    rows.append(("EFA verdict on the published NCCL logs", "all right", f"{nv['right']} of {nv['total']} "
                 "as their README concludes, deciding line cited", nv["right"] == nv["total"] > 0))

    pl, _ = _run(["benchmarks/plan_speed.py", "--json"], timeout=600)
    rows.append(("offline plan, gpuNodeCount=64", "< 5 s",
                 f"{pl['command_best_s']:.2f} s whole command ({pl['warm_best_s']:.2f} s warm, "
                 f"{pl['resources']} resources)", pl["command_best_s"] < 5))

    print(f"\n{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M')}")
    w = max(len(r[0]) for r in rows)
    for name, target, got, ok in rows:
        print(f"{name:<{w}}  {target:<12}  {'met   ' if ok else 'MISSED'}  {got}")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
