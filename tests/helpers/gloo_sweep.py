"""A collective sweep in fresh gloo processes, as the check's ranks run it: shared by the sweep and report tests.

Each rank is a spawned process (so env set here is read at init, as NCCL reads ``NCCL_NET``), joins a gloo
process group on loopback, runs ``sweep.run_sweep`` and writes its rows and its stack probe to ``rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp

from ray_efa_eks.efacheck import stack_probe, sweep


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _rank(rank: int, world: int, port: int, env: dict, entries: list, out: str) -> None:
    os.environ.update(env)  # as Ray's runtime_env does, before the process group exists
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        rows = sweep.run_sweep(entries, torch.device("cpu"), iters=2)
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps({"rows": rows, "probe": stack_probe.probe("")}))


def spawn_sweep(tmp: Path, env: dict, entries: list, world: int = 2) -> list[dict]:
    """One sweep in ``world`` FRESH processes (spawn) with ``env`` set; per rank ``{"rows", "probe"}``."""
    tmp.mkdir()
    mp.start_processes(_rank, args=(world, free_port(), env, entries, str(tmp)), nprocs=world, start_method="spawn")
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world)]
