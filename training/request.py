"""What a training run is asked to do (:class:`TrainRequest`, parsed once by the CLI) and the rules its values
must meet before anything starts: a run name, a storage path, a Ray address, local room, GPU memory."""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

from ..efacheck.storage_uri import FIX, uri_problem
from ..efacheck.exit_codes import EXIT_USAGE
from .errors import CliError

DEFAULT_CPU_WORKERS = 2
"""--workers without --use-gpu: two ranks, one per local worker node (the deployed layout's two nodes)."""
MAX_STEPS = 10_000_000
"""A bound on --steps: far past any real run here, short of a number that only means "forever"."""
MAX_BATCH_SIZE = 4096
"""A bound on --batch-size (sequences per rank per step); a larger one only fails later with out-of-memory."""
MAX_WAIT_FOR_WORKERS_S = 86400.0
"""A bound on --wait-for-workers-s: a day covers any node start; more only means a job that never ends."""
LOCAL_WORKER_GIB = 1.0
"""Memory one local worker node takes (raylet, agent, a worker importing torch), GiB; measured ~0.8 on the tiny model."""
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
"""A run name is one directory under --storage-path: never ``..``, a path separator or an option."""


@dataclass(frozen=True)
class TrainRequest:
    """One training run, as ``python -m ray_efa_eks.training`` parsed and checked it (defaults: the CLI's)."""

    address: Optional[str] = None
    """An existing Ray cluster ('auto', host:port of the GCS, ray://host:10001); None starts a local cluster."""
    steps: int = 30
    """Optimizer steps."""
    workers: Optional[int] = None
    """Ranks; None with --use-gpu: one per GPU the cluster offers (:func:`~.reach.place_gpu_ranks`)."""
    preset: str = "tiny"
    """The model size (training/model.py PRESETS)."""
    batch_size: int = 8
    """Sequences per rank per step."""
    storage_path: Optional[str] = None
    """Checkpoint storage (a directory or s3://bucket/prefix); None: $RAY_EFA_EKS_STORAGE_PATH, else the default."""
    name: Optional[str] = None
    """The run name (one directory under the storage path); None: a new fsdp-lm-<time> run."""
    max_failures: int = 1
    """Worker-group restarts Ray Train may make from the latest checkpoint (-1: unlimited)."""
    checkpoint_every: int = 10
    """Checkpoint every N steps."""
    report_every: int = 5
    """A [train] progress line every N steps."""
    fail_at_step: Optional[int] = None
    """Fault injection: rank 1 is killed at this step unless the attempt resumed."""
    use_gpu: bool = False
    """One GPU per rank, NCCL."""
    require_efa: bool = False
    """Stop right after NCCL initialisation unless the fabric verdict is efa."""
    wait_for_workers_s: float = 0.0
    """With --workers on a cluster: how long to wait for every rank's CPUs/GPUs (nodes joining) before exit 6."""
    json: bool = False
    """The last stdout line is a JSON summary (or an error object)."""

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> "TrainRequest":
        """The request the train parser's namespace holds (the CLI layer's only hand-over)."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls)})


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a run (None when it can): it must stay one directory inside the storage path."""
    if not RUN_NAME.fullmatch(name or "") or name in (".", ".."):
        return (
            f"--name {name!r}: a run name is one directory inside --storage-path: 1-128 letters, digits, '.', "
            "'_' or '-', starting with a letter or digit (no '/', '..' or leading '-'), e.g. --name fsdp-lm-1"
        )
    return None


def local_worker_limit() -> tuple[int, str]:
    """How many local workers this machine holds (each is a 1-CPU Ray node), and why, in words."""
    cpus = os.cpu_count() or 1
    try:
        gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        gib = float("inf")
    limit = max(2, min(cpus, int(gib // LOCAL_WORKER_GIB)))
    return limit, (
        f"a local run starts one 1-CPU Ray node per worker (about {LOCAL_WORKER_GIB:g} GiB each); this "
        f"machine has {cpus} CPUs and {gib:.0f} GiB, so at most {limit}"
    )


def gpu_memory_problem(p: Optional[argparse.ArgumentParser], req: TrainRequest, environ: Any) -> None:
    """Refuse (exit 64) a --preset/--batch-size/--workers that cannot fit one worker GPU's memory.

    The GPU is what the stack put on the pods (``RAY_EFA_EKS_GPU_MEMORY_MIB`` from the catalogue); without it (a
    cluster the stack did not make, a laptop submitting) nothing is judged here. The estimate is
    training/memory.py's (the table in docs/training.md).
    """
    from .memory import gpu_from_env, problem
    from .model import get_config

    gpu = gpu_from_env(environ)
    if gpu is None or req.workers is None:
        return
    why = problem(req.preset, get_config(req.preset), req.workers, req.batch_size, gpu)
    if why:
        if p is not None:
            p.error(why)
        raise CliError(EXIT_USAGE, why)


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
    bad = next((c for c in value if c != "\x00" and (ord(c) < 0x20 or ord(c) == 0x7F)), None)
    if bad is not None:  # a newline or tab in a directory name is a typo (a pasted line), never a place to train
        return f"{option} {value!r}: contains the control character {bad!r}; {fix}"
    if "\x00" in value or "://" in value:
        why = uri_problem(value, option)
        key = value.partition("://")[2].partition("/")[2].partition("?")[0]
        if why is None and "//" in "/" + key:
            why = f"{option} {value!r}: an empty S3 key segment ('//'); e.g. s3://my-bucket/ray-train"
        return why
    if value.startswith("~") and value.partition("/")[0] == "~" and not os.environ.get("HOME"):
        return (
            f"{option} {value!r}: '~' with HOME unset would mean the account's home from /etc/passwd, not "
            f"yours; write the directory out in full; {fix}"
        )
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
        return (
            f"--address {address!r}: expected auto, HOST:PORT of the Ray GCS (e.g. 127.0.0.1:6379) or ray://HOST:10001"
        )
    return None
