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


class StaticLayerCache(LayerCache):
    """One Block's self-attention k/v in buffers of the final length, allocated at the first write.

    The prompt is written eagerly at its positions (``k`` / ``v`` are then views of the filled
    part, as in :class:`LayerCache`). Once the cache steps (``position`` set, a (1,) tensor shared
    by every layer), each new token's k/v are written in place at ``position`` and the whole
    buffers are returned: their shape never changes, so one compiled graph serves every step; the
    step's mask hides the columns not written yet. A sliding window is a mask here: the buffers
    hold every position, not a rolling window.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.position: Tensor | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.position is not None:
            for buffer, new in zip(self._buffers, (k, v)):
                buffer[:, :, self.position] = new
            return self._buffers
        start, self.length = self.length, self.length + k.shape[2]
        if self.length > self.capacity:
            raise ValueError(f"{self.length} positions do not fit a static cache of {self.capacity}")
        if self._buffers is None:  # zeros, not empty: a hidden column's value still meets weight 0 (0 * NaN = NaN)
            self._buffers = tuple(x.new_zeros(*x.shape[:2], self.capacity, x.shape[3]) for x in (k, v))
        for buffer, new in zip(self._buffers, (k, v)):
            buffer[:, :, start:self.length] = new
        self.k, self.v = (buffer[:, :, :self.length] for buffer in self._buffers)
        return self.k, self.v


class StaticCache(KVCache):
    """The cache of a whole stack for compiled decoding: a :class:`StaticLayerCache` of
    ``capacity`` positions per Block, all stepping at the one ``position`` tensor."""

    def __init__(self, n_layers: int, capacity: int, device: torch.device) -> None:
        self.layers = [StaticLayerCache(capacity) for _ in range(n_layers)]
        self.capacity = capacity
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.steps = 0  # tokens decoded one at a time after the prompt

    @property
    def length(self) -> int:
        return self.layers[0].length + self.steps

    def step(self) -> int:
        """Set ``position`` to the next token's (every layer writes there from the first step on)
        and count the token; returns the position."""
        if self.steps == 0:
            for layer in self.layers:
                layer.position = self.position
        position = self.length
        if position >= self.capacity:
            raise ValueError(f"position {position} is past the static cache's {self.capacity}")
        self.position.fill_(position)
        self.steps += 1
        return position
