"""Wall time of the offline plan of a 64-GPU-node stack (gpuNodeCount=64): target < 5 s.

Why: the plan runs on every pull request and on reviewers' laptops; it must stay a
quick look, not a wait. Measures the whole command a reviewer runs (interpreter start,
imports, the mock run of the real program, rules, rendering) and, separately, the
in-process plan once the imports are warm.

    python benchmarks/plan_speed.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TARGET_S = 5.0
CONFIG = ["--config", "gpuNodeCount=64"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", action="store_true", help="last stdout line is a JSON summary")
    args = p.parse_args()
    cli = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "ray_efa_eks.tools.plan", *CONFIG], cwd=ROOT, capture_output=True, text=True)
        cli.append(time.perf_counter() - t0)
        if proc.returncode != 0 or "64 x g6.12xlarge" not in proc.stdout:
            print(proc.stdout, proc.stderr, file=sys.stderr)
            return 2
    from ray_efa_eks.tools.plan import plan_tree

    os.chdir(ROOT)  # the plan works on ./__main__.py, like pulumi
    plan_tree(overrides={"ray-efa-eks:gpuNodeCount": "64"})  # warm the imports
    warm = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        plan = plan_tree(overrides={"ray-efa-eks:gpuNodeCount": "64"})
        warm.append(time.perf_counter() - t0)
    assert plan.settings["nodeGroups"]["gpu-mng"]["nodes"] == 64
    best = min(cli)
    print(f"offline plan, gpuNodeCount=64 ({plan.settings['estimatedHourlyUsd']:.2f} USD/hour), {os.cpu_count()} CPUs:")
    print(f"  command (ray-efa-eks plan): best {best:.2f} s, median {statistics.median(cli):.2f} s")
    print(f"  in-process plan, imports warm:       best {min(warm):.2f} s, median {statistics.median(warm):.2f} s")
    print(f"  target < {TARGET_S:.0f} s: {'met' if best < TARGET_S else 'MISSED'}")
    if args.json:
        print(json.dumps({"command_best_s": best, "command_median_s": statistics.median(cli),
                          "warm_best_s": min(warm), "resources": len(plan.resources)}))
    return 0 if best < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
