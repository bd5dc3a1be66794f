"""Ray Train worker loop: FSDP2-sharded decoder LM, sharded DCP checkpoints, resume.

Every rank calls ``ray.train.report`` the same number of times (it is a barrier
in Ray Train V2). Checkpoints use a fixed ``checkpoint_dir_name`` per step so
Ray merges each rank's DCP shard files into one storage directory.

A reported checkpoint only becomes the one a restart resumes from once the
controller has collected that report from *every* rank (Ray Train V2 polls each
worker every ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S``); a rank that dies before that
poll takes its report with it and the run resumes from the previous checkpoint.
"""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import time
from typing import Any, Optional

import ray
import ray.train
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from . import checkpoints as _checkpoints
from . import fabric as _fabric
from . import restore as _restore
from .data import RandomTokens
from .model import DecoderLM, get_config, lm_loss

DEFAULTS: dict[str, Any] = {
    "preset": "tiny",
    "steps": 30,
    "batch_size": 8,
    "lr": 3e-3,
    "seed": 0,
    "report_every": 5,
    "checkpoint_every": 10,
    # Fault injection: these ranks SIGKILL themselves at this step, in an attempt
    # that did not resume from a checkpoint (so a working restore fails only once).
    "fail_at_step": None,
    "fail_ranks": (1,),
    "threads": 1,
    # Fabric (training/fabric.py): capture NCCL's INIT/NET lines per rank under fabric_dir and judge them;
    # require_efa stops the attempt right after NCCL initialisation unless the verdict is efa.
    "fabric": True,
    "fabric_dir": None,
    "require_efa": False,
    # The checkpoint the command verified (training/checkpoints.py), the step_* directories that existed before the
    # run (never written under or deleted) and this run's tag for a name among them.
    "resume_from": None,
    "existing": (),
    "run_tag": "r0",
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


def _maybe_fail(cfg: dict, step: int, rank: int, resumed_from: int) -> None:
    """SIGKILL this rank at ``fail_at_step`` once the checkpoints reported so far are committed.

    Waiting for the commit makes the test exercise restore rather than the race
    in which a rank dies before the controller's next poll collected its last report.
    """
    if cfg["fail_at_step"] is None or step != cfg["fail_at_step"] or resumed_from:
        return
    if rank not in cfg["fail_ranks"]:
        return
    ray.train.get_all_reported_checkpoints(consistency_mode=ray.train.CheckpointConsistencyMode.COMMITTED)
    print(f"[train] fault injection: rank {rank} SIGKILLs itself at step {step}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def _load(ckpt: ray.train.Checkpoint, model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
    """Load the sharded model/optimizer state in place; return the checkpoint's meta.

    Read straight from the checkpoint's storage, each rank only the byte ranges of its own shards
    (training/restore.py), instead of ``as_directory()``, which copies every rank's shards to every node.
    """
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, storage_reader=_restore.ArrowReader.of(ckpt))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return _restore.read_torch(ckpt, "meta.pt")


def checkpoint_dir_name(step: int, cfg: dict) -> str:
    """``step_NNNNNN``; ``step_NNNNNN-<run>`` when a directory of that name existed before this run (one this run
    did not write: never written into, so Ray's retention never deletes it as this run's)."""
    name = f"step_{step:06d}"
    return f"{name}-{cfg['run_tag']}" if name in (cfg.get("existing") or ()) else name


def _resume_checkpoint(cfg: dict) -> Optional[ray.train.Checkpoint]:
    """Ray's checkpoint for this attempt, unless it is one that existed before the run (its snapshot's latest, maybe
    damaged): then the one the command verified (training/checkpoints.py ``choose``), or none."""
    ckpt = ray.train.get_checkpoint()
    existing = set(cfg.get("existing") or ())
    if not existing:
        return ckpt
    if ckpt is None or ckpt.path.rstrip("/").rpartition("/")[2] in existing:
        return ray.train.Checkpoint(cfg["resume_from"]) if cfg.get("resume_from") else None
    return ckpt  # reported by this run (a restart after a worker failure)


def _report(
    metrics: dict,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    rank: int,
    checkpoint: bool,
    fabric: Optional[dict] = None,
    dir_name: str = "",
) -> None:
    """Report on every rank; with ``checkpoint`` each rank also saves its DCP shard (rank 0 adds meta.pt) and its
    manifest under a shared ``dir_name`` so Ray merges all ranks' files into one checkpoint directory."""
    if not checkpoint:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as tmp:
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=tmp)
        if rank == 0:
            meta = {k: metrics[k] for k in ("step", "loss", "loss_first")}
            torch.save(meta, os.path.join(tmp, "meta.pt"))
            if fabric is not None:  # the verdict travels with the checkpoint: a resumed run can compare
                with open(os.path.join(tmp, _fabric.FABRIC_FILE), "wb") as f:
                    f.write(_fabric.checkpoint_record(fabric, metrics["step"]))
        _checkpoints.write_manifest(tmp, rank, int(metrics["world_size"]))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp), checkpoint_dir_name=dir_name)


def train_func(config: Optional[dict]) -> dict:
    """Train; return the last metrics (rank 0's become ``Result.return_value``)."""
    cfg = {**DEFAULTS, **(config or {})}
    torch.set_num_threads(int(cfg["threads"]))
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    if dist.get_backend() == "gloo":  # a CPU run, or --use-gpu rehearsed on logical GPUs (trainer.BACKEND_ENV)
        device = torch.device("cpu")
    use_gpu = device.type == "cuda"
    mcfg = get_config(cfg["preset"])
    steps, every = int(cfg["steps"]), int(cfg["checkpoint_every"] or 0)

    # Set NCCL's capture env before its first line (the first collective, just below), then judge the fabric.
    t_probe = time.perf_counter()
    probe = _fabric.Probe(
        dist.get_backend(),
        rank,
        ctx.get_local_rank(),
        cfg["fabric_dir"],
        enabled=bool(cfg["fabric"] or cfg["require_efa"]),
    )
    dist.all_reduce(torch.zeros(1, device=device))  # NCCL creates its communicator and logs INIT/NET here
    ckpt = _resume_checkpoint(cfg)
    fabric = probe.judge(
        dist,
        final=False,
        previous=_fabric.previous_verdict(ckpt) if rank == 0 else None,
        broadcast=bool(cfg["require_efa"]),
    )
    capture_s = time.perf_counter() - t_probe  # rank 0's time in the capture (the all-reduce would run anyway)
    if rank == 0 and fabric is not None:
        print(_fabric.line(fabric), flush=True)
    if cfg["require_efa"] and fabric is not None and fabric["verdict"] != "efa":
        # Every rank got the verdict: all stop here, before the model exists and before any report/checkpoint.
        return {"refused": "require_efa", "fabric": fabric, "rank": rank, "world_size": world}

    torch.manual_seed(cfg["seed"])
    with torch.device(device):
        model = DecoderLM(mcfg)
    model = _shard_model(model, use_gpu)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    data = RandomTokens(mcfg.vocab_size, mcfg.seq_len, cfg["batch_size"], cfg["seed"], rank)

    resumed_from, loss_first, loss_val = 0, None, float("nan")
    if ckpt is not None:
        meta = _load(ckpt, model, opt)
        resumed_from, loss_first = int(meta["step"]), meta["loss_first"]
        loss_val = meta.get("loss", loss_val)

    nodes: list = [None] * world
    node_id = ray.get_runtime_context().get_node_id()
    dist.all_gather_object(nodes, {"rank": rank, "node_id": node_id, "hostname": socket.gethostname()})
    metrics: dict[str, Any] = {
        "step": resumed_from,
        "loss": loss_val,
        "loss_first": loss_first,
        "tokens_per_s": 0.0,
        "global_tokens_per_s": 0.0,
        "steady_global_tokens_per_s": 0.0,
        "backend": dist.get_backend(),
        "world_size": world,
        "rank": rank,
        "node_id": node_id,
        "steps": steps,
        "nodes": nodes,
        "shard_fraction": shard_fraction(model),
        "resumed_from_step": resumed_from,
        "fabric": fabric,
    }
    tokens_per_step = cfg["batch_size"] * mcfg.seq_len

    # Throughput windows run from one report's start to the next, so the cost of
    # reporting and checkpointing is charged to the window after it.
    window_t, window_start = time.perf_counter(), resumed_from
    steady_t: Optional[float] = None
    steady_step = 0
    for step in range(resumed_from + 1, steps + 1):
        _maybe_fail(cfg, step, rank, resumed_from)
        x = data.batch(step).to(device)
        loss = lm_loss(model(x), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_val = loss.item()
        if loss_first is None:
            loss_first = loss_val

        last = step == steps
        ckpt_due = bool(every) and (step % every == 0 or last)
        if step % cfg["report_every"] and not last and not ckpt_due:
            continue
        now = time.perf_counter()
        tps = tokens_per_step * (step - window_start) / (now - window_t)
        if steady_t is None:  # the first window holds warm-up; steady state starts after it
            steady_t, steady_step = now, step
        steady = tokens_per_step * (step - steady_step) / (now - steady_t) if step > steady_step else tps
        metrics.update(
            step=step,
            loss=loss_val,
            loss_first=loss_first,
            tokens_per_s=tps,
            global_tokens_per_s=tps * world,
            steady_global_tokens_per_s=steady * world,
        )
        # the [train] progress line is printed by the controller (trainer.Progress), where the driver sees it
        _report(
            {k: v for k, v in metrics.items() if k != "fabric"},
            model,
            opt,
            rank,
            checkpoint=ckpt_due,
            fabric=fabric,
            dir_name=checkpoint_dir_name(step, cfg),
        )  # a copy: Ray queues it as is
        window_t, window_start = now, step
    # The whole run's verdict: every rank's log now, and what each node's EFA counters moved since the start.
    # Lower bound of the inter-node bytes per node: FSDP all-gathers every parameter at least once per step, and a
    # node must receive the (nodes-1)/nodes of them that other nodes hold.
    n_nodes = len({n["node_id"] for n in nodes})
    param_bytes = sum(p.numel() for p in model.parameters()) * (2 if use_gpu else 4)
    expected = param_bytes * max(steps - resumed_from, 0) * (n_nodes - 1) / n_nodes if n_nodes > 1 else None
    t_final = time.perf_counter()
    final = probe.judge(dist, final=True, previous=(fabric or {}).get("previous"), expected_bytes_per_node=expected)
    if final is not None:
        final["capture_s"] = round(capture_s + time.perf_counter() - t_final, 4)
        metrics["fabric"] = final
    return metrics
