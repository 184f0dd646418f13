"""T5's relative position bias: a learned scalar per head for each (bucketed) distance
between a query and a key, added to the attention logits.

Computed once per forward by the stack's owner and passed to every Block of the stack
as an additive ``bias`` (the Block itself knows nothing about positions).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def relative_position_bucket(relative: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """Bucket of each distance key - query (any shape, long).

    Half the buckets (per direction when ``bidirectional``) hold exact distances
    0 .. n/2 - 1; the others cover n/2 .. ``max_distance`` logarithmically, and
    anything farther shares the last bucket. A causal decoder only sees the past,
    so it buckets -min(distance, 0).
    """
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = -torch.clamp(relative, max=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    # log-spaced buckets; clamp(min=1) only avoids log(0) where is_small picks the exact value anyway
    large = max_exact + (
        torch.log(distance.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class RelativePositionBias(nn.Module):
    """(q_len, k_len, start) -> additive attention bias (1, H, q_len, k_len).

    Args:
        n_heads: one bias value per head.
        bidirectional: True for an encoder, False for a causal decoder.
        num_buckets, max_distance: T5's 32 and 128.
    """

    def __init__(self, n_heads: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance
        self.embedding = nn.Embedding(num_buckets, n_heads)

    def forward(self, q_len: int, k_len: int, start: int = 0) -> Tensor:
        """Queries are positions start .. start+q_len-1 (incremental decoding), keys 0 .. k_len-1."""
        device = self.embedding.weight.device
        query = torch.arange(start, start + q_len, device=device)[:, None]
        key = torch.arange(k_len, device=device)[None, :]
        buckets = relative_position_bucket(key - query, self.bidirectional, self.num_buckets, self.max_distance)
        return self.embedding(buckets).permute(2, 0, 1)[None]
