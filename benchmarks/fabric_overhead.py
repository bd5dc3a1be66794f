"""Cost of the per-run fabric capture (training/fabric.py) on the local run: tokens/s with it on vs off.

The capture adds, per attempt: the capture env (NCCL runs only), one all-reduce of one element before the model
exists, a gather of every rank's NCCL log and EFA counters to rank 0 with the verdict at start and at the end, and
rank 0's ``[fabric]`` line. ``train_func``'s steady tokens/s starts after the first report, so it cannot see the
start-up probe; the end-to-end figure (every token of the run / ``fit()`` wall time, start-up and teardown
included) does. Both are printed, and, since both are at the mercy of a shared machine's noise, the capture's
own time: rank 0's seconds in it (``fabric.capture_s``: probe set-up, the judgement after the first all-reduce, and
the final judgement) as a share of the run's wall time, which no other process can inflate by much.

Same pattern as ``train_overhead.py``: one local cluster (0-CPU head + 2 one-CPU nodes) stays up throughout, runs
with the capture on and off alternate in pairs (which one goes first alternates too), each after the CPU has
settled, and the medians are compared, since other processes on a shared machine make single runs noisy.

Limit: the local run is CPU/gloo, where the verdict is ``not-nccl`` and NCCL logs nothing; NCCL_DEBUG=INFO with
NCCL_DEBUG_SUBSYS=INIT,NET writes only at communicator creation and connection set-up, so a GPU run adds a few
file writes at start-up, not per step (not measured here: no GPU on this machine).

Run: python benchmarks/fabric_overhead.py [--steps 120 --warmup 20 --repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from train_overhead import settle  # noqa: E402  (same directory)


def one_run(
    fabric_on: bool, steps: int, warmup: int, batch: int, storage: str, name: str
) -> tuple[float, float, float, float]:
    """(steady global tokens/s, end-to-end tokens/s, fit wall s, rank 0's seconds in the capture) of one
    TorchTrainer run on the running local cluster."""
    from ray_efa_eks.training.model import get_config
    from ray_efa_eks.training.trainer import build_trainer

    cfg = {
        "steps": steps,
        "batch_size": batch,
        "report_every": warmup,
        "checkpoint_every": 0,
        "fabric": fabric_on,
        "fabric_dir": os.path.join(storage, name, "nccl-logs"),
    }
    t0 = time.perf_counter()
    res = build_trainer(num_workers=2, storage_path=storage, name=name, train_config=cfg).fit()
    wall = time.perf_counter() - t0
    m = res.return_value
    assert (m.get("fabric") is not None) == fabric_on, m.get("fabric")
    tokens = steps * batch * get_config("tiny").seq_len * m["world_size"]
    capture_s = float((m.get("fabric") or {}).get("capture_s") or 0.0)
    return float(m["steady_global_tokens_per_s"]), tokens / wall, wall, capture_s


def main() -> None:
    from ray_efa_eks.efacheck.local_cluster import local_cluster

    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--warmup", type=int, default=20, help="also the report interval (steps)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true", help="last stdout line is a JSON summary")
    a = p.parse_args()
    if a.repeats < 1 or a.steps % a.warmup or a.steps < 2 * a.warmup:
        raise SystemExit("--repeats >= 1; --steps must be a multiple of --warmup and at least twice it")
    runs: dict[bool, list[tuple[float, float, float, float]]] = {True: [], False: []}
    with local_cluster(worker_nodes=2), tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            order = (True, False) if i % 2 == 0 else (False, True)
            for on in order:
                settle()
                runs[on].append(one_run(on, a.steps, a.warmup, a.batch_size, tmp, f"fab-{i}-{int(on)}"))
            (s1, e1, w1, c1), (s0, e0, _, _) = runs[True][-1], runs[False][-1]
            print(
                f"[bench] pair {i + 1}/{a.repeats}: capture on {s1:.0f} / {e1:.0f} tok/s, off {s0:.0f} / {e0:.0f} "
                f"tok/s (steady / end-to-end), on/off {s1 / s0:.3f} / {e1 / e0:.3f}; capture {c1 * 1e3:.1f} ms "
                f"of {w1:.1f} s",
                flush=True,
            )
    med = {on: tuple(statistics.median(r[k] for r in runs[on]) for k in (0, 1)) for on in (True, False)}
    pair_steady = [x[0] / y[0] for x, y in zip(runs[True], runs[False])]
    pair_e2e = [x[1] / y[1] for x, y in zip(runs[True], runs[False])]
    print(f"{'median global tokens/s':>26}  {'capture on':>10}  {'off':>8}  {'on/off':>7}  {'median pair on/off':>18}")
    for k, label, pairs in ((0, "steady (train_func)", pair_steady), (1, "end-to-end (fit wall)", pair_e2e)):
        print(
            f"{label:>26}  {med[True][k]:10.0f}  {med[False][k]:8.0f}  {med[True][k] / med[False][k]:7.3f}  "
            f"{statistics.median(pairs):18.3f}"
        )
    shares = [r[3] / r[2] for r in runs[True]]
    print(
        f"{'capture itself (rank 0)':>26}  median {statistics.median(r[3] for r in runs[True]) * 1e3:.1f} ms per run "
        f"= {statistics.median(shares):.3%} of the run's wall time (max {max(shares):.3%})"
    )
    if a.json:
        print(
            json.dumps(
                {
                    "capture_share_of_wall": statistics.median(shares),
                    "steady_on": med[True][0],
                    "steady_off": med[False][0],
                    "e2e_on": med[True][1],
                    "e2e_off": med[False][1],
                    "pair_ratios_steady": [round(x, 3) for x in pair_steady],
                    "pair_ratios_e2e": [round(x, 3) for x in pair_e2e],
                }
            )
        )


if __name__ == "__main__":
    main()
