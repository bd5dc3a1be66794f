"""Ray Train worker loop: FSDP2-sharded decoder LM, sharded DCP checkpoints, resume.

Every rank calls ``ray.train.report`` the same number of times (it is a barrier
in Ray Train V2). Checkpoints use a fixed ``checkpoint_dir_name`` per step so
Ray merges each rank's DCP shard files into one storage directory.
"""
from __future__ import annotations

import os
import socket
import tempfile
import time
from typing import Any

import ray
import ray.train
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from training.data import RandomTokens
from training.model import DecoderLM, get_config, lm_loss

DEFAULTS: dict[str, Any] = {
    "preset": "tiny",
    "steps": 30,
    "batch_size": 8,
    "lr": 3e-3,
    "seed": 0,
    "report_every": 5,
    "checkpoint_every": 10,
    "fail_at_step": None,  # rank 1 os._exit(1)s once at this step (fault test)
    "fail_marker": None,  # path of a file created before the injected failure
    "threads": 1,
}


def _shard_model(model: torch.nn.Module, use_gpu: bool) -> torch.nn.Module:
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if use_gpu else None
    kw = {"mp_policy": mp} if mp is not None else {}
    for block in model.blocks:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    return model


def shard_fraction(model: torch.nn.Module) -> float:
    """Local elements / global elements over all sharded params (~1/world when sharded)."""
    local = total = 0
    for p in model.parameters():
        if hasattr(p, "to_local"):
            local += p.to_local().numel()
            total += p.numel()
    return local / total if total else 1.0


def _maybe_fail(config: dict, step: int, rank: int) -> None:
    fail_at, marker = config.get("fail_at_step"), config.get("fail_marker")
    if fail_at is None or step != fail_at or rank != 1:
        return
    if marker and os.path.exists(marker):
        return  # already failed once; this is the retry
    if marker:
        with open(marker, "w") as f:
            f.write(f"failed at step {step}\n")
    os._exit(1)


def train_func(config: dict) -> None:
    cfg = {**DEFAULTS, **(config or {})}
    torch.set_num_threads(int(cfg["threads"]))
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    use_gpu = device.type == "cuda"
    mcfg = get_config(cfg["preset"])

    torch.manual_seed(cfg["seed"])
    with torch.device(device):
        model = DecoderLM(mcfg)
    model = _shard_model(model, use_gpu)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    data = RandomTokens(mcfg.vocab_size, mcfg.seq_len, cfg["batch_size"], cfg["seed"], rank)

    start, resumed_from, loss_first = 1, 0, None
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd}
            dcp.load(state, checkpoint_id=d)
            set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            meta = torch.load(os.path.join(d, "meta.pt"))
        resumed_from = int(meta["step"])
        loss_first = meta.get("loss_first")
        start = resumed_from + 1

    node_id = ray.get_runtime_context().get_node_id()
    host = socket.gethostname()
    nodes: list = [None] * world
    dist.all_gather_object(nodes, {"rank": rank, "node_id": node_id, "hostname": host})
    frac = shard_fraction(model)
    backend = dist.get_backend()
    tokens_per_step = cfg["batch_size"] * mcfg.seq_len

    window_t, window_steps = time.perf_counter(), 0
    for step in range(start, cfg["steps"] + 1):
        _maybe_fail(cfg, step, rank)
        t0 = time.perf_counter()
        x = data.batch(step).to(device)
        loss = lm_loss(model(x), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_val = loss.item()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_time = time.perf_counter() - t0
        window_steps += 1
        if loss_first is None:
            loss_first = loss_val

        last = step == cfg["steps"]
        if step % cfg["report_every"] and not last and (not cfg["checkpoint_every"] or step % cfg["checkpoint_every"]):
            continue
        elapsed = time.perf_counter() - window_t
        tps = tokens_per_step * window_steps / elapsed
        metrics = {
            "step": step,
            "loss": loss_val,
            "loss_first": loss_first,
            "tokens_per_s": tps,
            "global_tokens_per_s": tps * world,
            "step_time_s": step_time,
            "backend": backend,
            "world_size": world,
            "rank": rank,
            "node_id": node_id,
            "hostname": host,
            "nodes": nodes,
            "shard_fraction": frac,
            "resumed_from_step": resumed_from,
        }
        if rank == 0:
            print(f"[train] step {step}/{cfg['steps']} loss {loss_val:.4f} "
                  f"global_tok/s {tps * world:.0f} world {world}", flush=True)
        if cfg["checkpoint_every"] and (step % cfg["checkpoint_every"] == 0 or last):
            with tempfile.TemporaryDirectory() as tmp:
                msd, osd = get_state_dict(model, opt)
                dcp.save({"model": msd, "optim": osd}, checkpoint_id=tmp)
                if rank == 0:
                    torch.save({"step": step, "loss_first": loss_first}, os.path.join(tmp, "meta.pt"))
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp),
                                 checkpoint_dir_name=f"step_{step:06d}")
        else:
            ray.train.report(metrics)
        window_t, window_steps = time.perf_counter(), 0
