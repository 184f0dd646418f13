"""Analytic training FLOPs (forward + backward) of the zoo's pieces, for MFU (the peak FLOP/s it
divides by is :mod:`zoo.train.flops`'s).

Counted as the matrix multiplications cost: every Linear layer costs 2 * in * out per
token in the forward pass (of a mixture of experts, the router and the top-k experts a token
goes through, not the others), attention costs 2 * 2 * Lq * Lk * d per layer (scores and
the weighted sum), and the backward pass costs twice the forward. Norms, activations
and softmax are left out (they are not matmuls); so is the causal mask's saving, as
the dense kernels compute the full square.
"""

from __future__ import annotations

from torch import nn

from zoo.nn.moe import MoEFeedForward


def _all_linear_flops(module: nn.Module) -> int:
    return sum(2 * m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))


def linear_flops(module: nn.Module) -> int:
    """Forward FLOPs per token of every Linear inside ``module`` a token runs through: of each
    mixture of experts, ``top_k`` of its ``n_experts`` experts."""
    idle = sum(_all_linear_flops(m.experts) * (m.n_experts - m.top_k) // m.n_experts
               for m in module.modules() if isinstance(m, MoEFeedForward))
    return _all_linear_flops(module) - idle


def cross_kv_flops(blocks: nn.ModuleList) -> int:
    """Forward FLOPs per *source* token of the cross-attention key/value projections
    (they read the encoder's output, not the decoder's positions)."""
    return sum(linear_flops(b.cross_attn.k) + linear_flops(b.cross_attn.v)
               for b in blocks if b.cross_attn is not None)


def attention_flops(blocks: nn.ModuleList, q_len: int, k_len: int, cross_len: int = 0) -> int:
    """Forward FLOPs of the attention products of one sequence through ``blocks``:
    self-attention over (q_len x k_len), cross-attention over (q_len x cross_len)."""
    total = 0
    for block in blocks:
        total += 4 * q_len * k_len * block.attn.n_heads * block.attn.d_head
        if block.cross_attn is not None:
            total += 4 * q_len * cross_len * block.cross_attn.n_heads * block.cross_attn.d_head
    return total


def tower_flops(tower, length: int, cross_len: int = 0) -> int:
    """Forward FLOPs of one sequence of ``length`` positions through a tower's Blocks
    (``zoo.nn.tower.Tower``; its embedder is left out), reading a memory of ``cross_len``
    positions if its Blocks have cross-attention."""
    kv = cross_kv_flops(tower.blocks)
    return (length * (linear_flops(tower.stack) - kv) + cross_len * kv
            + attention_flops(tower.blocks, length, length, cross_len))


def training_flops(forward_flops: int) -> int:
    """Forward + backward: the backward pass costs twice the forward."""
    return 3 * forward_flops
