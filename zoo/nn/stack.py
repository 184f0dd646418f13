"""A stack of Blocks under per-layer masks, and the attention contexts it hands them.

The layers of a stack may differ in who sees whom (a :class:`~zoo.nn.masks.PerLayer`
pattern); :meth:`Stack.contexts` builds one :class:`~zoo.nn.context.AttentionContext` per
distinct mask, not per layer, from the mask and the position modules of the tower that owns
the stack (``zoo.nn.tower``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from zoo.nn.block import Block, BlockConfig
from zoo.nn.cache import KVCache
from zoo.nn.context import AttentionContext
from zoo.nn.flex import available as flex_available
from zoo.nn.masks import Mask, NoMask, per_layer
from zoo.nn.norms import make_norm
from zoo.nn.positions import RotaryEmbedding


class Stack(nn.Module):
    """``n_layers`` Blocks, then (pre-LN stacks) a final norm.

    Args:
        block: the Block's shape and knobs, shared by all layers.
        n_layers: number of Blocks.
        mask: who may see whom (``zoo.nn.masks``): one mask for every layer, or a
            :class:`~zoo.nn.masks.PerLayer` pattern repeated over the layers.
        cross_attention: Blocks with cross-attention (decoders of encoder-decoders).
        final_norm: a norm after the last Block.
        attention_backend: how self-attention runs: ``sdpa`` (SDPA under a dense mask),
            ``blocks`` (``zoo.nn.blocked``: only the key blocks the mask lets each block of
            queries see; CPU training) or ``flex`` (``zoo.nn.flex``: FlexAttention; GPU
            training, inference). The last two need masks that say their cells (``Mask.has_cells``).
        first_attn_norm: ``False``: the first Block's attention reads the embedder's output
            as it is, with no norm of its own (ModernBERT: its embedder ends in a norm already).

    What differs by layer is per-layer data, one entry per layer, each Block built from its
    own: the masks (``layer_masks``), the rotary tables and additive biases (:meth:`contexts`), and
    whether the layer's attention has a norm (``attn_norms``).
    """

    def __init__(self, block: BlockConfig, n_layers: int, mask: Mask | None = None, cross_attention: bool = False,
                 final_norm: bool = True, attention_backend: str = "sdpa", first_attn_norm: bool = True):
        super().__init__()
        self.attn_norms = [first_attn_norm or i > 0 for i in range(n_layers)]
        self.blocks = nn.ModuleList(Block(block, cross_attention, attn_norm) for attn_norm in self.attn_norms)
        self.norm = make_norm(block.norm, block.d_model, block.norm_eps, block.norm_bias) if final_norm else None
        self.layer_masks = per_layer(NoMask() if mask is None else mask, n_layers)
        check_backend(attention_backend, self.layer_masks)
        self.attention_backend = attention_backend
        self.n_read: int | None = None  # set by read_at: the stack ends at an inner layer
        self.register_load_state_dict_pre_hook(_skip_unread_weights)

    def read_at(self, n_layers: int) -> None:
        """End the stack after its first ``n_layers`` Blocks, without the final norm (the
        hidden state LLaVA reads its vision tower at). The layers after it stop running now;
        :meth:`drop_unread` removes them once the enclosing model has drawn its initial
        weights (dropping them earlier would shift the random stream of every weight after)."""
        if not 0 <= n_layers <= len(self.blocks):
            raise ValueError(f"cannot read a stack of {len(self.blocks)} layers after layer {n_layers}")
        self.n_read = n_layers
        self.layer_masks = self.layer_masks[:n_layers]

    def drop_unread(self) -> None:
        """Remove the Blocks after :meth:`read_at`'s layer and the final norm: no parameter is left
        without a gradient (plain DDP works), and a state dict's weights of them are skipped."""
        if self.n_read is not None:
            del self.blocks[self.n_read :]
            self.norm = None

    def unread(self, key: str) -> bool:
        """Whether ``key`` (a state-dict name under this stack) names a weight of a layer this
        stack does not read: a Block after :meth:`read_at`'s layer, or the final norm."""
        if self.n_read is None:
            return False
        if key.startswith("norm."):
            return True
        return key.startswith("blocks.") and int(key.split(".")[1]) >= self.n_read

    def contexts(
        self,
        length: int,
        device: torch.device,
        start: int = 0,
        key_padding: Tensor | None = None,
        prefix_len: Tensor | None = None,
        rotary: RotaryEmbedding | nn.ModuleList | None = None,
        bias: nn.Module | None = None,
        cross: AttentionContext | None = None,
    ) -> list[AttentionContext]:
        """The attention context of each layer, for ``length`` new positions after ``start``
        already decoded ones: built once per distinct mask (layers sharing a mask share the
        object), from the mask, the position modules and the cross context.

        key_padding (B, start + length): True at real positions. prefix_len (B,): prefix-LM
        masks. rotary: a rotary table module, or one per layer (``zoo.nn.positions.rotary_tables``:
        a context per distinct (mask, table, bias) then); bias: a module ``(q_len, k_len, start) ->
        (1|B, H, q_len, k_len)`` giving an additive bias (T5's relative position bias), or one per
        layer (``zoo.nn.relative_bias.relative_biases``: BEiT's). Each is computed once here and
        shared by the contexts that read it.
        """
        k_len = start + length
        tables, biases = self._per_layer(rotary), self._per_layer(bias)
        ropes = {id(t): None if t is None else t(length, start) for t in tables}
        bias_tables = {id(b): None if b is None else b(length, k_len, start) for b in biases}
        built: dict = {}
        keys = [(mask, id(table), id(b)) for mask, table, b in zip(self.layer_masks, tables, biases)]
        for key, table, b in zip(keys, tables, biases):
            if key not in built:
                built[key] = AttentionContext.build(key[0], length, k_len, device, key_padding, prefix_len,
                                                    bias_tables[id(b)], ropes[id(table)], cross, self.attention_backend)
        return [built[key] for key in keys]

    def _per_layer(self, module: nn.Module | None) -> list[nn.Module | None]:
        """A position module of each layer that runs: ``module`` for all, or its entries (an
        ``nn.ModuleList``, one per layer of the stack)."""
        if isinstance(module, nn.ModuleList):
            return list(module)[: len(self.layer_masks)]  # (a stack read early runs its first layers)
        return [module] * len(self.layer_masks)

    def forward(self, x: Tensor, contexts: list[AttentionContext], cache: KVCache | None = None) -> Tensor:
        """(B, L, D) -> (B, L, D); ``contexts``: one per layer that runs, from :meth:`contexts`."""
        self._check_contexts(contexts)
        for i, (block, context) in enumerate(zip(self.blocks, contexts)):  # (a stack read early stops at its layer)
            x = block(x, context, None if cache is None else cache.layers[i])
        return x if self.norm is None or self.n_read is not None else self.norm(x)

    def intermediates(self, x: Tensor, contexts: list[AttentionContext], layers: Sequence[int]) -> list[Tensor]:
        """x (B, L, D), the stack's input -> the residual stream after each of ``layers`` Blocks,
        (B, L, D) each in the order asked (0 = ``x`` itself), never the final norm. Only the Blocks
        up to the deepest asked run, and nothing of the stack changes: callers may ask at once."""
        self._check_contexts(contexts)
        outside = [i for i in layers if not 0 <= i <= len(self.layer_masks)]
        if outside:
            raise ValueError(f"layers {outside} outside a stack that runs {len(self.layer_masks)} layers")
        wanted, states = set(layers), {0: x}
        for i, (block, context) in enumerate(zip(self.blocks[: max(layers, default=0)], contexts), start=1):
            x = block(x, context)
            if i in wanted:
                states[i] = x
        return [states[i] for i in layers]

    def _check_contexts(self, contexts: list[AttentionContext]) -> None:
        if len(contexts) != len(self.layer_masks):
            raise ValueError(f"{len(contexts)} attention contexts for a stack that runs {len(self.layer_masks)} layers")


BACKENDS = ("sdpa", "blocks", "flex")


def check_backend(backend: str, masks: list[Mask]) -> None:
    """Refuse, at construction, a backend that is unknown, absent from this torch, or that a
    layer's mask cannot run under (naming the value and the mask)."""
    if backend not in BACKENDS:
        raise ValueError(f"attention_backend={backend!r}: expected one of {list(BACKENDS)}")
    if backend == "flex" and not flex_available():
        raise ValueError(f"attention_backend=flex needs FlexAttention (torch.nn.attention.flex_attention), which "
                         f"torch {torch.__version__} does not have: use attention_backend=blocks or sdpa")
    if backend != "sdpa":
        for mask in masks:
            if not mask.has_cells:
                raise ValueError(f"attention_backend={backend}: the mask {mask!r} does not say its cells (it depends "
                                 f"on the batch or weighs keys): use attention_backend=sdpa")


def _skip_unread_weights(stack: Stack, state_dict: dict, prefix: str, *args) -> None:
    """Load hook: drop a state dict's weights of the layers ``stack`` does not read (a LLaVA
    checkpoint written when the vision tower still held its unused last layer)."""
    for key in [k for k in state_dict if k.startswith(prefix) and stack.unread(k.removeprefix(prefix))]:
        del state_dict[key]
