"""Relative position biases: a learned scalar per head for each (bucketed) distance between a
query and a key, added to the attention logits. T5's over a sequence
(:class:`RelativePositionBias`); BEiT's and Swin's over the 2-D offsets of a patch grid or a
window (:class:`WindowRelativeBias`).

Computed once per forward by the stack's owner and passed to the Blocks of the stack as an
additive ``bias`` (the Block itself knows nothing about positions): one module for every layer,
or one per layer (:func:`relative_biases`), as rotary tables are.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from zoo.nn.windows import window_layout


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


def offset_index(rows: Tensor, columns: Tensor, window: tuple[int, int]) -> Tensor:
    """The table row of each (query, key) pair of positions at in-window coordinates ``rows``,
    ``columns`` (L,) each -> (L, L) long: the 2-D offset (dr, dc) = query - key, each in
    (-W, W), numbered row-major, (dr + Wh - 1) * (2 Ww - 1) + dc + Ww - 1 (BEiT's and Swin's order)."""
    wh, ww = window
    dr, dc = rows[:, None] - rows[None, :], columns[:, None] - columns[None, :]
    return (dr + wh - 1) * (2 * ww - 1) + dc + ww - 1


def window_offsets(window: tuple[int, int]) -> int:
    """The distinct 2-D offsets between two patches of a Wh x Ww window: (2 Wh - 1)(2 Ww - 1)."""
    return (2 * window[0] - 1) * (2 * window[1] - 1)


class WindowRelativeBias(nn.Module):
    """A learned bias per head for each 2-D offset between two patches of a Wh x Ww window
    (BEiT over its whole patch grid, Swin inside each window); with ``class_token``, three more
    for BEiT's CLS: CLS -> patch, patch -> CLS, CLS -> CLS (the CLS stands before the patches).

    (q_len, k_len, start) -> additive attention bias (1, H, L, K) over the CLS (if any) and the
    window's patches row by row (L = K); or, placed over a ``grid`` of square windows rolled by
    ``shift`` (Swin), over its patches row by row, and the keys of the padding to whole windows
    after them (K = L + the padding, ``zoo.nn.windows``), where pairs in different windows get
    any value (the mask hides them). Another sequence is refused (the table's grid is fixed).

    Args:
        n_heads: one value per head.
        window: (Wh, Ww), the grid the table spans (BEiT: the image's patch grid), or one side
            of a square one.
        class_token: the three CLS entries, after the offsets (BEiT's table layout).
        grid, shift: the (H, W) patch grid the window tiles, and its cyclic shift (Swin's layers);
            None: the window is the whole grid.
    """

    def __init__(self, n_heads: int, window: int | tuple[int, int] | list[int], class_token: bool = False,
                 grid: tuple[int, int] | list[int] | None = None, shift: int = 0):
        super().__init__()
        window = (window, window) if isinstance(window, int) else window
        self.window, self.class_token = (int(window[0]), int(window[1])), class_token
        if grid is not None and (class_token or self.window[0] != self.window[1]):
            raise ValueError(f"a relative bias over a grid of windows takes square windows and no CLS: "
                             f"window={self.window}, class_token={class_token}")
        offsets = window_offsets(self.window)
        self.table = nn.Parameter(torch.zeros(offsets + 3 * class_token, n_heads))
        self.length = self.window[0] * self.window[1] + class_token if grid is None else grid[0] * grid[1]
        if grid is None:
            patches = torch.arange(self.window[0] * self.window[1], device="cpu")  # (a meta-built net too)
            index = offset_index(patches // self.window[1], patches % self.window[1], self.window)
        else:
            _, _, rows, columns = window_layout((grid[0], grid[1]), self.window[0], shift)
            index = offset_index(rows, columns, self.window)[: self.length]  # (the padding queries are not run)
        if class_token:
            index = nn.functional.pad(index, (1, 0, 1, 0))
            index[0, :], index[:, 0], index[0, 0] = offsets, offsets + 1, offsets + 2
        self.register_buffer("index", index, persistent=False)  # (L, L), from the window alone

    def forward(self, q_len: int, k_len: int, start: int = 0) -> Tensor:
        """(1, H, L, K); L = Wh * Ww (+ 1 with the CLS), or over a grid of windows H * W."""
        length = self.length
        if (q_len, k_len, start) != (length, length, 0):
            raise ValueError(f"a relative position bias over a {self.window[0]}x{self.window[1]} patch grid"
                             f"{' and a CLS' if self.class_token else ''} takes {length} positions, got {q_len} "
                             f"queries over {k_len} keys: give the model images of its image_size")
        return self.table[self.index].permute(2, 0, 1)[None]


def relative_biases(n_heads: int, window: int | tuple[int, int] | list[int], n_layers: int, shared: bool = False,
                    class_token: bool = False) -> nn.Module:
    """A stack's :class:`WindowRelativeBias`: one for all its layers (``shared``: BEiT's
    ``use_shared_relative_position_bias``), or one per layer (an ``nn.ModuleList``, per-layer data
    as rotary tables are: BEiT's ``use_relative_position_bias``)."""
    if shared:
        return WindowRelativeBias(n_heads, window, class_token)
    return nn.ModuleList(WindowRelativeBias(n_heads, window, class_token) for _ in range(n_layers))
