"""Throughput of efacheck.nccl_log on a synthetic 512-rank (64 nodes x 8 GPUs) log vs a naive per-line regex.

The log is in the image's format (NCCL 2.29, aws-ofi-nccl 1.18: Bootstrap:, Initialized/Assigned NET plugin,
nNodes) with four prefix styles (none, mpirun, CloudWatch-like timestamp, Ray worker).

Why: a real 512-rank NCCL_DEBUG=INFO log is hundreds of MB; the check must not
take minutes. Target: at least 2x the naive per-line regex in the same run, judged on the median of the
alternating pairs' ratios (naive time / reader time, wall clock; the CPU-time ratio is printed beside it), so
the machine's speed and its neighbours cancel out. Exit 1 when missed (the summary still prints).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time

from ray_efa_eks.efacheck.nccl_log import analyze_paths  # noqa: E402

NODES, GPUS, CHANNELS = 64, 8, 32
TARGET_RATIO = 2.0


def write_log(path: str) -> None:
    with open(path, "w") as f:
        for n in range(NODES):
            for g in range(GPUS):
                rank = n * GPUS + g
                pid = 1000 + rank
                pre = f"ip-10-0-{n}-{g}:{pid}:{pid + 7} [{g}] NCCL INFO "
                if rank % 4 == 1:
                    pre = f"[1,{rank}]<stdout>:" + pre
                elif rank % 4 == 2:
                    pre = "2026-01-01 00:00:00,123 | " + pre
                elif rank % 4 == 3:
                    pre = f"(RayTrainWorker pid={pid}, ip=10.0.{n}.{g}) " + pre
                f.write(f"{pre}cudaDriverVersion 12080\n{pre}Bootstrap: Using eth0:10.0.{n}.{g}<0>\n")
                f.write(f"{pre}NET/Plugin: Loaded net plugin Libfabric (v11)\n")
                f.write(f"{pre}NET/OFI Initializing aws-ofi-nccl 1.18.0\n")
                f.write(f"{pre}NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)\n")
                f.write(f"{pre}Initialized NET plugin Libfabric\n{pre}Assigned NET plugin Libfabric to comm\n")
                f.write(f"{pre}Using network Libfabric\n")
                f.write(
                    f"{pre}comm 0x5a08c708f110 rank {rank} nRanks {NODES * GPUS} nNodes {NODES} localRanks {GPUS} "
                    f"localRank {g} MNNVL 0\n"
                )
                for rep in range(16):  # several communicators
                    for c in range(CHANNELS):
                        peer = (rank + GPUS) % (NODES * GPUS)
                        f.write(
                            f"{pre}Channel {c:02d}/0 : {rank}[{g}] -> {peer}[{g}] [send] via NET/Libfabric/{g // 2}/GDRDMA\n"
                        )
                        f.write(
                            f"{pre}Channel {c:02d}/0 : {rank}[{g}] -> {rank + 1}[{(g + 1) % 8}] via P2P/CUMEM/read\n"
                        )


_LINE = re.compile(r"^(.*?)NCCL (INFO|WARN) (.*)$")
_VIA = re.compile(r"(?:Channel|Ring) \d+(?:/\d+)? : .* via (\S+)")


def naive(path: str) -> int:
    """The obvious approach: one regex per line to split prefix/body, then one per kind of body."""
    hits = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _LINE.match(line)
            if not m:
                continue
            body = m.group(3)
            if _VIA.match(body) or body.startswith(("Using network", "NET/")):
                hits += 1
    return hits


def main() -> int:
    import json
    import statistics

    from ray_efa_eks.efacheck.cli import ArgumentParser
    from ray_efa_eks.tools.cli import positive_int

    ap = ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=positive_int, default=3, help="timed passes of each reader (median reported)")
    ap.add_argument("--json", action="store_true", help="last stdout line is a JSON summary")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "nccl-512.log")
        write_log(p)
        mb = os.path.getsize(p) / 1e6
        ours, base, ours_cpu, base_cpu = [], [], [], []
        for _ in range(args.repeats):  # alternate, so background load hits both alike
            t, c = time.perf_counter(), time.process_time()
            rep = analyze_paths([p])
            ours.append(time.perf_counter() - t)
            ours_cpu.append(time.process_time() - c)
            t, c = time.perf_counter(), time.process_time()
            naive(p)
            base.append(time.perf_counter() - t)
            base_cpu.append(time.process_time() - c)
        o, b = statistics.median(ours), statistics.median(base)
        oc, bc = statistics.median(ours_cpu), statistics.median(base_cpu)
        print(f"log: {mb:.1f} MB, ranks={rep.ranks}, nodes={rep.nodes}, verdict={rep.verdict}")
        assert rep.verdict == "efa" and rep.ranks == NODES * GPUS and rep.nodes == NODES, rep.reasons
        # CPU-time figures too: on a shared 2-core VM the wall clock measures the neighbours as much as the reader.
        print(f"nccl_log: {mb / o:.0f} MB/s ({o:.2f} s, median of {args.repeats}; {mb / oc:.0f} MB/s of CPU time)")
        print(
            f"naive per-line regex: {mb / b:.0f} MB/s ({b:.2f} s, median of {args.repeats}; {mb / bc:.0f} MB/s of CPU time)"
        )
        pairs = [nb / no for no, nb in zip(ours, base)]
        pairs_cpu = [nb / no for no, nb in zip(ours_cpu, base_cpu)]
        ratio, ratio_cpu = statistics.median(pairs), statistics.median(pairs_cpu)
        print(
            f"nccl_log / naive: {ratio:.2f}x median of {len(pairs)} pairs ({min(pairs):.2f}..{max(pairs):.2f}); "
            f"CPU time {ratio_cpu:.2f}x ({min(pairs_cpu):.2f}..{max(pairs_cpu):.2f})"
        )
        met = ratio >= TARGET_RATIO
        print(f"target >= {TARGET_RATIO:.0f}x the naive regex in the same run: {'met' if met else 'MISSED'}")
        if args.json:
            print(
                json.dumps(
                    {
                        "mb": round(mb, 1),
                        "ranks": rep.ranks,
                        "verdict": rep.verdict,
                        "nccl_log_mb_s": mb / o,
                        "naive_mb_s": mb / b,
                        "nccl_log_cpu_mb_s": mb / oc,
                        "naive_cpu_mb_s": mb / bc,
                        "pair_ratios": pairs,
                        "pair_median": ratio,
                        "pair_ratios_cpu": pairs_cpu,
                        "pair_median_cpu": ratio_cpu,
                    }
                )
            )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
