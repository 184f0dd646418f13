"""The backbone: embedder -> stack of Blocks (under a mask) -> head.

:class:`Model` is every single-stack family (GPT, BERT, ViT, Llama); an
encoder-decoder joins two stacks. Which family it is comes from the pieces it
is given, never from a branch in here.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from zoo.train.flops import attention_flops, linear_flops, training_flops
from zoo.nn.block import Block, BlockConfig
from zoo.nn.cache import KVCache
from zoo.nn.context import AttentionContext
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
    """

    def __init__(self, block: BlockConfig, n_layers: int, mask=None, cross_attention: bool = False,
                 final_norm: bool = True):
        super().__init__()
        self.blocks = nn.ModuleList(Block(block, cross_attention) for _ in range(n_layers))
        self.norm = make_norm(block.norm, block.d_model, block.norm_eps, block.norm_bias) if final_norm else None
        self.layer_masks = per_layer(NoMask() if mask is None else mask, n_layers)

    def contexts(
        self,
        length: int,
        device: torch.device,
        start: int = 0,
        key_padding: Tensor | None = None,
        prefix_len: Tensor | None = None,
        rotary: RotaryEmbedding | None = None,
        bias: nn.Module | None = None,
        cross: AttentionContext | None = None,
    ) -> list[AttentionContext]:
        """The attention context of each layer, for ``length`` new positions after ``start``
        already decoded ones: built once per distinct mask (layers sharing a mask share the
        object), from the mask, the position modules and the cross context.

        key_padding (B, start + length): True at real positions. prefix_len (B,): prefix-LM
        masks. rotary: a rotary table module; bias: a module ``(q_len, k_len, start) ->
        (1|B, H, q_len, k_len)`` giving an additive bias (T5's relative position bias).
        Both are computed once here and shared by every context.
        """
        k_len = start + length
        rope = None if rotary is None else rotary(length, start)
        table = None if bias is None else bias(length, k_len, start)
        built: dict = {}
        for mask in self.layer_masks:
            if mask not in built:
                built[mask] = AttentionContext.build(mask, length, k_len, device, key_padding, prefix_len, table,
                                                     rope, cross)
        return [built[mask] for mask in self.layer_masks]

    def forward(self, x: Tensor, contexts: list[AttentionContext], cache: KVCache | None = None) -> Tensor:
        """(B, L, D) -> (B, L, D); ``contexts``: one per layer, from :meth:`contexts`."""
        for i, (block, context) in enumerate(zip(self.blocks, contexts, strict=True)):
            x = block(x, context, None if cache is None else cache.layers[i])
        return x if self.norm is None else self.norm(x)


def init_weights(module: nn.Module, std: float, n_layers: int) -> None:
    """GPT-2's initialisation: N(0, std) weights, zero biases, and the projections
    that write into the residual stream scaled down by sqrt(2 * n_layers) so the
    residual's variance does not grow with depth."""
    for name, m in module.named_modules():
        if isinstance(m, nn.Linear):
            residual = name.endswith(("attn.out", "ffn.fc_out"))
            nn.init.normal_(m.weight, std=std / math.sqrt(2 * n_layers) if residual else std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)


class Model(nn.Module):
    """One stack of Blocks between an embedder and a head.

    Args:
        embedder: input -> (B, L, D), e.g. ``TokenEmbedder``.
        mask: a mask from ``zoo.nn.masks`` (``CausalMask()``, ``NoMask()``, ...), or
            ``PerLayer([...])``, a pattern of them repeated over the layers.
        block: the Block's shape and knobs, shared by all layers.
        n_layers: number of Blocks.
        head: (B, L, D) -> outputs, e.g. ``LMHead``.
        final_norm: a norm after the last Block (pre-LN models have one).
        tie_embeddings: the head's matrix is the token embedding's.
        rotary: rotary positions inside attention (positions then are not in the embedder).
        bias: an additive attention bias module ``(q_len, k_len, start) -> (1|B, H, Lq, Lk)``,
            shared by all layers (T5's relative position bias, ``zoo.nn.relative_bias``).
        context: the longest sequence the model accepts.
        init_std: std of the normal initialisation.
    """

    def __init__(
        self,
        embedder: nn.Module,
        mask,
        block: BlockConfig,
        n_layers: int,
        head: nn.Module,
        context: int,
        final_norm: bool = True,
        tie_embeddings: bool = False,
        rotary: bool = False,
        rotary_base: float = 10000.0,
        bias: nn.Module | None = None,
        init_std: float = 0.02,
    ):
        super().__init__()
        self.embedder, self.mask, self.head = embedder, mask, head
        self.stack = Stack(block, n_layers, mask, final_norm=final_norm)
        self.rope = RotaryEmbedding(block.d_head, context, rotary_base) if rotary else None
        self.bias = bias
        self.context, self.n_layers = context, n_layers
        for layer_mask in self.stack.layer_masks:
            if isinstance(layer_mask, Mask):
                layer_mask.check_context(context)
        init_weights(self, init_std, n_layers)
        if tie_embeddings:
            head.tie(embedder.tokens)

    def forward(
        self,
        inputs: Tensor,
        key_padding: Tensor | None = None,
        prefix_len: Tensor | None = None,
        cache: KVCache | None = None,
        keep: Tensor | None = None,
        **embed_kwargs,
    ) -> Tensor:
        """inputs (B, L) token ids (or what the embedder takes) -> head output, e.g. (B, L, V).

        key_padding (B, L): True at real positions. prefix_len (B,): for prefix-LM masks.
        cache: decode incrementally, ``inputs`` being the new positions only.
        keep (B, L) bool: only these positions go through the head, which then returns
        (N, ...) for the N kept positions. A masked LM scores ~15% of the positions, so
        this skips most of the (large) vocabulary projection.
        """
        start = 0 if cache is None else cache.length
        x = self.embedder(inputs, start=start, **embed_kwargs)
        contexts = self.stack.contexts(x.shape[1], x.device, start, key_padding, prefix_len, self.rope, self.bias)
        x = self.stack(x, contexts, cache)
        return self.head(x if keep is None else x[keep])

    def new_cache(self) -> KVCache:
        """An empty cache; layers whose mask sees only the latest keys get a rolling buffer."""
        return KVCache(self.n_layers, [getattr(m, "cache_keep", None) for m in self.stack.layer_masks])

    def num_params(self, embedding: bool = True) -> int:
        """Parameter count; ``embedding=False`` leaves out the embedder (as GPT-2 papers do)."""
        total = sum(p.numel() for p in self.parameters())
        return total if embedding else total - sum(p.numel() for p in self.embedder.parameters())

    def batch_flops(self, inputs: Tensor) -> int:
        """Training FLOPs of one step on ``inputs`` (what ``forward`` takes)."""
        length = self.embedder.output_length(inputs) if hasattr(self.embedder, "output_length") else inputs.shape[1]
        return self.training_flops(inputs.shape[0], length)

    def training_flops(self, batch: int, length: int) -> int:
        """Analytic FLOPs of one training step (forward + backward) on ``batch`` sequences of
        ``length`` positions (see zoo.train.flops)."""
        per_token = linear_flops(self.stack) + linear_flops(self.head)
        return training_flops(batch * (length * per_token + attention_flops(self.stack, length, length)))
