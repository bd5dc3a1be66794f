"""How much GPU memory one rank of the FSDP2 training needs, from the model's shapes, and whether a GPU holds it.

An analytic model of what ``train_func`` keeps at its peak (the end of the forward pass / start of backward), per rank:

- sharded state, divided by the ranks: fp32 parameters (4 B each), fp32 gradients (4), AdamW's two fp32 moments (8);
- unsharded parameters in the compute dtype (bf16 with the GPU's ``MixedPrecisionPolicy``): the root group (embedding,
  positions, final norm, head; FSDP2 keeps the root unsharded between forward and backward) and two blocks (the one
  running and the one prefetched);
- unsharded gradients of the root and one block in the compute dtype, plus that block's fp32 reduce-scatter input
  (``reduce_dtype=float32``);
- activations autograd saves, per token per block ``8 d + 2 ff`` elements in the compute dtype (the residual input,
  both norms' outputs, q/k/v, the attention output and the projection's input, the MLP's hidden before and after GELU;
  measured with ``saved_tensors_hooks``) and fp32 norm statistics and attention log-sum-exp; plus the final norm's
  input and output;
- the loss (training/model.py ``lm_loss``): the logits and the gradient it keeps, both in the compute dtype, and one
  fp32 chunk (``LOSS_CHUNK_TOKENS`` positions x vocabulary) twice over.

The GPU's memory is the catalogue's ``gpu_memory_mib`` (EC2 ``GpuInfo.MemoryInfo.SizeInMiB``; the stack puts it on
every Ray pod as ``RAY_EFA_EKS_GPU_MEMORY_MIB``); a rank fits when its peak plus :data:`CUDA_RESERVE_GIB` (CUDA context,
NCCL and cuBLAS workspaces) stays within :data:`USABLE_FRACTION` of it (the caching allocator's fragmentation).
The model is checked against torch's own ``FSDPMemTracker`` on CPU for small shapes (tests/training/test_memory.py).
Pure: no torch import, so the CLI can refuse before Ray starts.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .model import LOSS_CHUNK_TOKENS, ModelConfig

GIB = 2**30
CUDA_RESERVE_GIB = 1.0
"""Outside torch's tensors on each GPU: the CUDA context (~0.3-0.6 GiB with lazy module loading), NCCL's buffers and
cuBLAS workspaces."""
USABLE_FRACTION = 0.95
"""Of the GPU's memory, what tensors can use after the caching allocator's fragmentation."""
GPU_MEMORY_ENV = "RAY_EFA_EKS_GPU_MEMORY_MIB"
"""Set by the stack on every Ray pod (components/ray/raycluster.py): one worker GPU's memory, MiB, from the catalogue."""
GPU_MODEL_ENV = "RAY_EFA_EKS_GPU_MODEL"
"""Set by the stack beside it: the worker GPUs' model (e.g. ``L4``)."""


def param_counts(cfg: ModelConfig) -> tuple[int, int]:
    """(parameters of one block, parameters of the root group: embeddings, final norm and head)."""
    d, ff = cfg.d_model, cfg.d_ff
    block = 4 * d * d + 2 * d * ff + 4 * d
    root = 2 * cfg.vocab_size * d + cfg.seq_len * d + 2 * d
    return block, root


def estimate(cfg: ModelConfig, world: int, batch_size: int, compute_bytes: int = 2) -> dict[str, Any]:
    """Peak bytes per rank: the parts, each phase's peak (``forward_peak``, ``backward_peak``, ``step_peak``), the
    phase that peaks (``peak_phase``) and its bytes (``total``).

    world: ranks sharing the state. batch_size: sequences per rank per step. compute_bytes: 2 with the GPU's bf16
    mixed precision, 4 for a CPU (fp32) run.
    """
    if world < 1 or batch_size < 1:
        raise ValueError(f"world and batch_size must be >= 1, got {world} and {batch_size}")
    block, root = param_counts(cfg)
    params = cfg.n_layers * block + root
    c = compute_bytes
    tokens = batch_size * cfg.seq_len
    reduce_scatter = 4 if c != 4 else 0
    per_token_block = (8 * cfg.d_model + 2 * cfg.d_ff) * c + 4 * (4 + cfg.n_heads)
    chunk = min(LOSS_CHUNK_TOKENS, cfg.seq_len)
    state = {"params": params * 4 / world, "grads": params * 4 / world, "optimizer": params * 8 / world}
    activations = tokens * (cfg.n_layers * per_token_block + 2 * cfg.d_model * c)
    logits = tokens * cfg.vocab_size * c
    phases = {
        # end of forward: the root unsharded, every block's activations, the logits, the loss's gradient, a chunk
        "forward": state["params"]
        + state["optimizer"]
        + root * c
        + activations
        + 2 * logits
        + 2 * chunk * cfg.vocab_size * 4,
        # backward: every activation still held, the root unsharded and the head's weight gradient; first the loss's
        # gradient of the logits, then (once the head consumed it) two blocks gathered, one block's gradients and
        # their fp32 reduce-scatter input, and the gradient flowing between blocks. Sharded gradients grow only as
        # activations are freed, so the start of backward is its peak.
        "backward": state["params"]
        + state["optimizer"]
        + root * c
        + cfg.vocab_size * cfg.d_model * c
        + activations
        + max(logits, 2 * block * c + block * (c + reduce_scatter) + 2 * tokens * cfg.d_model * c),
        # optimizer step: sharded params, gradients and moments, and AdamW's temporaries (about one more copy)
        "step": sum(state.values()) + params * 4 / world,
    }
    peak = max(phases, key=phases.get)
    return {
        **state,
        "activations": activations,
        "logits": logits,
        **{f"{k}_peak": v for k, v in phases.items()},
        "peak_phase": peak,
        "total": phases[peak],
    }


def budget_bytes(gpu_memory_mib: float) -> float:
    """What one rank's tensors may use on a GPU of ``gpu_memory_mib``."""
    return gpu_memory_mib * 2**20 * USABLE_FRACTION - CUDA_RESERVE_GIB * GIB


def fits(cfg: ModelConfig, world: int, batch_size: int, gpu_memory_mib: float) -> tuple[bool, float, float]:
    """(fits, estimated GiB per rank, budget GiB) on a GPU of ``gpu_memory_mib``."""
    need = estimate(cfg, world, batch_size)["total"]
    budget = budget_bytes(gpu_memory_mib)
    return need <= budget, need / GIB, budget / GIB


def min_ranks(cfg: ModelConfig, batch_size: int, gpu_memory_mib: float, limit: int = 4096) -> Optional[int]:
    """The fewest ranks with which ``cfg`` fits (None when even ``limit`` ranks do not: activations do not shard)."""
    for world in range(1, limit + 1):
        if fits(cfg, world, batch_size, gpu_memory_mib)[0]:
            return world
    return None


def gpu_from_env(environ: Mapping[str, str]) -> Optional[dict[str, Any]]:
    """{"memory_mib", "model"} of the worker GPUs as the stack put them on the pod, or None when not set/readable."""
    raw = (environ.get(GPU_MEMORY_ENV) or "").strip()
    try:
        mib = float(raw)
    except ValueError:
        return None
    if not mib > 0:
        return None
    return {"memory_mib": mib, "model": environ.get(GPU_MODEL_ENV) or "GPU"}


def problem(preset: str, cfg: ModelConfig, world: int, batch_size: int, gpu: Mapping[str, Any]) -> Optional[str]:
    """Why ``preset`` at ``world`` ranks and ``--batch-size`` cannot fit on ``gpu`` (None when it fits)."""
    ok, need, budget = fits(cfg, world, batch_size, gpu["memory_mib"])
    if ok:
        return None
    fewest = min_ranks(cfg, batch_size, gpu["memory_mib"])
    fix = (
        f"use at least {fewest} ranks (--workers {fewest}, on enough GPUs)"
        if fewest
        else "no number of ranks fits at this batch size"
    )
    smaller = next((b for b in range(batch_size - 1, 0, -1) if fits(cfg, world, b, gpu["memory_mib"])[0]), None)
    if smaller:
        fix += f", or --batch-size {smaller}"
    return (
        f"--preset {preset} with {world} rank(s) and --batch-size {batch_size} needs about {need:.1f} GiB per "
        f"GPU and a {gpu['model']} ({gpu['memory_mib'] / 1024:.1f} GiB) leaves {budget:.1f} GiB to tensors: it "
        f"would run out of memory; {fix} (estimate: training/memory.py, table in docs/training.md)"
    )


TABLE_RANKS = (1, 2, 4, 8, 16)
"""Rank counts the docs table shows."""


def markdown_tables(presets: Mapping[str, ModelConfig], gpus: list[tuple[str, float, str]], batch_size: int = 8) -> str:
    """The docs/training.md tables: GiB per rank of each preset by rank count, then the fewest ranks each preset
    needs on each GPU. gpus: (model, memory MiB, instance families) from the catalogue."""
    lines = [
        f"| preset (`--batch-size {batch_size}`) | "
        + " | ".join(f"{w} rank{'s' * (w > 1)}" for w in TABLE_RANKS)
        + " |",
        "|---" * (len(TABLE_RANKS) + 1) + "|",
    ]
    for name, cfg in presets.items():
        cells = []
        for w in TABLE_RANKS:
            e = estimate(cfg, w, batch_size)
            cells.append(f"{e['total'] / GIB:.2f} ({e['peak_phase']})")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| GPU | memory GiB | budget GiB | instance families | "
        + " | ".join(f"`{n}`: fewest ranks" for n in presets)
        + " |",
        "|---" * (4 + len(presets)) + "|",
    ]
    for model, mib, families in gpus:
        fewest = [min_ranks(cfg, batch_size, mib) for cfg in presets.values()]
        lines.append(
            f"| {model} | {mib / 1024:.2f} | {budget_bytes(mib) / GIB:.2f} | {families} | "
            + " | ".join(str(f) if f else "none" for f in fewest)
            + " |"
        )
    return "\n".join(lines)
