"""The key/value cache for incremental decoding.

Self-attention keys/values grow by the new positions at every step;
cross-attention keys/values depend only on the encoder output, so they are
computed once (on the first step) and reused.
"""

from __future__ import annotations

import torch
from torch import Tensor


class LayerCache:
    """One Block's cache: growing self-attention k/v and fixed cross-attention k/v."""

    def __init__(self) -> None:
        self.k: Tensor | None = None  # (B, H_kv, T, Dh)
        self.v: Tensor | None = None
        self.cross: tuple[Tensor, Tensor] | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new positions' k/v (B, H_kv, L, Dh); return all k/v so far."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        return self.k, self.v

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def reorder(self, index: Tensor, cross: bool = True) -> None:
        """Keep batch rows ``index`` (beam search reorders hypotheses). ``cross=False``
        leaves the cross-attention k/v alone: right when rows only move among copies of
        the same source (the beams of one sentence), whose cross k/v are identical."""
        if self.k is not None:
            self.k, self.v = self.k[index], self.v[index]
        if cross and self.cross is not None:
            self.cross = (self.cross[0][index], self.cross[1][index])


class KVCache:
    """The cache of a whole stack: one :class:`LayerCache` per Block."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [LayerCache() for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """Number of positions already decoded."""
        return self.layers[0].length

    def reorder(self, index: Tensor, cross: bool = True) -> None:
        for layer in self.layers:
            layer.reorder(index, cross)
