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

from zoo.nn.masks import Mask


def strided_cells(query: Tensor, key: Tensor, stride: int) -> Tensor:
    """:class:`StridedMask` among the absolute positions ``query`` (Lq, 1) and ``key`` (1, Lk)."""
    back = query - key
    return (back >= 0) & ((back <= stride) | (back % stride == 0))


def fixed_cells(query: Tensor, key: Tensor, stride: int, summary: int) -> Tensor:
    """:class:`FixedMask` among the absolute positions ``query`` (Lq, 1) and ``key`` (1, Lk)."""
    same_block = key // stride == query // stride
    summarises = key % stride >= stride - summary
    return (key <= query) & (same_block | summarises)


def _check_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r}: give an integer >= {low}")


class StridedMask(Mask):
    """The strided pattern: the last ``stride`` positions (and itself) plus every ``stride``-th
    one before them; causal."""

    causal = True

    def __init__(self, stride: int) -> None:
        _check_int("StridedMask stride", stride, 2)  # stride 1: every key is "every l-th": causal
        self.stride = stride

    def check_context(self, context: int) -> None:
        if self.stride >= context - 1:
            raise ValueError(f"StridedMask stride={self.stride} with the model's context={context}: the window "
                             f"alone covers every key, so it never cuts (give a stride < {context - 1})")

    @property
    def picture_length(self) -> int:
        return 4 * self.stride

    def cells(self, query: Tensor, key: Tensor, k_len: int) -> Tensor:
        return strided_cells(query, key, self.stride)

    def key_span(self, q_lo: int, q_hi: int, k_len: int) -> tuple[int, int]:
        return 0, q_hi


class FixedMask(Mask):
    """The fixed pattern: the query's own block of ``stride`` positions plus the last ``summary``
    positions of every block; causal."""

    causal = True

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

    @property
    def picture_length(self) -> int:
        return 4 * self.stride

    def cells(self, query: Tensor, key: Tensor, k_len: int) -> Tensor:
        return fixed_cells(query, key, self.stride, self.summary)

    def key_span(self, q_lo: int, q_hi: int, k_len: int) -> tuple[int, int]:
        return 0, q_hi


def bigbird_counts(length: int, block: int, n_random: int, seed: int | None = None,
                   device: torch.device | str | None = None) -> Tensor:
    """(length, length) int: how many times each key enters each query's softmax under
    BigBird's block-sparse pattern (0 = hidden). Blocks of ``block`` positions (the last one
    may be shorter); the first and the last query blocks see everything (global); every other
    query block sees the first and last key blocks (global), its own and its neighbours
    (sliding; the second and second-to-last rows see blocks 0-2 and the last three), and
    ``n_random`` random key blocks.

    ``seed=None`` is what Hugging Face's ``BigBirdModel`` computes in eval mode: every random
    block index is 0, so block 0 enters the middle rows' softmax 1 + n_random times. A ``seed``
    draws each middle row's random blocks among the middle blocks it does not already see (one
    draw per length, shared by every head: Hugging Face draws per head, in training only)."""
    n_blocks = -(-length // block)
    counts = torch.zeros(n_blocks, n_blocks, dtype=torch.long)
    counts[[0, -1]] = 1
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    for row in range(1, n_blocks - 1):
        window = {0, 1, 2} if row == 1 else ({n_blocks - 3, n_blocks - 2} if row == n_blocks - 2
                                             else {row - 1, row, row + 1})
        seen = sorted(window | {0, n_blocks - 1})
        counts[row, seen] = 1
        if generator is None:
            counts[row, 0] += n_random
        else:
            candidates = torch.tensor([b for b in range(1, n_blocks - 1) if b not in window])
            pick = candidates[torch.randperm(len(candidates), generator=generator)[:n_random]]
            counts[row, pick] += 1
    of_block = torch.arange(length) // block
    return counts[of_block][:, of_block].to(device)


class BigBirdMask(Mask):
    """BigBird's block-sparse attention (Zaheer et al. 2020) as Hugging Face computes it, for an
    encoder (every query at once): global first and last blocks, a sliding window of three
    blocks and ``n_random`` random blocks per query block (:func:`bigbird_counts`).

    Not a plain boolean mask: a key that enters a softmax n times weighs n times, so this
    returns an additive mask, ``log(n)`` where seen and ``-inf`` where hidden. As in
    ``BigBirdModel``, a sequence not longer than ``(5 + 2 * n_random) * block_size`` positions
    gets full attention (Hugging Face switches the whole model to ``original_full`` then, for
    good; here each forward decides for itself). Its weights are no cells: it has none.
    """

    has_cells = False

    def __init__(self, block_size: int, n_random: int = 3, seed: int | None = None) -> None:
        _check_int("BigBirdMask block_size", block_size, 1)
        _check_int("BigBirdMask n_random", n_random, 0)
        self.block_size, self.n_random, self.seed = block_size, n_random, seed

    @property
    def picture_length(self) -> int:
        return self.full_up_to + 2 * self.block_size  # sparse from just past the full-attention limit

    @property
    def full_up_to(self) -> int:
        """The longest sequence that gets full attention (Hugging Face's ``max_tokens_to_attend``)."""
        return (5 + 2 * self.n_random) * self.block_size

    def check_context(self, context: int) -> None:
        if context <= self.full_up_to:
            raise ValueError(f"BigBirdMask block_size={self.block_size}, n_random={self.n_random} attends fully up "
                             f"to {self.full_up_to} positions, but the model's context={context}: it would never "
                             f"be sparse (give a context > {self.full_up_to}, or smaller blocks)")

    def dense(self, q_len: int, k_len: int, device: torch.device, prefix_len: Tensor | None = None) -> Tensor | None:
        if q_len != k_len:
            raise ValueError(f"BigBirdMask is an encoder's mask: {q_len} queries over {k_len} keys (a KV cache) "
                             f"is not supported")
        if k_len <= self.full_up_to:
            return None
        return bigbird_counts(k_len, self.block_size, self.n_random, self.seed, device).float().log()  # log 0: hidden
