"""Attention that skips what the mask hides: SDPA over, for each block of queries, only the key
blocks its mask lets it see.

With a dense mask, SDPA computes every query-key score and the mask then hides most of them: a
window of 256 at a context of 16k still costs 16k x 16k. Here the queries are cut into blocks
of ``size``; for each block the mask names the keys it may see (``mask.key_span``: a range to
look in, then ``mask.cells``: who sees whom), the key blocks with nothing visible are left out,
and SDPA runs on the rest with the small mask of that block. The result is the dense path's
(the same scores, the same softmax over the same keys); the cost follows the visible blocks.
A CPU path of its own: FlexAttention has no backward on CPU.

A mask takes part if it says its cells (``zoo.nn.masks``: NoMask, CausalMask, LocalMask,
GridWindowMask; ``zoo.nn.sparse``: StridedMask, FixedMask); masks that depend on the batch
(PrefixLMMask) or weigh keys (BigBirdMask) do not.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True, eq=False)
class QueryBlock:
    """One block of queries [q_lo, q_hi): the keys it reads (a slice when they are contiguous,
    else their indices) and its mask over them ((bq, n_keys) bool, None when it sees them all)."""

    q_lo: int
    q_hi: int
    keys: slice | Tensor
    cells: Tensor | None


def plan(mask, q_len: int, k_len: int, device: torch.device, size: int = 128) -> list[QueryBlock]:
    """The blocks of ``q_len`` queries (the last of ``k_len`` positions) under ``mask``."""
    if not hasattr(mask, "cells"):
        raise ValueError(f"the block attention backend needs a mask that says its cells; {mask!r} does not "
                         f"(use attention_backend=sdpa)")
    start, blocks = k_len - q_len, []
    for lo in range(0, q_len, size):
        hi = min(lo + size, q_len)
        k_lo, k_hi = mask.key_span(start + lo, start + hi, k_len) if hasattr(mask, "key_span") else (0, k_len)
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


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, blocks: list[QueryBlock], key_padding: Tensor | None,
                      attend) -> Tensor:
    """q (B, H, Lq, Dh), k/v (B, Hkv, Lk, Dh) -> (B, H, Lq, Dh), block by block. ``attend`` is
    the layer's own attention function ``(q, k, v, mask) -> out`` (grouped-query heads, scale,
    dropout); key_padding (B, Lk) True at real keys."""
    outs = []
    for block in blocks:
        mask = block.cells
        if key_padding is not None:
            padding = key_padding[:, block.keys][:, None, None, :]
            mask = padding if mask is None else mask & padding
        outs.append(attend(q[:, :, block.q_lo:block.q_hi], k[:, :, block.keys], v[:, :, block.keys], mask))
    return torch.cat(outs, dim=2)
