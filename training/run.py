"""A training run: the command's side (:func:`supervise_train`: checks, the run's name and lease, the checkpoint
to resume from, a child process it answers for) and the run's side (:func:`main_train`: connect or start Ray, fit,
judge the fabric, print the summary)."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from typing import Any, Optional

from ..efacheck import verdict_metrics
from ..efacheck.cli import interrupted_code, interruption
from .errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_RAY_START,
    EXIT_UNREACHABLE,
    EXIT_WRONG_FABRIC,
    CliError,
    first_line,
    last_line,
)
from .lease import EXIT_NAME_IN_USE, RENEW_S
from .reach import check_storage_reachable, place_gpu_ranks, probe_ray_address, wait_for_workers
from .request import TrainRequest, gpu_memory_problem
from .storage_check import EXIT_STORAGE
from .submit import NAMESPACE

CONNECT_TIMEOUT_S = 60.0
"""With --address: how long the run may take to connect (ray.init) before it is stopped with exit 2."""


def failure_summary(e: BaseException) -> str:
    """One line for a Ray Train failure: each failed rank (or the controller) and its error's last line."""
    per_rank = getattr(e, "worker_failures", None)
    if per_rank:
        return "; ".join(
            f"rank {rank}: {type(err).__name__}: {last_line(err)}" for rank, err in sorted(per_rank.items())
        )
    cause = getattr(e, "controller_failure", None)
    if cause is not None:
        return f"controller: {type(cause).__name__}: {last_line(cause)}"
    return last_line(e)


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


def run_training(req: TrainRequest) -> dict:
    """Fit the trainer for ``req`` on the Ray cluster this process is connected to; the run's summary, or CliError."""
    from .fabric import log_dir_for
    from .trainer import build_trainer, resolve_backend, resolve_storage_path

    storage = resolve_storage_path(req.storage_path, os.environ)
    name = req.name or f"fsdp-lm-{int(time.time())}"
    train_cfg = {
        "fabric_dir": log_dir_for(storage, name, tempfile.gettempdir()),
        "require_efa": req.require_efa,
        "preset": req.preset,
        "steps": req.steps,
        "batch_size": req.batch_size,
        "checkpoint_every": req.checkpoint_every,
        "report_every": req.report_every,
        "fail_at_step": req.fail_at_step,
        **json.loads(os.environ.get(RESUME_ENV) or "{}"),  # the checkpoint the command verified
    }
    trainer = build_trainer(
        num_workers=req.workers,
        use_gpu=req.use_gpu,
        train_config=train_cfg,
        backend=resolve_backend(req.use_gpu, os.environ),
        storage_path=storage,
        name=name,
        max_failures=req.max_failures,
    )
    t0 = time.perf_counter()
    resume = resume_hint(name, storage)
    interrupted = note_sigint(trainer)
    try:
        result = trainer.fit()
    except BaseException as e:  # noqa: BLE001 - Ray's Ctrl-C handler ends fit() with SystemExit
        if interrupted or isinstance(e, KeyboardInterrupt):  # Ctrl-C, or SIGTERM (run_cli: the same path)
            raise CliError(
                interrupted_code(), f"interrupted ({interruption()}): training run {name!r} was stopped; {resume}"
            ) from None
        if not isinstance(e, Exception):
            raise
        from ray.exceptions import RayActorError
        from ray.train import TrainingFailedError

        if isinstance(e, TrainingFailedError):
            raise CliError(
                EXIT_FAILED,
                f"training run {name!r} failed after --max-failures {req.max_failures} "
                f"restart(s): {failure_summary(e)}; {resume}",
            ) from None
        if isinstance(e, RayActorError):  # the Ray Train controller itself died (its node or process went away)
            raise CliError(
                EXIT_FAILED,
                f"training run {name!r} failed: the Ray Train controller died "
                f"({type(e).__name__}: {last_line(e)}); {resume}",
            ) from None
        raise
    if interrupted:
        raise CliError(
            interrupted_code(), f"interrupted ({interruption()}): training run {name!r} was stopped; {resume}"
        )
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
    return (
        f"--require-efa: run {name!r} stopped after its first collective (NCCL initialisation): the fabric is {fab['verdict']}, not "
        f"efa{f' ({was})' if was else ''}: {why}; nothing was checkpointed"
    )


def resume_hint(name: str, storage: Optional[str]) -> str:
    """What an interrupted or failed run's message ends with."""
    where = f" ({storage})" if storage else ""
    return f"rerun with --name {name} and the same --storage-path{where} to resume from its latest checkpoint"


CURRENT_RUN: list[str] = []
"""The run's name and resume hint once known (for an interruption before the run itself started)."""


def supervise_train(req: TrainRequest, argv: list[str]) -> int:
    """The command's side of a run (training/lifecycle.py): check what can be checked without Ray, then run
    :func:`main_train` in a child process that this one stops, reaps and answers for."""
    from . import lifecycle
    from .trainer import resolve_storage_path

    storage = resolve_storage_path(req.storage_path, os.environ)
    name = req.name or f"fsdp-lm-{int(time.time())}"
    CURRENT_RUN[:] = [name, resume_hint(name, storage)]  # a signal before the run starts still says how to resume
    check_storage_reachable(req, os.environ)
    if req.address:
        probe_ray_address(req.address)
    cmd = [sys.executable, "-m", f"{NAMESPACE}.training", *argv, "--name", name, "--storage-path", storage]
    if not storage.startswith("s3://") and req.address not in (None, "auto", "local"):
        # a directory of a remote cluster's (its nodes write it): this host can neither own nor verify it
        return lifecycle.supervise(
            cmd,
            name=name,
            resume=resume_hint(name, storage),
            as_json=req.json,
            connect_within=(CONNECT_TIMEOUT_S, EXIT_UNREACHABLE, _no_connect(req.address)),
        )
    lease = own_name(storage, name)
    try:
        os.environ[RESUME_ENV] = json.dumps(resume_choice(storage, name))
        return lifecycle.supervise(
            cmd,
            name=name,
            resume=resume_hint(name, storage),
            as_json=req.json,
            tick=lambda: (
                None
                if lease.renew()
                else (
                    EXIT_NAME_IN_USE,
                    f"training run {name!r} lost its name to another run ({lease.where()}) and was stopped",
                )
            ),
            tick_every=RENEW_S,
            connect_within=(CONNECT_TIMEOUT_S, EXIT_UNREACHABLE, _no_connect(req.address)) if req.address else None,
        )
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
        raise CliError(
            EXIT_STORAGE, f"--storage-path {storage}: cannot read run {name!r}'s checkpoints: {first_line(e)}"
        ) from None
    for note in choice.notes:
        print(note, file=sys.stderr, flush=True)
    return {"resume_from": choice.resume_from, "existing": choice.existing, "run_tag": f"r{int(time.time())}"}


def _no_connect(address: str) -> str:
    return (
        f"--address {address}: the Ray cluster did not answer within {CONNECT_TIMEOUT_S:g} s (ray.init retries a "
        "GCS that accepts the connection and never answers); check the address and the cluster's head"
    )


def own_name(storage: str, name: str) -> Any:
    """The run's lease on ``<storage>/<name>`` (training/lease.py), or CliError: 75 while another run holds it."""
    from .lease import Lease, NameInUse
    from .storage_check import explain_s3_error

    try:
        lease = Lease(storage, name)
        lease.acquire()
    except NameInUse as e:
        raise CliError(e.code, str(e)) from None
    except OSError as e:
        raise CliError(
            EXIT_STORAGE, f"--storage-path {storage}: cannot write the run's owner record: {e.strerror or e}"
        ) from None
    except Exception as e:  # botocore: the same answers as the storage check's
        try:
            code, why = explain_s3_error(e, storage, "--storage-path", os.environ)
        except Exception:  # noqa: BLE001 - not an S3 answer: a bug, reported with its trace
            raise e from None
        raise CliError(code, f"{why} (the run's owner record)") from None
    return lease


def main_train(req: TrainRequest) -> int:
    """The run's side: connect to (or start) Ray, train, print the summary; EXIT_OK or CliError."""
    import contextlib

    import ray

    from . import lifecycle
    from .driver_output import install

    # [train] lines plain when piped; Ray Train's monitor noise dropped (training/driver_output.py). The run's stdout
    # is the supervisor's pipe: what counts is the terminal (or not) the supervisor writes to.
    install(piped=os.environ.get(lifecycle.TTY_ENV) != "1" if lifecycle.is_run() else None)
    t0 = time.perf_counter()
    if not lifecycle.is_run():  # the supervisor asked already
        check_storage_reachable(req, os.environ)
    with contextlib.ExitStack() as stack:
        if req.address:
            if not lifecycle.is_run():
                probe_ray_address(req.address)
            try:
                ray.init(address=req.address)
            except Exception as e:  # ConnectionError, auth errors, version mismatch...
                raise CliError(EXIT_UNREACHABLE, f"ray.init(address={req.address!r}) failed: {first_line(e)}") from None
            if lifecycle.is_run():
                lifecycle.mark_connected()
            stack.callback(ray.shutdown)
            if req.use_gpu:
                req = place_gpu_ranks(req, ray.nodes())
                gpu_memory_problem(None, req, os.environ)  # now that the rank count is known
            wait_for_workers(ray.cluster_resources, req.workers, req.use_gpu, req.wait_for_workers_s)
        else:
            from ..efacheck.local_cluster import local_cluster

            try:
                stack.enter_context(local_cluster(worker_nodes=req.workers))
            except Exception as e:
                raise CliError(
                    EXIT_RAY_START, f"Ray could not start the local cluster: {type(e).__name__}: {first_line(e)}"
                ) from None
        summary = run_training(req)
    summary["wall_s"] = round(time.perf_counter() - t0, 2)
    print(
        f"[summary] steps={summary['steps']} loss {summary['loss_first']:.4f} -> {summary['loss_last']:.4f} "
        f"world={summary['world_size']} nodes={summary['nodes']} tok/s={summary['tokens_per_s']:.0f} "
        f"resumed_from={summary['resumed_from_step']} wall={summary['wall_s']}s "
        f"fabric={fabric_words(summary.get('fabric'))}",
        flush=True,
    )
    if lifecycle.is_run():
        lifecycle.write_result(EXIT_OK, None, summary if req.json else None)
    elif req.json:
        print(json.dumps(summary), flush=True)
    return EXIT_OK
