"""The Sparse Transformer's factorised attention patterns (Child et al., 2019, section 4.3).

Each pattern is the union of two sets of keys per query ``i`` (the paper's A(1) and A(2)),
under causality (``j <= i``): the paper's "merged head" form, one mask for every head of a
layer. GPT-3 alternates dense layers with locally banded sparse ones: say that with a
:class:`~zoo.nn.masks.PerLayer` pattern, e.g. ``[CausalMask(), StridedMask(8)]``.

- :class:`StridedMask` (stride ``l``): A(1) = the previous ``l`` positions and itself,
  ``{max(0, i - l), ..., i}``; A(2) = every ``l``-th position back, ``(i - j) mod l == 0``.
  Meant for data with a period of ``l`` (image rows).
- :class:`FixedMask` (stride ``l``, summary ``c``): A(1) = the query's own block of ``l``,
  ``floor(j / l) == floor(i / l)``; A(2) = the last ``c`` cells of every block,
  ``j mod l >= l - c``, which summarise it for the blocks after. Meant for text.

These masks hide most of the keys, but the SDPA path still computes the dense L x L scores
and only the mask skips them: the cost is the dense cost.
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.nn.masks import Mask, padding_mask


def _positions(q_len: int, k_len: int, device) -> tuple[Tensor, Tensor]:
    """(q_len, 1) absolute query positions (the last q_len of k_len) and (1, k_len) key positions."""
    return torch.arange(k_len - q_len, k_len, device=device)[:, None], torch.arange(k_len, device=device)[None, :]


def strided_mask(q_len: int, k_len: int, stride: int, device: torch.device | str | None = None) -> Tensor:
    """(q_len, k_len): :class:`StridedMask` for the last q_len of k_len positions."""
    query, key = _positions(q_len, k_len, device)
    back = query - key
    return (back >= 0) & ((back <= stride) | (back % stride == 0))


def fixed_mask(q_len: int, k_len: int, stride: int, summary: int, device: torch.device | str | None = None) -> Tensor:
    """(q_len, k_len): :class:`FixedMask` for the last q_len of k_len positions."""
    query, key = _positions(q_len, k_len, device)
    same_block = key // stride == query // stride
    summarises = key % stride >= stride - summary
    return (key <= query) & (same_block | summarises)


def _check_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r}: give an integer >= {low}")


class StridedMask(Mask):
    """The strided pattern: the last ``stride`` positions (and itself) plus every ``stride``-th
    one before them; causal."""

    def __init__(self, stride: int) -> None:
        _check_int("StridedMask stride", stride, 2)  # stride 1: every key is "every l-th": causal
        self.stride = stride

    def check_context(self, context: int) -> None:
        if self.stride >= context - 1:
            raise ValueError(f"StridedMask stride={self.stride} with the model's context={context}: the window "
                             f"alone covers every key, so it never cuts (give a stride < {context - 1})")

    def __call__(self, q_len: int, k_len: int, device: torch.device, key_padding: Tensor | None = None,
                 prefix_len: Tensor | None = None) -> tuple[Tensor | None, bool]:
        mask = strided_mask(q_len, k_len, self.stride, device)
        return (mask if key_padding is None else mask & padding_mask(key_padding)), False


class FixedMask(Mask):
    """The fixed pattern: the query's own block of ``stride`` positions plus the last ``summary``
    positions of every block; causal."""

    def __init__(self, stride: int, summary: int = 1) -> None:
        _check_int("FixedMask stride", stride, 2)
        _check_int("FixedMask summary", summary, 1)
        if summary >= stride:
            raise ValueError(f"FixedMask summary={summary} with stride={stride}: the summary cells must be fewer "
                             f"than a block's (give summary < {stride}), or every key is seen")
        self.stride, self.summary = stride, summary

    def check_context(self, context: int) -> None:
        if self.stride >= context:
            raise ValueError(f"FixedMask stride={self.stride} is not shorter than the model's context={context}: "
                             f"one block would hold every position (give a stride < {context})")

    def __call__(self, q_len: int, k_len: int, device: torch.device, key_padding: Tensor | None = None,
                 prefix_len: Tensor | None = None) -> tuple[Tensor | None, bool]:
        mask = fixed_mask(q_len, k_len, self.stride, self.summary, device)
        return (mask if key_padding is None else mask & padding_mask(key_padding)), False
