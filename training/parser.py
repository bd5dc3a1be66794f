"""The training commands' parsers: ``train``'s options and the usage errors argparse cannot see (exit 64 before
any cluster is touched, handing a :class:`~.request.TrainRequest` on), and ``submit``'s own options."""

from __future__ import annotations

import argparse
import os
from typing import Optional

from ..efacheck.cli import ArgumentParser
from .errors import EXIT_WRONG_FABRIC
from .request import (
    DEFAULT_CPU_WORKERS,
    MAX_BATCH_SIZE,
    MAX_STEPS,
    MAX_WAIT_FOR_WORKERS_S,
    TrainRequest,
    address_problem,
    gpu_memory_problem,
    local_worker_limit,
    run_name_problem,
    storage_problem,
)


def _preset_names() -> list[str]:
    from .model import PRESETS

    return sorted(PRESETS)


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address",
        default=None,
        help="existing Ray cluster: 'auto' (in a Ray job or on a node), host:port of the GCS or "
        "ray://host:10001; omit to start a local cluster",
    )
    p.add_argument("--steps", type=int, default=30, help=f"optimizer steps (default 30, at most {MAX_STEPS})")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="ranks (default: with --use-gpu one per GPU the cluster offers; else 2); fewer than the "
        "cluster's GPUs leaves GPUs idle and warns",
    )
    p.add_argument("--preset", default="tiny", help=f"model size: {', '.join(_preset_names())} (default tiny)")
    p.add_argument(
        "--batch-size", type=int, default=8, help=f"sequences per rank per step (default 8, at most {MAX_BATCH_SIZE})"
    )
    p.add_argument(
        "--storage-path",
        default=None,
        help="checkpoint storage, a directory or s3://bucket/prefix "
        "(default: $RAY_EFA_EKS_STORAGE_PATH, else <tmp>/ray-efa-eks-train)",
    )
    p.add_argument(
        "--name",
        default=None,
        help="the run name; rerun with the same name and storage path to resume (default: a new fsdp-lm-<time> run)",
    )
    p.add_argument(
        "--max-failures",
        type=int,
        default=1,
        help="worker-group restarts Ray Train may make from the latest checkpoint (default 1; -1 unlimited)",
    )
    p.add_argument("--checkpoint-every", type=int, default=10, help="checkpoint every N steps (default 10)")
    p.add_argument("--report-every", type=int, default=5, help="a [train] progress line every N steps (default 5)")
    p.add_argument(
        "--fail-at-step",
        type=int,
        default=None,
        help="fault injection: rank 1 is killed at this step unless the attempt resumed "
        "(must come after the first checkpoint)",
    )
    p.add_argument(
        "--use-gpu",
        action="store_true",
        help="one GPU per rank, NCCL (needs --address: a local run starts CPU-only Ray nodes)",
    )
    p.add_argument(
        "--require-efa",
        action="store_true",
        help=f"stop right after NCCL initialisation (exit {EXIT_WRONG_FABRIC}, nothing checkpointed) "
        "unless the fabric verdict is efa; for production runs",
    )
    p.add_argument(
        "--wait-for-workers-s",
        type=float,
        default=0.0,
        help="with --address and --workers: wait up to this long for the cluster to offer every rank's "
        "CPUs/GPUs (nodes still joining) before training starts; default 0: exit 6 at once",
    )
    p.add_argument("--json", action="store_true", help="last stdout line is a JSON summary (or {'error': ...})")


def train_parser(prog: str = "python -m ray_efa_eks.training") -> ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Train the FSDP model (exit codes at the end).",
        exit_codes="train",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _train_args(p)
    return p


def check_train_args(
    p: argparse.ArgumentParser, args: argparse.Namespace, local: Optional[bool] = None
) -> TrainRequest:
    """Usage errors that argparse cannot see, raised before any cluster is touched; the checked run as a
    :class:`~.request.TrainRequest` (``--workers`` filled in without --use-gpu).

    ``local``: the run starts its own cluster on this machine (default: no ``--address``); ``submit`` checks the
    job's arguments with ``local=False`` (they run on the cluster).
    """
    local = args.address is None if local is None else local
    if args.fail_at_step is not None and not 0 < args.checkpoint_every < args.fail_at_step:
        p.error(
            f"--fail-at-step {args.fail_at_step} must come after the first checkpoint (--checkpoint-every "
            f"{args.checkpoint_every}): set it above {args.checkpoint_every}"
        )
    if args.workers is None and not args.use_gpu:
        args.workers = DEFAULT_CPU_WORKERS
    for flag in ("steps", "workers", "batch_size", "checkpoint_every", "report_every"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.steps > MAX_STEPS:
        p.error(f"--steps {args.steps}: at most {MAX_STEPS:,}; e.g. --steps 1000")
    if args.batch_size > MAX_BATCH_SIZE:
        p.error(f"--batch-size {args.batch_size}: at most {MAX_BATCH_SIZE} sequences per rank; e.g. --batch-size 8")
    if not 0 <= args.wait_for_workers_s <= MAX_WAIT_FOR_WORKERS_S:
        p.error(f"--wait-for-workers-s {args.wait_for_workers_s:g}: seconds from 0 to {MAX_WAIT_FOR_WORKERS_S:g}")
    if args.wait_for_workers_s and args.workers is None:
        p.error(
            "--wait-for-workers-s needs --workers: with --use-gpu alone the run takes the GPUs the cluster "
            "offers when it starts, so there is nothing to wait for; e.g. --workers 8"
        )
    if args.max_failures < -1:
        p.error(f"--max-failures must be >= 0 (or -1 for unlimited), got {args.max_failures}")
    from .model import PRESETS

    if args.preset not in PRESETS:
        p.error(f"--preset {args.preset!r}: unknown model preset; choose from {', '.join(sorted(PRESETS))}")
    if args.name is not None and run_name_problem(args.name):
        p.error(f"{run_name_problem(args.name)} (the run's checkpoints go to <storage>/<name>)")
    from .trainer import STORAGE_PATH_ENV

    storage = (
        args.storage_path if args.storage_path is not None else (os.environ.get(STORAGE_PATH_ENV) if local else None)
    )  # submit: the job's own
    if storage is not None and (storage or args.storage_path is not None):
        why = storage_problem(
            storage, "--storage-path" if args.storage_path is not None else STORAGE_PATH_ENV, on_this_host=local
        )
        if why:
            p.error(why)
    if args.address is not None:
        problem = address_problem(args.address)
        if problem:
            p.error(problem)
    if args.use_gpu and args.workers is not None:
        gpu_memory_problem(p, TrainRequest.from_namespace(args), os.environ)
    try:
        from .trainer import resolve_backend

        resolve_backend(args.use_gpu, os.environ)
    except ValueError as e:
        p.error(str(e))
    if local:
        if args.use_gpu:
            p.error(
                "--use-gpu: a local run (no --address) starts CPU-only Ray nodes, so Ray Train would wait for "
                "GPUs forever; run on a cluster with GPU nodes: --address auto (on a node), or `submit -- "
                "--use-gpu ...`"
            )
        limit, why = local_worker_limit()
        if args.workers > limit:
            p.error(f"--workers {args.workers}: {why}; lower --workers, or train on a cluster with --address")
    return TrainRequest.from_namespace(args)


def submit_parser(prog: str = "python -m ray_efa_eks.training submit") -> ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        usage="%(prog)s [--address URL] [--pip PKG] [--env K=V] [--no-wait] [-- TRAIN_ARGS...]",
        description="Submit training to a Ray cluster's Jobs API; TRAIN_ARGS go to the job unchanged.",
        epilog="Token mode: set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH.",
        exit_codes="submit",
    )
    p.add_argument("--address", default="http://127.0.0.1:8265", help="the Jobs API (dashboard) URL")
    p.add_argument("--pip", action="append", default=[], help="pip package for the job's runtime env")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the job's env")
    p.add_argument("--no-wait", action="store_true", help="return after submitting (exit 0)")
    return p
