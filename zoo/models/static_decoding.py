"""Decoding over a static cache, one compiled graph per step (``generate(compile=True)``).

At batch 1 a decoding step is overhead, not matmuls (gpt-fast's lesson): Python per layer, a new
mask and cache shape per token. Here the cache is preallocated to the final length
(:class:`~zoo.nn.cache.StaticCache`) and each step's attention reads every column of it through a
mask that hides the positions not decoded yet, so the step's shapes never change and one
``torch.compile(fullgraph=True)`` graph runs all its layers and the head. Per token, outside the
graph, only the embedding of the new token and one mask and rotary row per distinct layer context
are computed (the tower's own code, at the token's position), then copied into the tensors the
graph reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor, nn

from zoo.models.compiling import compile_step
from zoo.nn.cache import StaticCache
from zoo.nn.context import AttentionContext
from zoo.nn.tower import Tower


def check_static_length(total: int, context: int) -> None:
    """Refuse a static cache longer than the model's ``context``, naming both and the fix."""
    if total > context:
        raise ValueError(f"compile=true decodes into a static cache of the final length, prompt + max_new_tokens = "
                         f"{total}, more than the model's context of {context}: lower max_new_tokens to "
                         f"{context} minus the prompt, or use compile=false (its cache slides past the context)")


def _step_mask(context: AttentionContext, position: int, device: torch.device) -> Tensor:
    """The mask (..., 1, position + 1) of one query at ``position`` over the keys up to it, as
    ``context`` says it (bool: True = may attend, or an additive bias); None / causal: all of them."""
    if context.attn_mask is not None:
        return context.attn_mask
    return torch.ones(1, position + 1, dtype=torch.bool, device=device)


class StaticDecoder:
    """Decode ``tower`` (then ``head``) over a :class:`StaticCache` of ``capacity`` positions.

    The first call feeds the prompt through ``prefill`` (eager, writing the cache's first
    positions); each later call feeds one token (B, 1) through the step, compiled when
    ``compile``. ``cross``: the cross-attention context of a decoder tower (its memory), fixed
    for the whole decoding. Returns the logits (B, L, V) of the positions fed.
    """

    def __init__(self, tower: Tower, head: nn.Module, capacity: int, device: torch.device,
                 prefill: Callable[[Tensor, StaticCache], Tensor], compile: bool = False,
                 cross: AttentionContext | None = None) -> None:
        self.tower, self.head, self.prefill, self.cross = tower, head, prefill, cross
        self.cache, self.device = StaticCache(len(tower.layer_masks), capacity, device), device
        self.contexts: list[AttentionContext] | None = None  # the step's, their tensors rewritten per token
        self._distinct: list[AttentionContext] = []  # each distinct one of them once
        self._run = compile_step(self._layers, device) if compile else self._layers

    def __call__(self, tokens: Tensor) -> Tensor:
        if self.cache.length == 0:
            return self.prefill(tokens, self.cache)
        position = self.cache.step()
        x = self.tower.embedder(tokens, start=position)
        fresh = self.tower.stack.contexts(1, self.device, position, rotary=self.tower.rope, bias=self.tower.bias,
                                          cross=self.cross)
        self._load(fresh, position)
        return self._run(x)

    def _layers(self, x: Tensor) -> Tensor:
        """The step's graph: every Block over the static cache, and the head."""
        return self.head(self.tower.stack(x, self.contexts, self.cache))

    def _load(self, fresh: list[AttentionContext], position: int) -> None:
        """Write the masks and rotary rows of ``fresh`` (the tower's contexts of this step) into
        the step's contexts, made at the first step with masks of the cache's full width."""
        distinct = list({id(c): c for c in fresh}.values())
        if self.contexts is None:
            made = {id(c): self._static(c, position) for c in distinct}
            self.contexts = [made[id(c)] for c in fresh]
            self._distinct = [made[id(c)] for c in distinct]
        for context, static in zip(distinct, self._distinct):
            mask = _step_mask(context, position, self.device)
            static.attn_mask.fill_(False if mask.dtype == torch.bool else float("-inf"))
            static.attn_mask[..., : position + 1] = mask
            if context.rope is not None:
                for table, row in zip(static.rope, context.rope):
                    table.copy_(row)

    def _static(self, context: AttentionContext, position: int) -> AttentionContext:
        """A copy of ``context`` whose mask spans the whole cache (its tensors filled by :meth:`_load`)."""
        mask = _step_mask(context, position, self.device)
        rope = None if context.rope is None else tuple(t.clone() for t in context.rope)
        return replace(context, attn_mask=mask.new_empty(*mask.shape[:-1], self.cache.capacity), is_causal=False,
                       rope=rope)
