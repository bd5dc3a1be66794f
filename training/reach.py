"""Reaching what a run needs, before or as Ray starts: the cluster's address answers, it offers the ranks asked for,
and the checkpoint storage takes a write. Each failure is a :class:`~.errors.CliError` with its exit code."""

from __future__ import annotations

import socket
import sys
import time
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from ..efacheck.exit_codes import EXIT_USAGE
from .errors import EXIT_TOO_SMALL, EXIT_UNREACHABLE, CliError, first_line
from .request import TrainRequest, storage_problem

WAIT_POLL_S = 2.0
"""How often --wait-for-workers-s reads the cluster's resources."""
PROBE_TIMEOUT_S = 10.0
"""TCP connect timeout for --address: ray.init on an unreachable GCS retries for minutes, a probe answers at once."""


def probe(host: str, port: int, what: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise CliError(EXIT_UNREACHABLE) unless ``host:port`` accepts a TCP connection within ``timeout``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as e:
        raise CliError(
            EXIT_UNREACHABLE,
            f"cannot reach {what} at {host}:{port}: {e.strerror or e}; is the "
            "cluster up (and `kubectl port-forward` running)?",
        ) from None


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
        raise CliError(EXIT_UNREACHABLE, f"--address {address}: no Ray cluster found ({first_line(e)})") from None
    host, _, port = resolved.rpartition(":")
    probe(host, int(port), f"the Ray cluster (--address {address})")


def check_cluster_fits(resources: dict, workers: int, use_gpu: bool) -> None:
    """Fail fast (exit :data:`EXIT_TOO_SMALL`) when the cluster cannot place ``workers`` ranks.

    Ray Train otherwise waits for the resources without end, printing a worker-group timeout every minute.
    Each rank takes 1 CPU, plus 1 GPU with ``--use-gpu`` (trainer.build_trainer).
    """
    need = "GPU" if use_gpu else "CPU"
    have = float(resources.get(need, 0))
    if have < workers:
        raise CliError(
            EXIT_TOO_SMALL,
            f"the cluster has {have:g} {need}s and --workers {workers}"
            f"{' --use-gpu' if use_gpu else ''} needs {workers} (one per worker): wait "
            f"until its {'GPU ' if use_gpu else ''}nodes have joined (`ray status`) or "
            "lower --workers",
        )


def wait_for_workers(resources: Any, workers: int, use_gpu: bool, wait_s: float) -> None:
    """:func:`check_cluster_fits`, retried for up to ``wait_s`` seconds while the cluster's nodes join.

    A job whose ranks need every node's GPUs (``ray-efa-eks rayjob``: one rank per GPU of each of its nodes, and each
    node holds exactly its own GPUs) cannot place them on fewer nodes; Ray Train would wait without end for the rest
    (check_cluster_fits), so the run waits here with a deadline and starts no step until every rank fits.
    """
    deadline, said = time.monotonic() + wait_s, False
    while True:
        try:
            check_cluster_fits(resources(), workers, use_gpu)
            return
        except CliError as e:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CliError(
                    e.code, f"{e} (waited {wait_s:g} s: --wait-for-workers-s)" if wait_s else str(e)
                ) from None
            if not said:
                print(f"[train] waiting up to {wait_s:g} s for the cluster's nodes: {e}", flush=True)
                said = True
            time.sleep(min(WAIT_POLL_S, left))


def place_gpu_ranks(req: TrainRequest, nodes: list[dict]) -> TrainRequest:
    """--use-gpu on a cluster: ``--workers`` defaults to one rank per GPU the cluster offers (trainer.gpu_ranks);
    fewer leaves GPUs idle and warns on stderr; none at all exits :data:`EXIT_TOO_SMALL`. Returns the request with
    its rank count."""
    from .trainer import gpu_ranks, gpus_per_node

    offered, how = gpu_ranks(gpus_per_node(nodes))
    if req.workers is None:
        if not offered:
            raise CliError(
                EXIT_TOO_SMALL,
                "--use-gpu: the cluster offers no GPUs yet (no GPU node has joined: "
                "`ray status`); wait for the GPU nodes, or pass --workers N to wait for "
                "N GPUs",
            )
        print(
            f"[train] --use-gpu: {offered} ranks, one per GPU the cluster offers ({how})", file=sys.stderr, flush=True
        )
        return replace(req, workers=offered)
    if req.workers < offered:
        print(
            f"warning: --workers {req.workers} uses {req.workers} of the {offered} GPUs the cluster offers "
            f"({how}); {offered - req.workers} sit idle: omit --workers for one rank per GPU",
            file=sys.stderr,
            flush=True,
        )
    return req


def check_storage_reachable(req: TrainRequest, environ: Any) -> None:
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

    storage = resolve_storage_path(req.storage_path, environ)
    option = (
        "--storage-path"
        if req.storage_path
        else (STORAGE_PATH_ENV if environ.get(STORAGE_PATH_ENV) else "the default storage path")
    )
    is_s3 = storage.startswith("s3://")
    if (is_s3 and (req.address or "").startswith("ray://")) or (not is_s3 and req.address):
        return
    why = storage_problem(storage, option, on_this_host=not req.address)
    if why:  # $RAY_EFA_EKS_STORAGE_PATH of a job's pod, not seen by check_train_args
        raise CliError(EXIT_USAGE, why)
    try:
        check(storage, option, environ)
    except StorageError as e:
        raise CliError(e.code, f"{e}; nothing was started") from None
