"""Synthetic token batches.

Batches are a pure function of (seed, rank, step) so a run resumed from a
checkpoint at step N sees exactly the batches it would have seen without the
failure. Tokens follow a fixed per-seed bigram table so there is structure to
learn and the loss can actually go down.
"""

from __future__ import annotations

import torch


class RandomTokens:
    def __init__(self, vocab_size: int, seq_len: int, batch_size: int, seed: int = 0, rank: int = 0) -> None:
        self.vocab_size = vocab_size
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        # Shared across ranks (same seed): each token has a small set of likely successors.
        g = torch.Generator().manual_seed(seed)
        self._next = torch.randint(0, vocab_size, (vocab_size, 4), generator=g)

    def batch(self, step: int) -> torch.Tensor:
        """Token IDs of shape (batch_size, seq_len) for ``step`` on this rank."""
        g = torch.Generator().manual_seed((self.seed + self.rank) * 1_000_003 + step)
        out = torch.empty(self.batch_size, self.seq_len, dtype=torch.long)
        out[:, 0] = torch.randint(0, self.vocab_size, (self.batch_size,), generator=g)
        choice = torch.randint(0, self._next.shape[1], (self.batch_size, self.seq_len), generator=g)
        for t in range(1, self.seq_len):
            out[:, t] = self._next[out[:, t - 1], choice[:, t]]
        return out
