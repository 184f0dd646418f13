"""Attention masks: who may see whom. Boolean, True = may attend.

The functions build mask tensors; the ``*Mask`` classes are what a model
config picks. A mask class is called with the query and key lengths (and the
padding of the keys, when the batch has any) and returns what
``attention`` takes: ``(mask or None, is_causal)``. A plain causal mask with no
padding returns ``(None, True)`` so that the fused causal kernels run.
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal_mask(q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
    """(q_len, k_len): query i (the last q_len of k_len positions) sees keys <= its own position."""
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)


def padding_mask(key_padding: Tensor) -> Tensor:
    """key_padding (B, Lk), True = real token -> (B, 1, 1, Lk): nobody attends to padding."""
    return key_padding[:, None, None, :]


def prefix_lm_mask(prefix_len: Tensor, length: int) -> Tensor:
    """prefix_len (B,) -> (B, 1, L, L): bidirectional inside each row's prefix, causal after."""
    pos = torch.arange(length, device=prefix_len.device)
    in_prefix = pos[None, None, :] < prefix_len[:, None, None]  # key inside the prefix
    return (causal_mask(length, length, prefix_len.device)[None] | in_prefix)[:, None]


def _and(a: Tensor | None, b: Tensor | None) -> Tensor | None:
    if a is None:
        return b
    return a if b is None else a & b


class NoMask:
    """Everyone sees everyone, except padding (ViT, BERT, encoders)."""

    def __call__(self, q_len: int, k_len: int, device: torch.device, key_padding: Tensor | None = None,
                 prefix_len: Tensor | None = None) -> tuple[Tensor | None, bool]:
        return (None if key_padding is None else padding_mask(key_padding)), False


PaddingMask = NoMask  # the bidirectional mask: it only ever hides padding


class CausalMask:
    """Each position sees itself and the past (GPT, decoders)."""

    def __call__(self, q_len: int, k_len: int, device: torch.device, key_padding: Tensor | None = None,
                 prefix_len: Tensor | None = None) -> tuple[Tensor | None, bool]:
        if key_padding is None and q_len == k_len:
            return None, True  # let SDPA use its fused causal kernel
        mask = None if q_len == 1 else causal_mask(q_len, k_len, device)  # one new token sees everything
        return _and(mask, None if key_padding is None else padding_mask(key_padding)), False


class PrefixLMMask:
    """Bidirectional over a prefix (image + prompt), causal over the rest."""

    def __call__(self, q_len: int, k_len: int, device: torch.device, key_padding: Tensor | None = None,
                 prefix_len: Tensor | None = None) -> tuple[Tensor | None, bool]:
        if prefix_len is None or q_len != k_len:  # no prefix, or decoding after the prefix
            return CausalMask()(q_len, k_len, device, key_padding)
        mask = prefix_lm_mask(prefix_len, k_len)
        return _and(mask, None if key_padding is None else padding_mask(key_padding)), False
