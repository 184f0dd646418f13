"""The attention context: everything a layer's attention needs besides ``x``.

Who may see whom (the mask, or SDPA's causal flag), the additive bias (T5's relative
position bias), the rotary table and, for cross-attention, the memory it reads and
that memory's padding: one object, built once per forward by the stack that owns the
layers (one per distinct mask, not per layer; see ``zoo.nn.stack.Stack``) and already
folded the way ``torch.nn.functional.scaled_dot_product_attention`` takes it. The
attention layer only reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from zoo.nn.blocked import Band, QueryBlock, plan
from zoo.nn.flex import block_mask
from zoo.nn.masks import Mask, causal_mask, padding_mask

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask


def fold_into_bias(bias: Tensor, mask: Tensor | None, is_causal: bool, q_len: int, k_len: int) -> Tensor:
    """One additive float mask from an additive ``bias``, a boolean ``mask`` (True = may
    attend) and causality: SDPA takes one ``attn_mask`` or ``is_causal``, not both."""
    if is_causal:
        causal = causal_mask(q_len, k_len, bias.device)
        mask = causal if mask is None else mask & causal
    return bias if mask is None else bias.masked_fill(~mask, float("-inf"))


@dataclass(frozen=True, eq=False)  # identity equality: comparing tensor fields would be ambiguous
class AttentionContext:
    """What one attention layer reads besides ``x``, folded for SDPA.

    Attributes:
        attn_mask: SDPA's ``attn_mask``: None, bool (True = may attend) or additive float (a
            bias, -inf where hidden), broadcastable to (B, H, Lq, Lk).
        is_causal: SDPA's fused causal kernel (then ``attn_mask`` is None).
        rope: rotary (cos, sin), each (Lq, Dh), applied to queries and keys.
        memory: (B, S, D), set for cross-attention: keys and values come from it.
        cross: the context of a Block's cross-attention (memory and its mask), None
            for stacks without one.
        plan: the attention backend's plan, when it skips what the mask hides: the block
            backend's query blocks or band (``zoo.nn.blocked``), or FlexAttention's
            ``BlockMask`` (``zoo.nn.flex``); then ``attn_mask`` is unused.
        key_padding: (B, Lk) True at real keys, beside a ``plan``.
        mask: the mask (``zoo.nn.masks``) the plan came from: the inspection path (attention
            maps) builds the dense mask from it.
        zero_keys: keys of a zero input the attention appends after the real ones, whose columns
            ``attn_mask`` has (a grid padded to whole windows: ``zoo.nn.windows``).
    """

    attn_mask: Tensor | None = None
    is_causal: bool = False
    rope: tuple[Tensor, Tensor] | None = None
    memory: Tensor | None = None
    cross: AttentionContext | None = None
    plan: list[QueryBlock] | Band | BlockMask | None = None
    key_padding: Tensor | None = None
    mask: Mask | None = None
    zero_keys: int = 0

    @classmethod
    def build(cls, mask: Mask, q_len: int, k_len: int, device: torch.device, key_padding: Tensor | None = None,
              prefix_len: Tensor | None = None, bias: Tensor | None = None, rope: tuple[Tensor, Tensor] | None = None,
              cross: AttentionContext | None = None, backend: str = "sdpa") -> AttentionContext:
        """Self-attention of ``q_len`` new queries over ``k_len`` keys under ``mask``
        (``zoo.nn.masks``); key_padding (B, k_len) True at real keys; bias
        (1|B, H, q_len, k_len) additive, folded here with the mask. ``backend``: ``sdpa``
        (a dense mask), ``blocks`` or ``flex`` (skip what the mask hides; a few new queries
        over a cache take the dense path, which is cheap then)."""
        if backend != "sdpa" and q_len == k_len:
            backend_plan = (plan(mask, q_len, k_len, device, mask.attention_block) if backend == "blocks"
                            else block_mask(mask, q_len, k_len, device, key_padding))
            return cls(rope=rope, cross=cross, plan=backend_plan, key_padding=key_padding, mask=mask)
        zero = mask.zero_keys  # the padding's keys, after the real ones: never hidden as padding
        if zero and key_padding is not None:
            key_padding = torch.nn.functional.pad(key_padding, (0, zero), value=True)
        attn_mask, is_causal = mask(q_len, k_len + zero, device, key_padding, prefix_len)
        if bias is not None:
            attn_mask, is_causal = fold_into_bias(bias, attn_mask, is_causal, q_len, k_len + zero), False
        return cls(attn_mask, is_causal, rope, cross=cross, zero_keys=zero)

    def dense(self, q_len: int, k_len: int, device: torch.device) -> tuple[Tensor | None, bool]:
        """(attn_mask, is_causal) of the dense path, also for a context built for another backend."""
        if self.plan is None:
            return self.attn_mask, self.is_causal
        return self.mask(q_len, k_len, device, self.key_padding)

    @classmethod
    def over(cls, memory: Tensor, memory_padding: Tensor | None = None) -> AttentionContext:
        """Cross-attention into ``memory`` (B, S, D); memory_padding (B, S) True at real positions."""
        return cls(None if memory_padding is None else padding_mask(memory_padding), memory=memory)
