"""Builds the TorchTrainer for the cluster shape (one rank per GPU, or per node on CPU)."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping, Optional

from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig, UserCallback
from ray.train.torch import TorchConfig, TorchTrainer

from .train_func import train_func

STORAGE_PATH_ENV = "RAY_EFA_EKS_STORAGE_PATH"
"""Set on the RayCluster pods (e.g. ``s3://<bucket>/ray-train``): where runs checkpoint by default."""


BACKEND_ENV = "RAY_EFA_EKS_TRAIN_BACKEND"
"""``gloo`` runs a ``--use-gpu`` run's collectives and model on CPU: for rehearsing the GPU path's placement on a
local cluster whose nodes declare logical GPUs (no CUDA behind them). Unset: nccl with --use-gpu, else gloo."""
BACKENDS = ("nccl", "gloo")


def num_workers_for(gpu_nodes: int, gpus_per_node: int) -> int:
    """One Ray Train worker per GPU across the node group."""
    if gpu_nodes < 1 or gpus_per_node < 1:
        raise ValueError("gpu_nodes and gpus_per_node must be >= 1")
    return gpu_nodes * gpus_per_node


def gpus_per_node(nodes: list[dict]) -> list[int]:
    """Whole GPUs of each alive Ray node that has any (``ray.nodes()`` entries), largest first."""
    counts = [int(float(n.get("Resources", {}).get("GPU", 0))) for n in nodes if n.get("Alive", n.get("alive"))]
    return sorted((c for c in counts if c >= 1), reverse=True)


def gpu_ranks(per_node: list[int]) -> tuple[int, str]:
    """(ranks for one per GPU the cluster offers, how that adds up in words); (0, ...) without GPU nodes.

    A rank takes one GPU (trainer.build_trainer), and the pods take whole nodes, so every GPU is one rank.
    """
    if not per_node:
        return 0, "no GPU nodes"
    if len(set(per_node)) == 1:
        return num_workers_for(len(per_node), per_node[0]), f"{len(per_node)} node(s) x {per_node[0]} GPUs"
    return sum(per_node), " + ".join(str(c) for c in per_node) + " GPUs on " + f"{len(per_node)} nodes"


def resolve_backend(use_gpu: bool, env: Mapping[str, str]) -> str:
    """The process group's backend: $RAY_EFA_EKS_TRAIN_BACKEND when set, else nccl with --use-gpu, else gloo."""
    value = (env.get(BACKEND_ENV) or ("nccl" if use_gpu else "gloo")).strip().lower()
    if value not in BACKENDS:
        raise ValueError(
            f"{BACKEND_ENV}={env.get(BACKEND_ENV)!r}: expected one of {', '.join(BACKENDS)} (gloo "
            "rehearses --use-gpu on logical GPUs, on CPU)"
        )
    if value == "nccl" and not use_gpu:
        raise ValueError(f"{BACKEND_ENV}=nccl needs --use-gpu (NCCL runs on GPUs)")
    return value


def default_storage_path() -> str:
    return os.path.join(tempfile.gettempdir(), "ray-efa-eks-train")


def resolve_storage_path(cli_value: Optional[str], env: Mapping[str, str]) -> str:
    """``RunConfig.storage_path``: the explicit value, else ``$RAY_EFA_EKS_STORAGE_PATH``, else a local temp dir.

    URIs (``s3://...``) pass through untouched; local paths are made absolute
    because Ray resolves them on other processes with other working directories.
    """
    value = cli_value or env.get(STORAGE_PATH_ENV) or default_storage_path()
    return value if "://" in value else os.path.abspath(os.path.expanduser(value))


class Progress(UserCallback):
    """Prints ``[train] step N/M loss ...`` on the Ray Train controller after every report.

    Rank 0's own prints stay in its worker's log: a local cluster's worker nodes (own temp dirs) do not stream
    their logs to the driver, while the controller's output always reaches the driver (and a job's log).
    ``after_report`` runs on the controller once every rank has reported (ray/train/v2/api/callback.py).
    """

    def after_report(self, run_context: Any, metrics: list, checkpoint: Any) -> None:
        m = metrics[0] if metrics else {}
        if "step" in m:
            print(
                f"[train] step {m['step']}/{m.get('steps', '?')} loss {m['loss']:.4f} global_tok/s "
                f"{m.get('global_tokens_per_s', 0):.0f} world {m.get('world_size', '?')}"
                f"{' checkpoint' if checkpoint is not None else ''}",
                flush=True,
            )


def build_trainer(
    *,
    num_workers: int = 2,
    use_gpu: bool = False,
    train_config: Optional[dict[str, Any]] = None,
    storage_path: Optional[str] = None,
    name: str = "fsdp-lm",
    max_failures: int = 0,
    resources_per_worker: Optional[dict[str, float]] = None,
    placement_strategy: str = "SPREAD",
    backend: Optional[str] = None,
) -> TorchTrainer:
    """TorchTrainer with gloo on CPU / nccl on GPU (``backend`` overrides; gloo with ``use_gpu`` rehearses the
    GPU placement on logical GPUs, and train_func then computes on CPU).

    runtime_env (pip packages, NCCL/FI_* env vars) is set on ``ray.init`` or on
    the job submission (see ``training.__main__ submit``), not here, so the same
    trainer works locally and on the deployed cluster.
    SPREAD places ranks on distinct nodes when possible, so a local 2-node
    cluster exercises cross-node collectives like the deployed one.
    ``name`` + ``storage_path`` identify the run: Ray Train restores the latest
    checkpoint of an existing run directory (its checkpoint manager snapshot), so
    a new ``fit()`` with the same pair resumes where the old run left off.
    """
    if resources_per_worker is None:
        resources_per_worker = {"CPU": 1, "GPU": 1} if use_gpu else {"CPU": 1}
    return TorchTrainer(
        train_func,
        train_loop_config=dict(train_config or {}),
        torch_config=TorchConfig(backend=backend or ("nccl" if use_gpu else "gloo")),
        scaling_config=ScalingConfig(
            num_workers=num_workers,
            use_gpu=use_gpu,
            resources_per_worker=resources_per_worker,
            placement_strategy=placement_strategy,
        ),
        run_config=RunConfig(
            name=name,
            storage_path=resolve_storage_path(storage_path, os.environ),
            failure_config=FailureConfig(max_failures=max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            callbacks=[Progress()],
        ),
    )
