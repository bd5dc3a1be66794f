"""Ray Train overhead: steady-state tokens/s via TorchTrainer vs a bare torch.distributed loop.

Same model, batch, steps, 2 gloo ranks, 1 thread each. Warmup steps are excluded
on both sides (the Ray side reports tokens/s per report window; we take windows
after warmup). Run: python benchmarks/train_overhead.py [--steps 60]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _bare_worker(rank: int, world: int, steps: int, warmup: int, batch: int, port: int, q) -> None:
    from torch.distributed.fsdp import fully_shard

    from training.data import RandomTokens
    from training.model import DecoderLM, get_config, lm_loss

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    cfg = get_config("tiny")
    torch.manual_seed(0)
    model = DecoderLM(cfg)
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = RandomTokens(cfg.vocab_size, cfg.seq_len, batch, 0, rank)
    for step in range(1, steps + 1):
        if step == warmup + 1:
            dist.barrier()
            t0 = time.perf_counter()
        x = data.batch(step)
        loss = lm_loss(model(x), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
    dist.barrier()
    el = time.perf_counter() - t0
    if rank == 0:
        q.put(world * batch * cfg.seq_len * (steps - warmup) / el)
    dist.destroy_process_group()


def bare(steps: int, warmup: int, batch: int, world: int = 2) -> float:
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(_bare_worker, args=(world, steps, warmup, batch, 29533, q), nprocs=world,
                       start_method="spawn")
    return q.get()


def ray_train(steps: int, warmup: int, batch: int, world: int = 2) -> float:
    import tempfile

    from training.local_cluster import local_cluster
    from training.trainer import build_trainer

    # report_every == warmup so the first window is exactly the warmup; checkpointing off.
    cfg = {"steps": steps, "batch_size": batch, "report_every": warmup, "checkpoint_every": 0}
    with local_cluster(worker_nodes=world), tempfile.TemporaryDirectory() as tmp:
        res = build_trainer(num_workers=world, storage_path=tmp, name="bench", train_config=cfg).fit()
        if res.error:
            raise res.error
        df = res.metrics_dataframe if hasattr(res, "metrics_dataframe") else None
        if df is None or "global_tokens_per_s" not in df:
            raise RuntimeError("no metrics history")
        steady = df[df["step"] > warmup]
        # windows are equal-sized (report_every steps): tokens/s = total tokens / total time
        times = (warmup * batch * 64 * world) / steady["global_tokens_per_s"]
        return float(len(steady) * warmup * batch * 64 * world / times.sum())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=8)
    a = p.parse_args()
    if a.steps % a.warmup:
        raise SystemExit("--steps must be a multiple of --warmup")
    b = bare(a.steps, a.warmup, a.batch_size)
    r = ray_train(a.steps, a.warmup, a.batch_size)
    print(f"{'bare torch.distributed (tok/s)':>34}: {b:10.0f}")
    print(f"{'Ray TorchTrainer (tok/s)':>34}: {r:10.0f}")
    print(f"{'ratio ray/bare':>34}: {r / b:10.3f}")


if __name__ == "__main__":
    main()
