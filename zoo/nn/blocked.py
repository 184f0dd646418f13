"""Attention that skips what the mask hides: SDPA over, for each block of queries, only the key
blocks its mask lets it see.

With a dense mask, SDPA computes every query-key score and the mask then hides most of them: a
window of 256 at a context of 16k still costs 16k x 16k. Here the queries are cut into blocks
of ``size``; for each block the mask names the keys it may see (``mask.key_span``: a range to
look in, then ``mask.cells``: who sees whom), the key blocks with nothing visible are left out,
and SDPA runs on the rest with the small mask of that block. The result is the dense path's
(the same scores, the same softmax over the same keys); the cost follows the visible blocks.
A CPU path of its own: FlexAttention has no backward on CPU.

A mask takes part if it says its cells (``Mask.has_cells``; ``zoo.nn.masks``: NoMask, CausalMask,
LocalMask, GridWindowMask; ``zoo.nn.sparse``: StridedMask, FixedMask); masks that depend on the
batch (PrefixLMMask) or weigh keys (BigBirdMask) have none.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.nn.masks import Mask


@dataclass(frozen=True, eq=False)
class QueryBlock:
    """One block of queries [q_lo, q_hi): the keys it reads (a slice when they are contiguous,
    else their indices) and its mask over them ((bq, n_keys) bool, None when it sees them all)."""

    q_lo: int
    q_hi: int
    keys: slice | Tensor
    cells: Tensor | None


@dataclass(frozen=True, eq=False)
class Band:
    """A band of blocks: every block of ``size`` queries reads the ``before`` key blocks before its
    own, its own and ``after`` more (a sliding window), so that all blocks run in one SDPA call.
    ``cells`` (nb, size, n_keys) bool says who sees whom in each block's keys."""

    size: int
    before: int
    after: int
    cells: Tensor


def plan(mask: Mask, q_len: int, k_len: int, device: torch.device, size: int = 128) -> list[QueryBlock] | Band:
    """The blocks of ``q_len`` queries (the last of ``k_len`` positions) under ``mask``: a
    :class:`Band` when the mask is one (``mask.band``) and there is no cache, else a list of
    :class:`QueryBlock`."""
    if not mask.has_cells:
        raise ValueError(f"the block attention backend needs a mask that says its cells; {mask!r} does not "
                         f"(use attention_backend=sdpa)")
    band = mask.band(size) if q_len == k_len else None
    if band is not None:
        before, after = band
        n_blocks = -(-q_len // size)
        query = torch.arange(n_blocks * size, device=device).view(n_blocks, size, 1)
        key = ((torch.arange(n_blocks, device=device) - before) * size)[:, None, None] + torch.arange(
            (before + 1 + after) * size, device=device)
        inside = (key >= 0) & (key < k_len)
        return Band(size, before, after, mask.cells(query, key, k_len) & inside)
    start, blocks = k_len - q_len, []
    for lo in range(0, q_len, size):
        hi = min(lo + size, q_len)
        k_lo, k_hi = mask.key_span(start + lo, start + hi, k_len)
        query = torch.arange(start + lo, start + hi, device=device)[:, None]
        key = torch.arange(k_lo, k_hi, device=device)[None, :]
        cells = mask.cells(query, key, k_len)
        # keep the key blocks (aligned at multiples of size) where some query sees something
        block_of = key[0] // size
        seen = torch.zeros(int(block_of[-1]) + 1, dtype=torch.long, device=device).index_add_(
            0, block_of, cells.any(0).long())
        keep = seen[block_of] > 0
        kept = key[0][keep]
        contiguous = kept.numel() == 0 or int(kept[-1] - kept[0]) + 1 == kept.numel()
        keys = slice(int(kept[0]), int(kept[-1]) + 1) if contiguous and kept.numel() else kept
        cells = cells[:, keep]
        blocks.append(QueryBlock(lo, hi, keys, None if bool(cells.all()) else cells))
    return blocks


def banded_attention(q: Tensor, k: Tensor, v: Tensor, band: Band, key_padding: Tensor | None, attend) -> Tensor:
    """:func:`blocked_attention` for a :class:`Band`: the blocks of queries become a batch
    dimension and each reads its band of key blocks (a strided view of the padded keys)."""
    length, size = q.shape[2], band.size
    n_blocks = band.cells.shape[0]
    span = (band.before + 1 + band.after) * size

    def padded(x: Tensor) -> Tensor:  # (B, H, L, D) -> (B, H, n_blocks, span, D): each block's keys
        x = F.pad(x, (0, 0, band.before * size, (n_blocks + band.after) * size - length))
        return x.unfold(2, span, size).transpose(-1, -2)

    def folded(x: Tensor) -> Tensor:  # (B, H, n_blocks, n, D) -> (B * n_blocks, H, n, D)
        # SDPA's fused kernels take 4-D tensors (a 5-D call falls back to its math path, which
        # keeps every block's scores and weights for the backward): the blocks join the batch
        return x.transpose(1, 2).flatten(0, 1)

    batch = q.shape[0]
    q_blocks = F.pad(q, (0, 0, 0, n_blocks * size - length)).unflatten(2, (n_blocks, size))
    mask = band.cells  # (n_blocks, size, span)
    if key_padding is not None:
        real = F.pad(key_padding, (band.before * size, (n_blocks + band.after) * size - length))
        mask = mask & real.unfold(1, span, size)[:, None, :, None, :]  # (B, 1, n_blocks, size, span)
    mask = mask.expand(batch, 1, n_blocks, size, span)
    out = attend(folded(q_blocks), folded(padded(k)), folded(padded(v)), folded(mask))
    return out.unflatten(0, (batch, n_blocks)).transpose(1, 2).flatten(2, 3)[:, :, :length]


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, plan: list[QueryBlock] | Band,
                      key_padding: Tensor | None, attend) -> Tensor:
    """q (B, H, Lq, Dh), k/v (B, Hkv, Lk, Dh) -> (B, H, Lq, Dh), block by block. ``attend`` is
    the layer's own attention function ``(q, k, v, mask) -> out`` (grouped-query heads, scale,
    dropout); key_padding (B, Lk) True at real keys."""
    if isinstance(plan, Band):
        return banded_attention(q, k, v, plan, key_padding, attend)
    outs = []
    for block in plan:
        mask = block.cells
        if key_padding is not None:
            padding = key_padding[:, block.keys][:, None, None, :]
            mask = padding if mask is None else mask & padding
        outs.append(attend(q[:, :, block.q_lo:block.q_hi], k[:, :, block.keys], v[:, :, block.keys], mask))
    return torch.cat(outs, dim=2)
