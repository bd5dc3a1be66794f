"""A collective sweep in fresh gloo processes, as the check's ranks run it: shared by the sweep and report tests.

Each rank is a fresh process (so env set here is read at init, as NCCL reads ``NCCL_NET``), joins a gloo
process group on loopback, runs ``sweep.run_sweep`` and writes its rows and its stack probe to ``rank<r>.json``.
The ranks are forked from one multiprocessing forkserver that imported torch once (:func:`start_ranks`), instead
of each importing it again after a spawn (about 3 s of CPU per rank on the 2-core CI box).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp

from ray_efa_eks.efacheck import stack_probe, sweep


PRELOAD = ["torch", "torch.distributed", "torch.distributed.fsdp", __name__]
"""What the forkserver imports once, before it forks any rank (nothing here starts a thread or a process group)."""


def start_ranks(fn, args: tuple, nprocs: int, preload: tuple[str, ...] = ()) -> None:
    """``fn(rank, *args)`` in ``nprocs`` new processes, as ``torch.multiprocessing.start_processes`` runs them (a rank
    that fails fails the call). Each is forked from the forkserver, a clean interpreter that ran no test code and no
    collective, so a rank still starts with only the environment it sets itself before ``init_process_group``.
    ``preload``: more modules for the server (``fn``'s own); it reads the list when it starts, at the first call."""
    multiprocessing.set_forkserver_preload(PRELOAD + list(preload))
    mp.start_processes(fn, args=args, nprocs=nprocs, start_method="forkserver")


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
    """One sweep in ``world`` FRESH processes (:func:`start_ranks`) with ``env`` set; per rank ``{"rows", "probe"}``."""
    tmp.mkdir()
    start_ranks(_rank, (world, free_port(), env, entries, str(tmp)), world)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world)]
