"""ALiBi (Press et al. 2022; BLOOM, MPT): attention with linear biases, no position vectors.

Each head adds ``slope_h * (key - query)`` to its attention logits: a penalty growing linearly
with the distance, steeper in some heads than in others. It is an additive attention bias of
the same kind as T5's relative position bias (``zoo.nn.relative_bias``): computed once per
forward by the tower that owns it and folded with the mask into every layer's context, so the
Block knows nothing about it. It has no parameters and no table, so it runs at any length.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def alibi_slopes(n_heads: int) -> Tensor:
    """The heads' slopes (n_heads,), float32, computed as BLOOM's ``_get_alibi_slopes`` does.

    For a power of two n: the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8). For any other
    n, the sequence of the power of two p below it, then the odd terms of the sequence for 2p
    for the remaining n - p heads (the paper's rule, so that the slopes stay spread out).
    """
    closest = 2 ** math.floor(math.log2(n_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + closest, dtype=torch.int32))
    if closest != n_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest) - 3))), dtype=torch.float32)
        extra = torch.arange(1, 1 + 2 * min(closest, n_heads - closest), 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra)])
    return slopes


class ALiBi(nn.Module):
    """(q_len, k_len, start) -> additive attention bias (1, H, q_len, k_len): slope_h * (key - query).

    BLOOM adds ``slope_h * key`` (the key's position counted over the real tokens); softmax is
    the same under a constant added to a query's row, so for every query the two are one
    distribution. The relative form is the same for every padding (the real tokens' distances do
    not change) and for a query decoded after ``start`` cached positions.

    Args:
        n_heads: one slope per head (:func:`alibi_slopes`).
    """

    def __init__(self, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        # derived from n_heads alone: not stored in checkpoints
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, q_len: int, k_len: int, start: int = 0) -> Tensor:
        """Queries are positions start .. start+q_len-1 (incremental decoding), keys 0 .. k_len-1."""
        device = self.slopes.device
        query = torch.arange(start, start + q_len, device=device)[:, None]
        key = torch.arange(k_len, device=device)[None, :]
        return (self.slopes[:, None, None] * (key - query).to(self.slopes.dtype))[None]

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}"
