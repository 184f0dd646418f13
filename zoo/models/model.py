"""The backbone: one tower (embedder -> stack of Blocks under a mask -> final norm) and a head.

:class:`Model` is every single-tower family (GPT, BERT, ViT, Llama, LLaVA's language model);
an encoder-decoder joins two towers. Which family it is comes from the pieces it is given,
never from a branch in here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from torch import Tensor, nn

from zoo.models.features import tower_features
from zoo.nn.flops import linear_flops, tower_flops, training_flops
from zoo.nn.block import BlockConfig
from zoo.nn.cache import KVCache
from zoo.nn.parts import Part, build_embedder, build_head
from zoo.nn.positions import rotary_tables, rotary_width
from zoo.nn.tower import Tower, drop_unread_layers, towers_of


def init_weights(parts: Iterable[nn.Module], std: float, n_layers: int) -> None:
    """GPT-2's initialisation: N(0, std) weights, zero biases, and the projections
    that write into the residual stream scaled down by sqrt(2 * n_layers) so the
    residual's variance does not grow with depth.

    ``parts`` are drawn in the order given (the random stream, hence every initial weight,
    depends on it: the containers keep the order their modules had before towers)."""
    for part in parts:
        for name, m in part.named_modules():
            if isinstance(m, nn.Linear):
                residual = name.endswith(("attn.out", "fc_out"))  # fc_out: a feed-forward's, or each expert's
                nn.init.normal_(m.weight, std=std / math.sqrt(2 * n_layers) if residual else std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=std)


class Model(Tower):
    """One tower of Blocks between an embedder and a head.

    Args:
        embedder: input -> (B, L, D), e.g. ``TokenEmbedder``; a partial is built at the Block's
            width and dropout (``zoo.nn.parts``: a family config states them once, in the Block).
        mask: a mask from ``zoo.nn.masks`` (``CausalMask()``, ``NoMask()``, ...), or
            ``PerLayer([...])``, a pattern of them repeated over the layers.
        block: the Block's shape and knobs, shared by all layers.
        n_layers: number of Blocks.
        head: (B, L, D) -> outputs, e.g. ``LMHead``; a partial is built at the Block's width.
        final_norm: a norm after the last Block (pre-LN models have one).
        tie_embeddings: the head's matrix is the token embedding's.
        rotary: rotary positions inside attention (positions then are not in the embedder).
        rotary_base: the rotary base, or a list of them repeated over the layers (ModernBERT's
            global and local layers rotate at different rates: ``zoo.nn.positions.rotary_tables``).
        rotary_scale: linear position scaling (position p rotates as p / scale), or a list of
            them repeated over the layers (Gemma 3 4B scales its global layers by 8, not its local ones).
        rotary_fraction: the part of each head that rotates (GPT-NeoX's ``rotary_pct``: 0.25 in
            Pythia); the rest of the head carries no position.
        bias: an additive attention bias module ``(q_len, k_len, start) -> (1|B, H, Lq, Lk)``,
            shared by all layers (T5's relative position bias, ``zoo.nn.relative_bias``), or one per
            layer in an ``nn.ModuleList`` (BEiT's: ``zoo.nn.relative_bias.relative_biases``).
        context: the longest sequence the model accepts.
        init_std: std of the normal initialisation.
        attention_backend: ``sdpa`` (dense mask), ``blocks`` or ``flex`` (skip the key blocks the
            mask hides; see ``zoo.nn.stack.Stack``).
        first_attn_norm: ``False``: no norm before the first Block's attention (ModernBERT, whose
            embedder ends in a norm).

    The tower is named ``decoder`` when every layer's mask is causal, ``encoder`` otherwise
    (``towers``: with LLaVA's vision tower, from the embedder, beside it).
    """

    def __init__(
        self,
        embedder: Part,
        mask,
        block: BlockConfig,
        n_layers: int,
        head: Part,
        context: int,
        final_norm: bool = True,
        tie_embeddings: bool = False,
        rotary: bool = False,
        rotary_base: float | Sequence[float] = 10000.0,
        rotary_fraction: float = 1.0,
        rotary_scale: float | Sequence[float] = 1.0,
        bias: nn.Module | None = None,
        init_std: float = 0.02,
        attention_backend: str = "sdpa",
        first_attn_norm: bool = True,
    ):
        # the parts first, embedder then head: the order Hydra built them in before they were
        # partials, so a seed draws the same initial weights
        embedder, head = build_embedder(embedder, block), build_head(head, block.d_model)
        rope = rotary_tables(rotary_width(block.d_head, rotary_fraction), context, rotary_base, n_layers,
                             rotary_scale) \
            if rotary else None
        super().__init__(embedder, block, n_layers, mask, final_norm=final_norm, rope=rope, bias=bias,
                         attention_backend=attention_backend, first_attn_norm=first_attn_norm)
        self.name = "decoder" if all(m.causal for m in self.layer_masks) else "encoder"
        self.mask, self.head = mask, head
        self.context, self.n_layers = context, n_layers
        for layer_mask in self.layer_masks:
            layer_mask.check_context(context)
        init_weights([embedder, head, self.stack] + ([] if bias is None else [bias]), init_std, n_layers)
        if tie_embeddings:
            head.tie(embedder.tokens)
        drop_unread_layers(self)

    @property
    def towers(self) -> dict[str, Tower]:
        """This tower and any inside its embedder (LLaVA's ``vision``), by name."""
        return towers_of(self)

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
        x = self.hidden(inputs, key_padding, prefix_len, cache=cache, **embed_kwargs)
        if keep is None and getattr(self.head, "reads_padding", False):  # a classifier pooling the real tokens
            return self.head(x, key_padding)
        return self.head(x if keep is None else x[keep])

    def features(self, inputs: Tensor, key_padding: Tensor | None = None, prefix_len: Tensor | None = None,
                 layer: int | None = None, **embed_kwargs) -> Tensor:
        """inputs (B, L) (what ``forward`` takes) -> hidden states (B, L', D), the head not run.

        layer: ``None`` for the last hidden state (final norm included), else the residual
        stream after that many Blocks (negative: from the end; see ``zoo.models.features``).
        LLaVA: ``images=`` as in ``forward``; the states are the language tower's.
        """
        return tower_features(self, inputs, layer, key_padding=key_padding, prefix_len=prefix_len, **embed_kwargs)

    def new_cache(self) -> KVCache:
        """An empty cache; layers whose mask sees only the latest keys get a rolling buffer."""
        return KVCache(self.n_layers, [m.cache_keep for m in self.layer_masks])

    def num_params(self, embedding: bool = True) -> int:
        """Parameter count; ``embedding=False`` leaves out the embedder (as GPT-2 papers do)."""
        total = sum(p.numel() for p in self.parameters())
        return total if embedding else total - sum(p.numel() for p in self.embedder.parameters())

    def batch_flops(self, inputs: Tensor) -> int:
        """Training FLOPs of one step on ``inputs`` (what ``forward`` takes)."""
        return self.training_flops(inputs.shape[0], self.output_length(inputs))

    def training_flops(self, batch: int, length: int) -> int:
        """Analytic FLOPs of one training step (forward + backward) on ``batch`` sequences of
        ``length`` positions (see zoo.nn.flops); an inner tower (LLaVA's vision) is not counted."""
        return training_flops(batch * (tower_flops(self, length) + length * linear_flops(self.head)))
