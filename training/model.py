"""Small decoder-only transformer used by the training job.

Blocks live in an ``nn.ModuleList`` so FSDP2 can ``fully_shard`` each block
separately (per-block all-gather / reduce-scatter) before sharding the root.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 1024
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 512
    seq_len: int = 64

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, ModelConfig] = {
    # CPU default: a few hundred thousand parameters, fast on 2 cores.
    "tiny": ModelConfig(vocab_size=1024, d_model=128, n_layers=2, n_heads=4, d_ff=512, seq_len=64),
    # ~1.1B parameters: sized for 8x L4 (24 GB each) with FSDP2 + bf16.
    "1b": ModelConfig(vocab_size=32000, d_model=2048, n_layers=20, n_heads=16, d_ff=8192, seq_len=1024),
}


def get_config(preset: str) -> ModelConfig:
    try:
        return PRESETS[preset]
    except KeyError:
        raise ValueError(f"unknown preset {preset!r}; choose from {sorted(PRESETS)}") from None


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.d_model % cfg.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        shape = (b, t, self.n_heads, c // self.n_heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff, bias=False),
            nn.GELU(),
            nn.Linear(cfg.d_ff, cfg.d_model, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DecoderLM(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.embed(idx) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


LOSS_CHUNK_TOKENS = 1024
"""Positions per chunk of :func:`lm_loss`: one chunk's fp32 copy is ``1024 x vocab x 4`` bytes (125 MiB at 32000)."""


class _ChunkedCrossEntropy(torch.autograd.Function):
    """Mean next-token cross entropy over (B, T, V) logits without an fp32 copy of all of them.

    Each chunk of positions is cast to fp32, its log-sum-exp and the gradient ``(softmax - onehot) / n`` computed
    there and the gradient kept in the logits' own dtype (what autograd would hand back to bf16 logits anyway), so
    the fp32 memory is one chunk's instead of the whole (B, T-1, V) log-softmax that ``F.cross_entropy(...float())``
    keeps for backward, plus its copies.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, tokens: torch.Tensor, chunk: int) -> torch.Tensor:  # noqa: ANN001
        b, t, _ = logits.shape
        n = b * (t - 1)
        grad = torch.zeros_like(logits)
        total = torch.zeros((), dtype=torch.float32, device=logits.device)
        for i in range(b):
            for s in range(0, t - 1, chunk):
                e = min(s + chunk, t - 1)
                x = logits[i, s:e].float()
                target = tokens[i, s + 1 : e + 1]
                lse = torch.logsumexp(x, dim=-1)
                total += (lse - x.gather(1, target[:, None]).squeeze(1)).sum()
                g = x.sub_(lse[:, None]).exp_()  # softmax, in place of the chunk's fp32 copy
                g[torch.arange(e - s, device=g.device), target] -= 1.0
                grad[i, s:e] = g.div_(n)
        ctx.save_for_backward(grad)
        return total / n

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):  # noqa: ANN205
        (grad,) = ctx.saved_tensors
        return grad * grad_out.to(grad.dtype), None, None


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor, chunk: int = LOSS_CHUNK_TOKENS) -> torch.Tensor:
    """Next-token cross entropy: predict tokens[:, 1:] from logits[:, :-1], accumulated in fp32.

    The same value as ``F.cross_entropy(logits[:, :-1].reshape(-1, V).float(), tokens[:, 1:].reshape(-1))`` (tested
    within fp32 rounding), computed in chunks of ``chunk`` positions so that no fp32 copy of all the logits exists
    (1b preset, batch 8: 1 GiB per copy; training/memory.py counts what remains).
    """
    return _ChunkedCrossEntropy.apply(logits, tokens, chunk)


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def approx_params(cfg: ModelConfig) -> int:
    per_block = 4 * cfg.d_model**2 + 2 * cfg.d_model * cfg.d_ff + 4 * cfg.d_model
    return cfg.n_layers * per_block + 2 * cfg.vocab_size * cfg.d_model + cfg.seq_len * cfg.d_model + 2 * cfg.d_model


__all__ = [
    "ModelConfig",
    "PRESETS",
    "get_config",
    "DecoderLM",
    "lm_loss",
    "count_params",
    "approx_params",
    "LOSS_CHUNK_TOKENS",
]
