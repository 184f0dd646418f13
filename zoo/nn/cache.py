"""The key/value cache for incremental decoding.

Self-attention keys/values grow by the new positions at every step;
cross-attention keys/values depend only on the encoder output, so they are
computed once (on the first step) and reused. A layer whose mask lets a later query see
only the latest keys (a causal sliding window, ``Mask.cache_keep``) keeps only those: a
rolling buffer, its memory bounded by the window whatever the length decoded.
"""

from __future__ import annotations

import torch
from torch import Tensor


class LayerCache:
    """One Block's cache: self-attention k/v (all of them, or the latest ``keep``) and fixed
    cross-attention k/v.

    Kept whole, the keys and values are written into buffers that double when full, and ``k`` /
    ``v`` are views of their filled part: concatenating at every step would copy the whole cache
    into fresh memory for each new token. A rolling buffer (``keep``) is bounded by the window, and
    a forward that records gradients concatenates (a buffer written in place could not be
    differentiated through later steps).
    """

    def __init__(self, keep: int | None = None) -> None:
        self.k: Tensor | None = None  # (B, H_kv, T, Dh), T <= keep when keep is set
        self.v: Tensor | None = None
        self.cross: tuple[Tensor, Tensor] | None = None
        self.keep = keep
        self.length = 0  # positions decoded so far (more than T once the buffer rolls)
        self._buffers: tuple[Tensor, Tensor] | None = None  # (B, H_kv, capacity, Dh) each: k, v kept whole

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add the new positions' k/v (B, H_kv, L, Dh); return the kept k/v followed by the new
        ones (the latest keys: the attention drops the mask's columns of the others)."""
        self.length += k.shape[2]
        if self.keep is None and not (torch.is_grad_enabled() and k.requires_grad):
            self.k, self.v = self._write(k, v)
            return self.k, self.v
        if self.k is not None:
            k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        start = 0 if self.keep is None else max(k.shape[2] - self.keep, 0)
        self.k, self.v = k[:, :, start:], v[:, :, start:]
        self._buffers = None
        return k, v

    def _write(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """k/v (B, H_kv, L, Dh) written after the held ones, into the buffers (grown when full):
        views of every position held."""
        held = 0 if self.k is None else self.k.shape[2]
        total = held + k.shape[2]
        if self._buffers is None or total > self._buffers[0].shape[2]:
            capacity = max(total, 2 * held)
            grown = tuple(x.new_empty(*x.shape[:2], capacity, x.shape[3]) for x in (k, v))
            if held:
                grown[0][:, :, :held], grown[1][:, :, :held] = self.k, self.v
            self._buffers = grown
        for buffer, new in zip(self._buffers, (k, v)):
            buffer[:, :, held:total] = new
        return self._buffers[0][:, :, :total], self._buffers[1][:, :, :total]

    def reorder(self, index: Tensor, cross: bool = True) -> None:
        """Keep batch rows ``index`` (beam search reorders hypotheses). ``cross=False``
        leaves the cross-attention k/v alone: right when rows only move among copies of
        the same source (the beams of one sentence), whose cross k/v are identical."""
        if self._buffers is not None:
            held = self.k.shape[2]
            self._buffers = (self._buffers[0][index], self._buffers[1][index])
            self.k, self.v = self._buffers[0][:, :, :held], self._buffers[1][:, :, :held]
        elif self.k is not None:
            self.k, self.v = self.k[index], self.v[index]
        if cross and self.cross is not None:
            self.cross = (self.cross[0][index], self.cross[1][index])


class KVCache:
    """The cache of a whole stack: one :class:`LayerCache` per Block; ``keep``: each layer's
    rolling-buffer size (None: keep everything)."""

    def __init__(self, n_layers: int, keep: list[int | None] | None = None) -> None:
        self.layers = [LayerCache(n) for n in (keep or [None] * n_layers)]

    @property
    def length(self) -> int:
        """Number of positions already decoded."""
        return self.layers[0].length

    def reorder(self, index: Tensor, cross: bool = True) -> None:
        for layer in self.layers:
            layer.reorder(index, cross)
