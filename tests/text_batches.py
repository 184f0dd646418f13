"""Shared by the text families' exactness tests: a batch with padding on both sides."""

from __future__ import annotations

import torch
from torch import Tensor


def padded_tokens(vocab_size: int, length: int, *, left: bool = True, low: int = 0,
                  pad_id: int = 0, seed: int = 1) -> tuple[Tensor, Tensor]:
    """Token ids (3, length) and ``real`` (3, length), True at real tokens: row 0 unpadded, row 1
    right-padded (its last third pad), row 2 left-padded (its first quarter), if ``left`` (else
    right-padded by a quarter). Ids in ``[low, vocab_size)``; pads are ``pad_id``."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(low, vocab_size, (3, length), generator=g)
    real = torch.ones(3, length, dtype=torch.bool)
    real[1, length - max(1, length // 3):] = False
    if left:
        real[2, : max(1, length // 4)] = False
    else:
        real[2, length - max(1, length // 4):] = False
    return ids.masked_fill(~real, pad_id), real
