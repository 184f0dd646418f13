"""Two towers of the same Block: the encoder reads the source, the decoder (with
cross-attention into the encoder's output) writes the target.

The original Transformer, T5 and Whisper are this class with different embedders,
masks, block knobs and heads.
"""

from __future__ import annotations

from torch import Tensor, nn

from zoo.models.features import tower_features
from zoo.nn.flops import linear_flops, tower_flops, training_flops
from zoo.models.model import init_weights
from zoo.nn.block import BlockConfig
from zoo.nn.cache import KVCache
from zoo.nn.context import AttentionContext
from zoo.nn.masks import CausalMask, NoMask
from zoo.nn.parts import Part, build_embedder, build_head
from zoo.nn.positions import RotaryEmbedding
from zoo.nn.tower import Tower, towers_of

# State-dict names before the two stacks became towers (checkpoints written then): each
# tower now holds its embedder, its Blocks (under ``stack``) and its bias.
FORMER_KEYS = tuple((f"{part}{old}", f"{part}.{new}") for part in ("encoder", "decoder")
                    for old, new in (("_embedder.", "embedder."), ("_bias.", "bias."), (".blocks.", "stack.blocks."),
                                     (".norm.", "stack.norm.")))


def _rename_former_keys(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """Load hook: a state dict of the former layout (``encoder_embedder.*``, ``encoder.blocks.N.*``,
    ``encoder_bias.*``, ...) is renamed to the towers' names before loading."""
    for key in list(state_dict):
        name = key.removeprefix(prefix)
        for old, new in FORMER_KEYS:
            if key.startswith(prefix) and name.startswith(old):
                state_dict[prefix + new + name.removeprefix(old)] = state_dict.pop(key)
                break


class EncoderDecoder(nn.Module):
    """Encoder tower + decoder tower + head.

    Args:
        encoder_embedder: source -> (B, S, D) (tokens, log-mel frames, ...).
        decoder_embedder: target ids -> (B, T, D). Either, and the head, may be a partial, built
            at the Block's width (and dropout: the embedders; ``zoo.nn.parts``).
        block: Block knobs of both towers.
        n_encoder_layers, n_decoder_layers: depth of each tower.
        head: (B, T, D) -> logits (B, T, V).
        context: the longest target the decoder accepts.
        final_norm: a norm after each tower's Blocks (pre-LN models).
        tie_embeddings: the head's matrix is the decoder token embedding's.
        share_embeddings: the decoder uses the encoder's token embedding (shared vocabulary).
        encoder_bias, decoder_bias: optional modules ``(q_len, k_len, start) -> (1|B, H, Lq, Lk)``
            giving an additive attention bias computed once per forward and shared by all
            layers of their tower (T5's relative position bias).
        encoder_mask, decoder_mask: masks of the two self-attentions (default: padding only,
            and causal); each one mask or a ``PerLayer`` pattern (see ``zoo.nn.stack.Stack``).
        rotary: rotary positions inside both towers' self-attention (``rotary_base``: its
            base); ``context`` bounds the source as well then.
    """

    def __init__(
        self,
        encoder_embedder: Part,
        decoder_embedder: Part,
        block: BlockConfig,
        n_encoder_layers: int,
        n_decoder_layers: int,
        head: Part,
        context: int,
        final_norm: bool = True,
        tie_embeddings: bool = False,
        share_embeddings: bool = False,
        encoder_bias: nn.Module | None = None,
        decoder_bias: nn.Module | None = None,
        encoder_mask=None,
        decoder_mask=None,
        rotary: bool = False,
        rotary_base: float = 10000.0,
        init_std: float = 0.02,
    ):
        super().__init__()
        # the parts first, in the order Hydra built them in before they were partials (the same
        # initial weights for a seed)
        encoder_embedder, decoder_embedder = build_embedder(encoder_embedder, block), build_embedder(decoder_embedder, block)
        head = build_head(head, block.d_model)
        rope = RotaryEmbedding(block.d_head, context, rotary_base) if rotary else None
        self.encoder = Tower(encoder_embedder, block, n_encoder_layers, NoMask() if encoder_mask is None else encoder_mask,
                             "encoder", final_norm=final_norm, rope=rope, bias=encoder_bias)
        self.decoder = Tower(decoder_embedder, block, n_decoder_layers,
                             CausalMask() if decoder_mask is None else decoder_mask, "decoder", cross_attention=True,
                             final_norm=final_norm, rope=rope, bias=decoder_bias)
        self.head = head
        self.context, self.n_decoder_layers = context, n_decoder_layers
        parts = [encoder_embedder, decoder_embedder, head, self.encoder.stack, self.decoder.stack]
        init_weights(parts + [b for b in (encoder_bias, decoder_bias) if b is not None], init_std,
                     n_encoder_layers + n_decoder_layers)
        if share_embeddings:
            decoder_embedder.tokens = encoder_embedder.tokens
        if tie_embeddings:
            head.tie(decoder_embedder.tokens)
        self.register_load_state_dict_pre_hook(_rename_former_keys)

    @property
    def towers(self) -> dict[str, Tower]:
        """``encoder`` and ``decoder``."""
        return towers_of(self)

    def encode(self, source: Tensor, source_padding: Tensor | None = None, **embed_kwargs) -> Tensor:
        """source -> memory (B, S, D). source_padding (B, S): True at real positions."""
        return self.encoder.hidden(source, source_padding, **embed_kwargs)

    def decode(
        self,
        target: Tensor,
        memory: Tensor,
        source_padding: Tensor | None = None,
        target_padding: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """target ids (B, T) (only the new ones when ``cache`` is given) -> logits (B, T, V)."""
        cross = AttentionContext.over(memory, source_padding)
        return self.head(self.decoder.hidden(target, target_padding, cross=cross, cache=cache))

    def features(self, source: Tensor, source_padding: Tensor | None = None, target: Tensor | None = None,
                 target_padding: Tensor | None = None, layer: int | None = None) -> Tensor:
        """The encoder's hidden states (B, S, D) for ``source``, or with ``target`` (B, T) the
        decoder's (B, T, D) over the whole encoder output: the head is not run.

        layer: of the tower whose states are returned; ``None`` for its last hidden state (final
        norm included), else the residual stream after that many Blocks (see ``zoo.models.features``).
        """
        if target is None:
            return tower_features(self.encoder, source, layer, key_padding=source_padding)
        cross = AttentionContext.over(self.encode(source, source_padding), source_padding)
        return tower_features(self.decoder, target, layer, key_padding=target_padding, cross=cross)

    def forward(
        self,
        source: Tensor,
        target: Tensor,
        source_padding: Tensor | None = None,
        target_padding: Tensor | None = None,
    ) -> Tensor:
        """Teacher forcing: logits (B, T, V) for every target position."""
        memory = self.encode(source, source_padding)
        return self.decode(target, memory, source_padding, target_padding)

    def new_cache(self) -> KVCache:
        return KVCache(self.n_decoder_layers)

    def batch_flops(self, source: Tensor, target: Tensor) -> int:
        """Training FLOPs of one step on ``source`` and ``target`` (what ``forward`` takes)."""
        return self.training_flops(source.shape[0], self.encoder.output_length(source), target.shape[1])

    def training_flops(self, batch: int, source_length: int, target_length: int) -> int:
        """Analytic FLOPs of one training step (forward + backward) on ``batch`` pairs of
        ``source_length`` encoder and ``target_length`` decoder positions (see zoo.nn.flops)."""
        return training_flops(batch * (tower_flops(self.encoder, source_length)
                                       + tower_flops(self.decoder, target_length, source_length)
                                       + target_length * linear_flops(self.head)))
