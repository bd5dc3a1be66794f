"""CLI: ``python -m ray_efa_eks.training`` trains locally (or on --address); ``submit`` sends it to a RayCluster.

Examples:
    python -m ray_efa_eks.training --json                      # local 2-node CPU cluster, tiny model
    python -m ray_efa_eks.training --address auto --use-gpu --preset 1b   # one rank per GPU the cluster offers
    kubectl -n ray port-forward svc/ray-head-svc 8265:8265 &
    export RAY_AUTH_TOKEN=$(pulumi stack output rayAuthToken --show-secrets)   # the cluster's Ray token
    python -m ray_efa_eks.training submit --address http://127.0.0.1:8265 -- --use-gpu

``submit`` uploads the ``training`` package (found through the import system), plus the few ``efacheck``
modules its fabric verdict uses (:data:`EFACHECK_FILES`), as the job's working_dir (``ray_efa_eks/training``,
``ray_efa_eks/efacheck``: the layout they are installed in, so their imports read the same) and runs
``python -m ray_efa_eks.training --address auto <args after -->`` there, follows the job's log and exits with the job's own exit code. A cluster in Ray token mode needs ``RAY_AUTH_TOKEN`` (or
``RAY_AUTH_TOKEN_PATH``) in the environment; ``submit`` then sets ``RAY_AUTH_MODE=token`` itself, which
Ray's Jobs SDK needs before it sends the token.

Exit codes (never a traceback): the ``train`` and ``submit`` rows of the one exit-code table
(``efacheck/exit_codes.py``), printed at the end of ``--help`` and in docs/cli.md. The checkpoint storage is asked
before Ray starts (``training/storage_check.py``): 73 when it cannot be written, 2 when S3 does not answer in time.

Fabric: every run judges which network its collectives used with the EFA gate's own code (``training/fabric.py``
over ``efacheck.nccl_log``): a ``[fabric]`` line once NCCL has initialised, and ``fabric`` in the ``[summary]``
line and the ``--json`` object.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.resources
import json
import os
import re
import shlex
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Sequence
from urllib.parse import urlsplit

from .. import efacheck
from ..efacheck import verdict_metrics
from ..efacheck.storage_uri import FIX, uri_problem
from .lease import EXIT_NAME_IN_USE, RENEW_S
from .storage_check import EXIT_STORAGE
from .cli import (EXIT_INTERNAL, EXIT_USAGE, ArgumentParser, internal_error, interrupted_code, interruption, run_cli,
                  url_problem)

EXIT_OK = 0
EXIT_FAILED = 1
"""The run failed (--max-failures exhausted) or the submitted job failed."""
EXIT_UNREACHABLE = 2
"""The cluster did not answer: --address unreachable, or the Ray auth token was refused (project-wide 'no answer')."""
EXIT_RAY_START = 4
"""Ray could not start the local cluster."""
EXIT_WRONG_FABRIC = 5
"""--require-efa and the fabric verdict after NCCL initialisation was not efa; nothing was checkpointed."""
EXIT_TOO_SMALL = 6
"""The cluster (--address) has fewer CPUs, or GPUs with --use-gpu, than --workers needs: nothing was started."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT); with --json the last stdout line says so."""
EFACHECK_FILES = ("__init__.py", "cli.py", "exit_codes.py", "storage_uri.py", "nccl_log.py", "nccl_input.py",
                  "nccl_parse.py", "nccl_report.py", "nccl_verdict.py", "efa_counters.py", "verdict_metrics.py",
                  "local_cluster.py")
"""The efacheck modules training imports (``training/fabric.py``: the gate's verdict code; the run's verdict as a
metric; the local Ray cluster), closed under their own imports; ``submit`` ships them next to ``training``
(tests/test_architecture.py checks both)."""
NAMESPACE = __package__.rpartition(".")[0] or "ray_efa_eks"
"""The package ``training`` and ``efacheck`` live in (``ray_efa_eks``); a submitted job keeps that layout."""
DEBUG_ENV = "RAY_EFA_EKS_DEBUG"
"""Set to 1 to get the traceback of an unexpected error (the CLI prints one line otherwise)."""
CONNECT_TIMEOUT_S = 60.0
"""With --address: how long the run may take to connect (ray.init) before it is stopped with exit 2."""
PROBE_TIMEOUT_S = 10.0
"""TCP connect timeout for --address: ray.init on an unreachable GCS retries for minutes, a probe answers at once."""
AGENT_WAIT_S = 60.0
"""How long submit retries while a freshly started head has no job agent yet ("No available agent")."""
TOKEN_HINT = ("the cluster runs Ray token auth: export RAY_AUTH_TOKEN=$(pulumi stack output rayAuthToken "
              "--show-secrets) (or RAY_AUTH_TOKEN_PATH=<file>) and retry")


class CliError(Exception):
    """A failure the CLI reports as one clear line and an exit code."""

    def __init__(self, code: int, message: str, extra: Optional[dict] = None):
        super().__init__(message)
        self.code = code
        self.extra = extra or {}


def _preset_names() -> list[str]:
    from .model import PRESETS

    return sorted(PRESETS)


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default=None,
                   help="existing Ray cluster: 'auto' (in a Ray job or on a node), host:port of the GCS or "
                        "ray://host:10001; omit to start a local cluster")
    p.add_argument("--steps", type=int, default=30, help=f"optimizer steps (default 30, at most {MAX_STEPS})")
    p.add_argument("--workers", type=int, default=None,
                   help="ranks (default: with --use-gpu one per GPU the cluster offers; else 2); fewer than the "
                        "cluster's GPUs leaves GPUs idle and warns")
    p.add_argument("--preset", default="tiny", help=f"model size: {', '.join(_preset_names())} (default tiny)")
    p.add_argument("--batch-size", type=int, default=8,
                   help=f"sequences per rank per step (default 8, at most {MAX_BATCH_SIZE})")
    p.add_argument("--storage-path", default=None,
                   help="checkpoint storage, a directory or s3://bucket/prefix "
                        "(default: $RAY_EFA_EKS_STORAGE_PATH, else <tmp>/ray-efa-eks-train)")
    p.add_argument("--name", default=None,
                   help="the run name; rerun with the same name and storage path to resume "
                        "(default: a new fsdp-lm-<time> run)")
    p.add_argument("--max-failures", type=int, default=1,
                   help="worker-group restarts Ray Train may make from the latest checkpoint (default 1; -1 unlimited)")
    p.add_argument("--checkpoint-every", type=int, default=10, help="checkpoint every N steps (default 10)")
    p.add_argument("--report-every", type=int, default=5, help="a [train] progress line every N steps (default 5)")
    p.add_argument("--fail-at-step", type=int, default=None,
                   help="fault injection: rank 1 is killed at this step unless the attempt resumed "
                        "(must come after the first checkpoint)")
    p.add_argument("--use-gpu", action="store_true",
                   help="one GPU per rank, NCCL (needs --address: a local run starts CPU-only Ray nodes)")
    p.add_argument("--require-efa", action="store_true",
                   help=f"stop right after NCCL initialisation (exit {EXIT_WRONG_FABRIC}, nothing checkpointed) "
                        "unless the fabric verdict is efa; for production runs")
    p.add_argument("--json", action="store_true", help="last stdout line is a JSON summary (or {'error': ...})")


def train_parser(prog: str = "python -m ray_efa_eks.training") -> ArgumentParser:
    p = ArgumentParser(prog=prog, description="Train the FSDP model (exit codes at the end).",
                       exit_codes="train", formatter_class=argparse.RawDescriptionHelpFormatter)
    _train_args(p)
    return p


DEFAULT_CPU_WORKERS = 2
"""--workers without --use-gpu: two ranks, one per local worker node (the deployed layout's two nodes)."""
MAX_STEPS = 10_000_000
"""A bound on --steps: far past any real run here, short of a number that only means "forever"."""
MAX_BATCH_SIZE = 4096
"""A bound on --batch-size (sequences per rank per step); a larger one only fails later with out-of-memory."""
LOCAL_WORKER_GIB = 1.0
"""Memory one local worker node takes (raylet, agent, a worker importing torch), GiB; measured ~0.8 on the tiny model."""
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A run name is one directory under --storage-path: never ``..``, a path separator or an option."""


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a run (None when it can): it must stay one directory inside the storage path."""
    if not RUN_NAME.fullmatch(name or "") or name in (".", ".."):
        return (f"--name {name!r}: a run name is one directory inside --storage-path: 1-128 letters, digits, '.', "
                "'_' or '-', starting with a letter or digit (no '/', '..' or leading '-'), e.g. --name fsdp-lm-1")
    return None


def local_worker_limit() -> tuple[int, str]:
    """How many local workers this machine holds (each is a 1-CPU Ray node), and why, in words."""
    cpus = os.cpu_count() or 1
    try:
        gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        gib = float("inf")
    limit = max(2, min(cpus, int(gib // LOCAL_WORKER_GIB)))
    return limit, (f"a local run starts one 1-CPU Ray node per worker (about {LOCAL_WORKER_GIB:g} GiB each); this "
                   f"machine has {cpus} CPUs and {gib:.0f} GiB, so at most {limit}")


def check_train_args(p: argparse.ArgumentParser, args: argparse.Namespace,
                     local: Optional[bool] = None) -> argparse.Namespace:
    """Usage errors that argparse cannot see, raised before any cluster is touched.

    ``local``: the run starts its own cluster on this machine (default: no ``--address``); ``submit`` checks the
    job's arguments with ``local=False`` (they run on the cluster).
    """
    local = args.address is None if local is None else local
    if args.fail_at_step is not None and not 0 < args.checkpoint_every < args.fail_at_step:
        p.error(f"--fail-at-step {args.fail_at_step} must come after the first checkpoint (--checkpoint-every "
                f"{args.checkpoint_every}): set it above {args.checkpoint_every}")
    if args.workers is None and not args.use_gpu:
        args.workers = DEFAULT_CPU_WORKERS
    for flag in ("steps", "workers", "batch_size", "checkpoint_every", "report_every"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.steps > MAX_STEPS:
        p.error(f"--steps {args.steps}: at most {MAX_STEPS:,}; e.g. --steps 1000")
    if args.batch_size > MAX_BATCH_SIZE:
        p.error(f"--batch-size {args.batch_size}: at most {MAX_BATCH_SIZE} sequences per rank; e.g. --batch-size 8")
    if args.max_failures < -1:
        p.error(f"--max-failures must be >= 0 (or -1 for unlimited), got {args.max_failures}")
    from .model import PRESETS

    if args.preset not in PRESETS:
        p.error(f"--preset {args.preset!r}: unknown model preset; choose from {', '.join(sorted(PRESETS))}")
    if args.name is not None and run_name_problem(args.name):
        p.error(f"{run_name_problem(args.name)} (the run's checkpoints go to <storage>/<name>)")
    from .trainer import STORAGE_PATH_ENV

    storage = args.storage_path if args.storage_path is not None else (
        os.environ.get(STORAGE_PATH_ENV) if local else None)  # submit: the job's own
    if storage is not None and (storage or args.storage_path is not None):
        why = storage_problem(storage, "--storage-path" if args.storage_path is not None else STORAGE_PATH_ENV,
                              on_this_host=local)
        if why:
            p.error(why)
    if args.address is not None:
        problem = address_problem(args.address)
        if problem:
            p.error(problem)
    if args.use_gpu and args.workers is not None:
        gpu_memory_problem(p, args, os.environ)
    try:
        from .trainer import resolve_backend

        resolve_backend(args.use_gpu, os.environ)
    except ValueError as e:
        p.error(str(e))
    if local:
        if args.use_gpu:
            p.error("--use-gpu: a local run (no --address) starts CPU-only Ray nodes, so Ray Train would wait for "
                    "GPUs forever; run on a cluster with GPU nodes: --address auto (on a node), or `submit -- "
                    "--use-gpu ...`")
        limit, why = local_worker_limit()
        if args.workers > limit:
            p.error(f"--workers {args.workers}: {why}; lower --workers, or train on a cluster with --address")
    return args


def gpu_memory_problem(p: Optional[argparse.ArgumentParser], args: argparse.Namespace,
                       environ: Any) -> None:
    """Refuse (exit 64) a --preset/--batch-size/--workers that cannot fit one worker GPU's memory.

    The GPU is what the stack put on the pods (``RAY_EFA_EKS_GPU_MEMORY_MIB`` from the catalogue); without it (a
    cluster the stack did not make, a laptop submitting) nothing is judged here. The estimate is
    training/memory.py's (the table in docs/training.md).
    """
    from .memory import gpu_from_env, problem
    from .model import get_config

    gpu = gpu_from_env(environ)
    if gpu is None or args.workers is None:
        return
    why = problem(args.preset, get_config(args.preset), args.workers, args.batch_size, gpu)
    if why:
        if p is not None:
            p.error(why)
        raise CliError(EXIT_USAGE, why)


def place_gpu_ranks(args: argparse.Namespace, nodes: list[dict]) -> None:
    """--use-gpu on a cluster: ``--workers`` defaults to one rank per GPU the cluster offers (trainer.gpu_ranks);
    fewer leaves GPUs idle and warns on stderr; none at all exits :data:`EXIT_TOO_SMALL`."""
    from .trainer import gpu_ranks, gpus_per_node

    offered, how = gpu_ranks(gpus_per_node(nodes))
    if args.workers is None:
        if not offered:
            raise CliError(EXIT_TOO_SMALL, "--use-gpu: the cluster offers no GPUs yet (no GPU node has joined: "
                                           "`ray status`); wait for the GPU nodes, or pass --workers N to wait for "
                                           "N GPUs")
        args.workers = offered
        print(f"[train] --use-gpu: {offered} ranks, one per GPU the cluster offers ({how})", file=sys.stderr,
              flush=True)
    elif args.workers < offered:
        print(f"warning: --workers {args.workers} uses {args.workers} of the {offered} GPUs the cluster offers "
              f"({how}); {offered - args.workers} sit idle: omit --workers for one rank per GPU", file=sys.stderr,
              flush=True)


def storage_problem(value: str, option: str, on_this_host: bool = True) -> str | None:
    """Why ``value`` cannot hold this run's checkpoints (None when it can), answered before Ray starts.

    A URI's form is efacheck/storage_uri.py's (the gate's ``--storage-path`` has the same). A path that is a file
    fails only after the run, when Ray first writes a checkpoint there. Whether the storage takes a write (the bucket
    exists, the role may write, the directory can be created) is asked of the storage itself, by
    :func:`check_storage_reachable`. ``on_this_host`` False (``submit``): a path is the cluster's, only its form is
    checked.
    """
    fix = FIX
    if not value.strip():
        return f"{option} {value!r}: empty; name a directory or s3://bucket/prefix, or omit it for the default"
    bad = next((c for c in value if c != "\x00" and (ord(c) < 0x20 or ord(c) == 0x7f)), None)
    if bad is not None:  # a newline or tab in a directory name is a typo (a pasted line), never a place to train
        return f"{option} {value!r}: contains the control character {bad!r}; {fix}"
    if "\x00" in value or "://" in value:
        why = uri_problem(value, option)
        key = value.partition("://")[2].partition("/")[2].partition("?")[0]
        if why is None and "//" in "/" + key:
            why = f"{option} {value!r}: an empty S3 key segment ('//'); e.g. s3://my-bucket/ray-train"
        return why
    if value.startswith("~") and value.partition("/")[0] == "~" and not os.environ.get("HOME"):
        return (f"{option} {value!r}: '~' with HOME unset would mean the account's home from /etc/passwd, not "
                f"yours; write the directory out in full; {fix}")
    if not on_this_host:  # submit: the path is the cluster's, not this machine's
        return None
    try:
        path = Path(value).expanduser()
        if path.exists() and not path.is_dir():
            return f"{option} {value}: exists and is not a directory; {fix}"
        ancestor = path if path.exists() else next((a for a in path.absolute().parents if a.exists()), Path("/"))
    except (OSError, RuntimeError) as e:  # a name too long for the filesystem; ~user with no such user
        return f"{option} {value[:200]}: {getattr(e, 'strerror', None) or e}; {fix}"
    if not ancestor.is_dir():
        return f"{option} {value}: {ancestor} is not a directory; {fix}"
    return None  # writable? storage_check.check writes there before Ray starts (exit 73 when it cannot)


def check_storage_reachable(args: argparse.Namespace, environ: Any) -> None:
    """Before Ray starts: can this run write its checkpoints? (training/storage_check.py; exit 73, or 2 when S3 did
    not answer in time.)

    The storage is the one the run will use (``--storage-path``, else ``$RAY_EFA_EKS_STORAGE_PATH``, else the local
    default). S3 is asked wherever the driver runs on this host, which covers a local run, ``--address auto`` (a
    submitted job, on the head pod, with the pods' credentials) and ``--address HOST:PORT``; not ``ray://`` (Ray
    Client: the driver runs on the cluster, with other credentials). A directory is asked only on a local run: with
    ``--address`` it is the cluster's path, and this host's answer would prove nothing about it.
    """
    from .storage_check import StorageError, check
    from .trainer import STORAGE_PATH_ENV, resolve_storage_path

    storage = resolve_storage_path(args.storage_path, environ)
    option = "--storage-path" if args.storage_path else (STORAGE_PATH_ENV if environ.get(STORAGE_PATH_ENV)
                                                         else "the default storage path")
    is_s3 = storage.startswith("s3://")
    if (is_s3 and (args.address or "").startswith("ray://")) or (not is_s3 and args.address):
        return
    why = storage_problem(storage, option, on_this_host=not args.address)
    if why:  # $RAY_EFA_EKS_STORAGE_PATH of a job's pod, not seen by check_train_args
        raise CliError(EXIT_USAGE, why)
    try:
        check(storage, option, environ)
    except StorageError as e:
        raise CliError(e.code, f"{e}; nothing was started") from None


def address_problem(address: str) -> str | None:
    """Why ``--address`` cannot name a Ray cluster (None when it can): auto, host:port, or ray://host:port."""
    if address in ("auto", "local"):
        return None
    try:
        parts = urlsplit(address if "://" in address else f"//{address}")
        port = parts.port
    except ValueError:  # "[::1" or a port outside 0..65535
        parts, port = urlsplit(""), -1
    if (parts.scheme not in ("", "ray")) or not parts.hostname or port == -1 or (parts.scheme == "" and port is None):
        return (f"--address {address!r}: expected auto, HOST:PORT of the Ray GCS (e.g. 127.0.0.1:6379) or "
                "ray://HOST:10001")
    return None


def check_cluster_fits(resources: dict, workers: int, use_gpu: bool) -> None:
    """Fail fast (exit :data:`EXIT_TOO_SMALL`) when the cluster cannot place ``workers`` ranks.

    Ray Train otherwise waits for the resources without end, printing a worker-group timeout every minute.
    Each rank takes 1 CPU, plus 1 GPU with ``--use-gpu`` (trainer.build_trainer).
    """
    need = "GPU" if use_gpu else "CPU"
    have = float(resources.get(need, 0))
    if have < workers:
        raise CliError(EXIT_TOO_SMALL, f"the cluster has {have:g} {need}s and --workers {workers}"
                                       f"{' --use-gpu' if use_gpu else ''} needs {workers} (one per worker): wait "
                                       f"until its {'GPU ' if use_gpu else ''}nodes have joined (`ray status`) or "
                                       "lower --workers")


# -- reaching a cluster ---------------------------------------------------------------------------------------

def probe(host: str, port: int, what: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise CliError(EXIT_UNREACHABLE) unless ``host:port`` accepts a TCP connection within ``timeout``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as e:
        raise CliError(EXIT_UNREACHABLE, f"cannot reach {what} at {host}:{port}: {e.strerror or e}; is the "
                                         "cluster up (and `kubectl port-forward` running)?") from None


def probe_ray_address(address: str) -> None:
    """Resolve ``address`` the way ray.init does ('auto' via $RAY_ADDRESS or the local node) and probe it."""
    if address.startswith("ray://"):
        parts = urlsplit(address)
        probe(parts.hostname or "", parts.port or 10001, f"the Ray client server ({address})")
        return
    from ray._private.services import canonicalize_bootstrap_address_or_die

    try:
        resolved = canonicalize_bootstrap_address_or_die(address)
    except (ConnectionError, ValueError) as e:
        raise CliError(EXIT_UNREACHABLE, f"--address {address}: no Ray cluster found ({_first_line(e)})") from None
    host, _, port = resolved.rpartition(":")
    probe(host, int(port), f"the Ray cluster (--address {address})")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines() or [type(e).__name__])[0]


def _last_line(e: BaseException, limit: int = 140) -> str:
    """The last line of an error's text: for a remote error (its traceback in the text), the error itself."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[-1] if lines else type(e).__name__)[:limit]


def failure_summary(e: BaseException) -> str:
    """One line for a Ray Train failure: each failed rank (or the controller) and its error's last line."""
    per_rank = getattr(e, "worker_failures", None)
    if per_rank:
        return "; ".join(f"rank {rank}: {type(err).__name__}: {_last_line(err)}"
                         for rank, err in sorted(per_rank.items()))
    cause = getattr(e, "controller_failure", None)
    if cause is not None:
        return f"controller: {type(cause).__name__}: {_last_line(cause)}"
    return _last_line(e)


# -- train ----------------------------------------------------------------------------------------------------

def note_sigint(trainer: Any) -> list[int]:
    """A list that gets an entry when Ctrl-C reaches ``trainer.fit()``; Ray's own handler still runs.

    Ray Train V2's handler (DataParallelTrainer._register_sigint_handler, ray/train/v2/api/data_parallel_trainer.py)
    aborts the controller and may end fit() with ``sys.exit(0)``, which would read as success (or exit 1): the run
    must end with the interrupted code instead.
    """
    seen: list[int] = []
    register = getattr(trainer, "_register_sigint_handler", None)
    if register is None:
        return seen

    def register_and_note(controller: Any) -> None:
        register(controller)
        ray_handler = signal.getsignal(signal.SIGINT)

        def handler(signum: int, frame: Any) -> None:
            seen.append(signum)
            if callable(ray_handler):
                ray_handler(signum, frame)

        signal.signal(signal.SIGINT, handler)

    trainer._register_sigint_handler = register_and_note
    return seen


def run_training(args: argparse.Namespace) -> dict:
    from .fabric import log_dir_for
    from .trainer import build_trainer, resolve_backend, resolve_storage_path

    storage = resolve_storage_path(args.storage_path, os.environ)
    name = args.name or f"fsdp-lm-{int(time.time())}"
    train_cfg = {
        "fabric_dir": log_dir_for(storage, name, tempfile.gettempdir()),
        "require_efa": bool(getattr(args, "require_efa", False)),
        "preset": args.preset,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "checkpoint_every": args.checkpoint_every,
        "report_every": args.report_every,
        "fail_at_step": args.fail_at_step,
        **json.loads(os.environ.get(RESUME_ENV) or "{}"),  # the checkpoint the command verified
    }
    trainer = build_trainer(num_workers=args.workers, use_gpu=args.use_gpu, train_config=train_cfg,
                            backend=resolve_backend(args.use_gpu, os.environ),
                            storage_path=storage, name=name, max_failures=args.max_failures)
    t0 = time.perf_counter()
    resume = resume_hint(name, storage)
    interrupted = note_sigint(trainer)
    try:
        result = trainer.fit()
    except BaseException as e:  # noqa: BLE001 - Ray's Ctrl-C handler ends fit() with SystemExit
        if interrupted or isinstance(e, KeyboardInterrupt):  # Ctrl-C, or SIGTERM (run_cli: the same path)
            raise CliError(interrupted_code(), f"interrupted ({interruption()}): training run {name!r} was stopped; "
                                               f"{resume}") from None
        if not isinstance(e, Exception):
            raise
        from ray.exceptions import RayActorError
        from ray.train import TrainingFailedError

        if isinstance(e, TrainingFailedError):
            raise CliError(EXIT_FAILED, f"training run {name!r} failed after --max-failures {args.max_failures} "
                                        f"restart(s): {failure_summary(e)}; {resume}") from None
        if isinstance(e, RayActorError):  # the Ray Train controller itself died (its node or process went away)
            raise CliError(EXIT_FAILED, f"training run {name!r} failed: the Ray Train controller died "
                                        f"({type(e).__name__}: {_last_line(e)}); {resume}") from None
        raise
    if interrupted:
        raise CliError(interrupted_code(), f"interrupted ({interruption()}): training run {name!r} was stopped; "
                                           f"{resume}")
    wall = time.perf_counter() - t0
    m = result.return_value  # rank 0's last metrics (Result.metrics only holds checkpointed ones)
    publish_fabric(name, m.get("fabric"), None if m.get("refused") else m.get("steady_global_tokens_per_s"))
    if m.get("refused") == "require_efa":
        raise CliError(EXIT_WRONG_FABRIC, refusal_message(m["fabric"], name), extra={"fabric": m["fabric"]})
    return {
        "steps": m["step"],
        "loss_first": m["loss_first"],
        "loss_last": m["loss"],
        "world_size": m["world_size"],
        "nodes": len({n["node_id"] for n in m["nodes"]}),
        "ranks_per_node": sorted(Counter(n["node_id"] for n in m["nodes"]).values(), reverse=True),
        "tokens_per_s": m["steady_global_tokens_per_s"],
        "resumed_from_step": m["resumed_from_step"],
        "shard_fraction": m["shard_fraction"],
        "backend": m["backend"],
        "name": name,
        "storage_path": storage,
        "checkpoint": result.checkpoint.path if result.checkpoint else None,
        "fit_s": round(wall, 2),
        "fabric": m.get("fabric"),
    }


def publish_fabric(name: str, fab: Optional[dict], tokens_per_s: Optional[float]) -> Optional[str]:
    """The run's fabric verdict, EFA bytes and tokens/s as metrics on the cluster's head (efacheck.verdict_metrics);
    a run is never failed by it: why it could not is printed."""
    efa = (fab or {}).get("efa_bytes") or {}
    moved = sum((n.get("sent") or 0) + (n.get("received") or 0) for n in efa.values()) if efa else None
    why = verdict_metrics.publish(name, "train", (fab or {}).get("verdict"), moved, tokens_per_s)
    if why:
        print(f"[fabric] verdict not exported as a metric: {why}", flush=True)
    return why


def fabric_words(fab: Optional[dict]) -> str:
    """The summary's fabric: the verdict, and for an NCCL run whose capture (training/fabric.py) applied."""
    fab = fab or {}
    words = str(fab.get("verdict", "off"))
    if fab.get("capture_text") and fab.get("verdict") != "not-nccl":
        words += f" capture={fab['capture_text']}"
    return words


def refusal_message(fab: dict, name: str) -> str:
    """One line for --require-efa: the verdict, why, and that nothing was checkpointed."""
    from .fabric import changed

    why = "; ".join((fab.get("reasons") or [])[:2]) or fab.get("deciding") or "no reason given"
    was = changed(fab)
    return (f"--require-efa: run {name!r} stopped after its first collective (NCCL initialisation): the fabric is {fab['verdict']}, not "
            f"efa{f' ({was})' if was else ''}: {why}; nothing was checkpointed")


def resume_hint(name: str, storage: Optional[str]) -> str:
    """What an interrupted or failed run's message ends with."""
    where = f" ({storage})" if storage else ""
    return f"rerun with --name {name} and the same --storage-path{where} to resume from its latest checkpoint"


_RUN: list[str] = []
"""The run's name and resume hint once known (for an interruption before the run itself started)."""


def supervise_train(args: argparse.Namespace, argv: list[str]) -> int:
    """The command's side of a run (training/lifecycle.py): check what can be checked without Ray, then run
    :func:`main_train` in a child process that this one stops, reaps and answers for."""
    from . import lifecycle
    from .trainer import resolve_storage_path

    storage = resolve_storage_path(args.storage_path, os.environ)
    name = args.name or f"fsdp-lm-{int(time.time())}"
    _RUN[:] = [name, resume_hint(name, storage)]  # a signal before the run starts still says how to resume
    check_storage_reachable(args, os.environ)
    if args.address:
        probe_ray_address(args.address)
    cmd = [sys.executable, "-m", f"{NAMESPACE}.training", *argv, "--name", name, "--storage-path", storage]
    if not storage.startswith("s3://") and args.address not in (None, "auto", "local"):
        # a directory of a remote cluster's (its nodes write it): this host can neither own nor verify it
        return lifecycle.supervise(cmd, name=name, resume=resume_hint(name, storage), as_json=args.json,
                                   connect_within=(CONNECT_TIMEOUT_S, EXIT_UNREACHABLE, _no_connect(args.address)))
    lease = own_name(storage, name)
    try:
        os.environ[RESUME_ENV] = json.dumps(resume_choice(storage, name))
        return lifecycle.supervise(cmd, name=name, resume=resume_hint(name, storage), as_json=args.json,
                                   tick=lambda: None if lease.renew() else (
                                       EXIT_NAME_IN_USE, f"training run {name!r} lost its name to another run "
                                                         f"({lease.where()}) and was stopped"),
                                   tick_every=RENEW_S,
                                   connect_within=(CONNECT_TIMEOUT_S, EXIT_UNREACHABLE, _no_connect(args.address))
                                   if args.address else None)
    finally:
        os.environ.pop(RESUME_ENV, None)
        lease.release()


RESUME_ENV = "RAY_EFA_EKS_RESUME"
"""Set for the run's process: the checkpoint it resumes from, as training/checkpoints.py chose it (JSON)."""


def resume_choice(storage: str, name: str) -> dict:
    """Which checkpoint the run resumes from, verified (training/checkpoints.py): its notes on stderr; CliError 65
    when checkpoints exist and none verifies."""
    from .checkpoints import DamagedCheckpoints, choose

    try:
        choice = choose(storage, name)
    except DamagedCheckpoints as e:
        raise CliError(e.code, str(e)) from None
    except OSError as e:  # pyarrow: the storage refused a listing or a read
        raise CliError(EXIT_STORAGE, f"--storage-path {storage}: cannot read run {name!r}'s checkpoints: "
                                     f"{_first_line(e)}") from None
    for note in choice.notes:
        print(note, file=sys.stderr, flush=True)
    return {"resume_from": choice.resume_from, "existing": choice.existing, "run_tag": f"r{int(time.time())}"}


def _no_connect(address: str) -> str:
    return (f"--address {address}: the Ray cluster did not answer within {CONNECT_TIMEOUT_S:g} s (ray.init retries a "
            "GCS that accepts the connection and never answers); check the address and the cluster's head")


def own_name(storage: str, name: str) -> Any:
    """The run's lease on ``<storage>/<name>`` (training/lease.py), or CliError: 75 while another run holds it."""
    from .lease import Lease, NameInUse
    from .storage_check import _explain

    try:
        lease = Lease(storage, name)
        lease.acquire()
    except NameInUse as e:
        raise CliError(e.code, str(e)) from None
    except OSError as e:
        raise CliError(EXIT_STORAGE, f"--storage-path {storage}: cannot write the run's owner record: "
                                     f"{e.strerror or e}") from None
    except Exception as e:  # botocore: the same answers as the storage check's
        try:
            code, why = _explain(e, storage, "--storage-path", os.environ)
        except Exception:  # noqa: BLE001 - not an S3 answer: a bug, reported with its trace
            raise e from None
        raise CliError(code, f"{why} (the run's owner record)") from None
    return lease


def main_train(args: argparse.Namespace) -> int:
    import contextlib

    import ray

    from . import lifecycle
    from .driver_output import install

    # [train] lines plain when piped; Ray Train's monitor noise dropped (training/driver_output.py). The run's stdout
    # is the supervisor's pipe: what counts is the terminal (or not) the supervisor writes to.
    install(piped=os.environ.get(lifecycle.TTY_ENV) != "1" if lifecycle.is_run() else None)
    t0 = time.perf_counter()
    if not lifecycle.is_run():  # the supervisor asked already
        check_storage_reachable(args, os.environ)
    with contextlib.ExitStack() as stack:
        if args.address:
            if not lifecycle.is_run():
                probe_ray_address(args.address)
            try:
                ray.init(address=args.address)
            except Exception as e:  # ConnectionError, auth errors, version mismatch...
                raise CliError(EXIT_UNREACHABLE,
                               f"ray.init(address={args.address!r}) failed: {_first_line(e)}") from None
            if lifecycle.is_run():
                lifecycle.mark_connected()
            stack.callback(ray.shutdown)
            if args.use_gpu:
                place_gpu_ranks(args, ray.nodes())
                gpu_memory_problem(None, args, os.environ)  # now that the rank count is known
            check_cluster_fits(ray.cluster_resources(), args.workers, args.use_gpu)
        else:
            from ..efacheck.local_cluster import local_cluster

            try:
                stack.enter_context(local_cluster(worker_nodes=args.workers))
            except Exception as e:
                raise CliError(EXIT_RAY_START, f"Ray could not start the local cluster: {type(e).__name__}: "
                                               f"{_first_line(e)}") from None
        summary = run_training(args)
    summary["wall_s"] = round(time.perf_counter() - t0, 2)
    print(f"[summary] steps={summary['steps']} loss {summary['loss_first']:.4f} -> {summary['loss_last']:.4f} "
          f"world={summary['world_size']} nodes={summary['nodes']} tok/s={summary['tokens_per_s']:.0f} "
          f"resumed_from={summary['resumed_from_step']} wall={summary['wall_s']}s "
          f"fabric={fabric_words(summary.get('fabric'))}", flush=True)
    if lifecycle.is_run():
        lifecycle.write_result(EXIT_OK, None, summary if args.json else None)
    elif args.json:
        print(json.dumps(summary), flush=True)
    return EXIT_OK


# -- submit ---------------------------------------------------------------------------------------------------

def submit_entrypoint(train_args: Sequence[str]) -> str:
    """The job's command: the training args pass through unchanged; with no --storage-path the
    job uses the cluster's $RAY_EFA_EKS_STORAGE_PATH (set on the pods)."""
    return shlex.join(["python", "-m", f"{NAMESPACE}.training", "--address", "auto", *train_args])


def stage_package(dest: Path) -> Path:
    """Copy this package's sources (no __pycache__) to ``dest/ray_efa_eks/training`` and the efacheck modules it
    imports (:data:`EFACHECK_FILES`) to ``dest/ray_efa_eks/efacheck``: the job's working_dir is ``dest``.

    The package is found through the import system, so an installed ``ray_efa_eks.training`` ships only its
    own files, never the site-packages around it; in the job it is imported as ``ray_efa_eks.training`` (a
    namespace package in the working_dir, ahead of anything installed), so ``from ..efacheck import`` reads the
    same there as here.
    """
    def copy(src: Any, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        for entry in src.iterdir():
            if entry.is_dir():
                if entry.name != "__pycache__":
                    copy(entry, out / entry.name)
            elif entry.name.endswith(".py"):
                (out / entry.name).write_bytes(entry.read_bytes())

    root = importlib.resources.files(__package__)
    copy(root, dest / NAMESPACE / "training")
    if not (dest / NAMESPACE / "training" / "__main__.py").is_file():
        raise CliError(EXIT_FAILED, f"package {__package__} at {root} has no __main__.py to run")
    verdict_code = importlib.resources.files(efacheck)  # the gate's verdict code, for training/fabric.py
    (dest / NAMESPACE / "efacheck").mkdir(exist_ok=True)
    for f in EFACHECK_FILES:
        (dest / NAMESPACE / "efacheck" / f).write_bytes((verdict_code / f).read_bytes())
    return dest


def _token_env() -> None:
    """Ray's Jobs SDK sends the token only when RAY_AUTH_MODE=token; a token in the env is enough here."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        os.environ.setdefault("RAY_AUTH_MODE", "token")


def job_exit_code(status: str, driver_exit_code: Optional[int]) -> int:
    """SUCCEEDED -> 0; otherwise the driver's own non-zero exit code, else 1."""
    if status == "SUCCEEDED":
        return EXIT_OK
    return driver_exit_code if driver_exit_code else EXIT_FAILED


def submit_parser(prog: str = "python -m ray_efa_eks.training submit") -> ArgumentParser:
    p = ArgumentParser(prog=prog,
                       usage="%(prog)s [--address URL] [--pip PKG] [--env K=V] [--no-wait] [-- TRAIN_ARGS...]",
                       description="Submit training to a Ray cluster's Jobs API; TRAIN_ARGS go to the job unchanged.",
                       epilog="Token mode: set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH.", exit_codes="submit")
    p.add_argument("--address", default="http://127.0.0.1:8265", help="the Jobs API (dashboard) URL")
    p.add_argument("--pip", action="append", default=[], help="pip package for the job's runtime env")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the job's env")
    p.add_argument("--no-wait", action="store_true", help="return after submitting (exit 0)")
    return p


def main_submit(args: argparse.Namespace, train: Sequence[str]) -> int:
    _token_env()
    why = url_problem(args.address, "submit --address")
    if why:
        raise CliError(EXIT_USAGE, f"{why} (the Jobs API URL)")
    parts = urlsplit(args.address)
    probe(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80),
          f"the Ray Jobs API ({args.address})")
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    env: dict[str, Any] = {}
    if args.pip:
        env["pip"] = list(args.pip)
    if args.env:
        env["env_vars"] = dict(kv.split("=", 1) for kv in args.env)
    entry = submit_entrypoint(train)
    jobs = f"the Ray Jobs API at {args.address}"
    try:
        client = bounded(f"{jobs}: the version check", lambda: JobSubmissionClient(args.address))
        with tempfile.TemporaryDirectory(prefix="ray-efa-eks-submit-") as tmp:
            env["working_dir"] = str(stage_package(Path(tmp)))
            deadline = time.monotonic() + AGENT_WAIT_S
            while True:
                try:
                    job_id = bounded(f"{jobs}: the package upload and job submission",
                                     lambda: client.submit_job(entrypoint=entry, runtime_env=env), UPLOAD_TIMEOUT_S)
                    break
                except RuntimeError as e:  # a head that just started has no job agent yet (HTTP 500)
                    if "No available agent" not in str(e) or time.monotonic() > deadline:
                        raise
                    time.sleep(2)
    except AuthenticationError as e:
        raise CliError(EXIT_UNREACHABLE, f"the Ray Jobs API at {args.address} refused the request "
                                         f"({_first_line(e)}); {TOKEN_HINT}") from None
    except ConnectionError as e:
        raise CliError(EXIT_UNREACHABLE, f"cannot reach the Ray Jobs API at {args.address}: {_first_line(e)}") from None
    except RuntimeError as e:  # the SDK's "Request failed with status code ..."
        raise CliError(EXIT_UNREACHABLE, f"the Ray Jobs API at {args.address} did not take the job: "
                                         f"{_first_line(e)}") from None
    print(f"submitted {job_id}: {entry}", flush=True)
    if args.no_wait:
        return EXIT_OK

    async def follow() -> None:
        async for chunk in client.tail_job_logs(job_id):
            print(chunk, end="", flush=True)

    def stream() -> None:
        try:
            asyncio.run(follow())
        except Exception as e:  # the log stream broke; the job's status still decides
            print(f"[submit] log stream ended: {_first_line(e)}", file=sys.stderr, flush=True)

    logs = threading.Thread(target=stream, name="job-logs", daemon=True)  # a stuck stream cannot hold the exit
    logs.start()
    status_of = f"{jobs}: the status of {job_id}"
    try:
        info = bounded(status_of, lambda: client.get_job_info(job_id))
        while not info.status.is_terminal():
            logs.join(1.0)
            info = bounded(status_of, lambda: client.get_job_info(job_id))
    except (ConnectionError, RuntimeError) as e:
        raise CliError(EXIT_UNREACHABLE, f"{jobs} stopped answering about {job_id} ({_first_line(e)}); the job "
                                         f"may still run: `ray job status {job_id}`") from None
    logs.join(LOG_DRAIN_S)  # the rest of the log, once the job has ended
    status = str(info.status.value if hasattr(info.status, "value") else info.status)
    code = job_exit_code(status, info.driver_exit_code)
    detail = f" ({_first_line(Exception(info.message))})" if info.message and code else ""
    print(f"job {job_id}: {status}, exit {info.driver_exit_code if info.driver_exit_code is not None else '-'}"
          f"{detail}", flush=True)
    return code


REQUEST_TIMEOUT_S = 30.0
"""Deadline of each Jobs API request of ``submit`` (the version check, each status poll): a server that accepts the
connection and never answers (a stuck ``kubectl port-forward``) ends the command with exit 2."""
UPLOAD_TIMEOUT_S = 120.0
"""Deadline of the job submission, which uploads the training package (~100 KiB) first."""
LOG_DRAIN_S = 5.0
"""How long the end of the job's log may take to arrive once the job has ended."""


def bounded(what: str, call: Any, timeout: Optional[float] = None) -> Any:
    """``call()`` with a deadline: Ray's Jobs SDK sends its requests without one (``requests`` with no timeout,
    ray/dashboard/modules/dashboard_sdk.py ``_do_request``). Runs in a daemon thread, so a request that never ends
    cannot hold the process; CliError(2) when ``timeout`` (default :data:`REQUEST_TIMEOUT_S`) passes first."""
    limit = REQUEST_TIMEOUT_S if timeout is None else timeout
    outcome: list = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            outcome.append((False, e))

    worker = threading.Thread(target=run, name="jobs-api", daemon=True)
    worker.start()
    worker.join(limit)
    if not outcome:
        raise CliError(EXIT_UNREACHABLE, f"{what}: no answer within {limit:g} s; is the cluster up (and `kubectl "
                                         "port-forward` alive)? Retry once it answers")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _split_submit(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    rest = list(argv)
    if "--" in rest:
        i = rest.index("--")
        return rest[:i], rest[i + 1:]
    return rest, []


def _option(argv: list[str], flag: str) -> Optional[str]:
    """The last value given to ``flag`` (``--flag V`` or ``--flag=V``), read before the parser exists."""
    value = None
    for i, a in enumerate(argv):
        if a == "--":
            break
        if a == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(f"{flag}="):
            value = a.partition("=")[2]
    return value


def _main(argv: list[str], prog: str) -> int:
    if argv and argv[0] == "submit":
        _token_env()  # before anything imports ray: Ray reads RAY_AUTH_MODE once, when its config loads
        prog = prog if prog.endswith(" submit") else f"{prog} submit"  # `ray-efa-eks submit` names it already
        p = submit_parser(prog)
        own, train = _split_submit(argv[1:])
        args = p.parse_args(own)
        if any(not kv or "=" not in kv or kv.startswith("=") for kv in args.env):
            p.error(f"--env takes KEY=VALUE, got {[kv for kv in args.env if '=' not in kv or kv.startswith('=')]}")
        tp = train_parser(prog=f"{prog} ... --")
        train_ns = check_train_args(tp, tp.parse_args(train), local=False)  # fails here, not minutes later in the job
        if train_ns.address is not None:
            tp.error("--address after -- is set by submit (the job connects with --address auto)")
        return main_submit(args, train)
    name = _option(argv, "--name")
    if name and not run_name_problem(name):  # the parser and its checks import torch and Ray: seconds
        _RUN[:] = [name, resume_hint(name, _option(argv, "--storage-path"))]
    p = train_parser(prog)
    args = check_train_args(p, p.parse_args(argv))
    from . import lifecycle

    return main_train(args) if lifecycle.is_run() else supervise_train(args, argv)


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m ray_efa_eks.training") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv and not (argv and argv[0] == "submit")
    try:
        return _main(argv, prog)
    except SystemExit as e:  # argparse: --help (0) or a usage error (64), its message already on stderr
        code = e.code if isinstance(e.code, int) else EXIT_USAGE
        if as_json and code:
            what = "usage error (see stderr)" if code == EXIT_USAGE else f"exited with {code}"
            print(json.dumps({"error": what, "exit_code": code}), flush=True)
        return code
    except CliError as e:
        code, message, extra = e.code, str(e), e.extra
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM through run_cli, before or after the run itself
        code, message, extra = interrupted_code(), f"interrupted ({interruption()})", {}
        if _RUN:
            message += f": training run {_RUN[0]!r} was stopped before it started; {_RUN[1]}"
    except Exception as e:  # a failure we did not anticipate: one line naming the trace file, not a traceback
        code, message, extra = EXIT_INTERNAL, internal_error(prog, e).split(": ", 1)[1], {}
        if os.environ.get(DEBUG_ENV):
            import traceback

            traceback.print_exc()
    from . import lifecycle

    if lifecycle.is_run():  # the supervisor prints it
        lifecycle.write_result(code, message, {"error": message, "exit_code": code, **extra} if as_json else None)
        return code
    print(f"error: {message}", file=sys.stderr, flush=True)
    if as_json:
        print(json.dumps({"error": message, "exit_code": code, **extra}), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(run_cli(main, None, "python -m ray_efa_eks.training"))
