"""Two stacks of the same Block: the encoder reads the source, the decoder (with
cross-attention into the encoder's output) writes the target.

The original Transformer, T5 and Whisper are this class with different embedders,
masks, block knobs and heads.
"""

from __future__ import annotations

from torch import Tensor, nn

from zoo.train.flops import attention_flops, cross_kv_flops, linear_flops, training_flops
from zoo.models.model import Stack, init_weights
from zoo.nn.block import BlockConfig
from zoo.nn.cache import KVCache
from zoo.nn.context import AttentionContext
from zoo.nn.masks import CausalMask, NoMask
from zoo.nn.positions import RotaryEmbedding


class EncoderDecoder(nn.Module):
    """Encoder stack + decoder stack + head.

    Args:
        encoder_embedder: source -> (B, S, D) (tokens, log-mel frames, ...).
        decoder_embedder: target ids -> (B, T, D).
        block: Block knobs of both stacks.
        n_encoder_layers, n_decoder_layers: depth of each stack.
        head: (B, T, D) -> logits (B, T, V).
        context: the longest target the decoder accepts.
        final_norm: a norm after each stack (pre-LN models).
        tie_embeddings: the head's matrix is the decoder token embedding's.
        share_embeddings: the decoder uses the encoder's token embedding (shared vocabulary).
        encoder_bias, decoder_bias: optional modules ``(q_len, k_len, start) -> (1|B, H, Lq, Lk)``
            giving an additive attention bias computed once per forward and shared by all
            layers of their stack (T5's relative position bias).
        encoder_mask, decoder_mask: masks of the two self-attentions (default: padding only,
            and causal); each one mask or a ``PerLayer`` pattern (see ``zoo.models.model.Stack``).
        rotary: rotary positions inside both stacks' self-attention (``rotary_base``: its
            base); ``context`` bounds the source as well then.
    """

    def __init__(
        self,
        encoder_embedder: nn.Module,
        decoder_embedder: nn.Module,
        block: BlockConfig,
        n_encoder_layers: int,
        n_decoder_layers: int,
        head: nn.Module,
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
        self.encoder_embedder, self.decoder_embedder, self.head = encoder_embedder, decoder_embedder, head
        self.encoder_mask = NoMask() if encoder_mask is None else encoder_mask
        self.decoder_mask = CausalMask() if decoder_mask is None else decoder_mask
        self.encoder = Stack(block, n_encoder_layers, self.encoder_mask, final_norm=final_norm)
        self.decoder = Stack(block, n_decoder_layers, self.decoder_mask, cross_attention=True, final_norm=final_norm)
        self.encoder_bias, self.decoder_bias = encoder_bias, decoder_bias
        self.rope = RotaryEmbedding(block.d_head, context, rotary_base) if rotary else None
        self.context, self.n_decoder_layers = context, n_decoder_layers
        init_weights(self, init_std, n_encoder_layers + n_decoder_layers)
        if share_embeddings:
            decoder_embedder.tokens = encoder_embedder.tokens
        if tie_embeddings:
            head.tie(decoder_embedder.tokens)

    def encode(self, source: Tensor, source_padding: Tensor | None = None, **embed_kwargs) -> Tensor:
        """source -> memory (B, S, D). source_padding (B, S): True at real positions."""
        x = self.encoder_embedder(source, **embed_kwargs)
        contexts = self.encoder.contexts(x.shape[1], x.device, key_padding=source_padding, rotary=self.rope,
                                         bias=self.encoder_bias)
        return self.encoder(x, contexts)

    def decode(
        self,
        target: Tensor,
        memory: Tensor,
        source_padding: Tensor | None = None,
        target_padding: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """target ids (B, T) (only the new ones when ``cache`` is given) -> logits (B, T, V)."""
        start = 0 if cache is None else cache.length
        x = self.decoder_embedder(target, start=start)
        contexts = self.decoder.contexts(x.shape[1], x.device, start, target_padding, rotary=self.rope,
                                         bias=self.decoder_bias, cross=AttentionContext.over(memory, source_padding))
        return self.head(self.decoder(x, contexts, cache))

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
        embedder = self.encoder_embedder
        length = embedder.output_length(source) if hasattr(embedder, "output_length") else source.shape[1]
        return self.training_flops(source.shape[0], length, target.shape[1])

    def training_flops(self, batch: int, source_length: int, target_length: int) -> int:
        """Analytic FLOPs of one training step (forward + backward) on ``batch`` pairs of
        ``source_length`` encoder and ``target_length`` decoder positions (see zoo.train.flops)."""
        encoder = source_length * linear_flops(self.encoder) + attention_flops(self.encoder, source_length, source_length)
        kv = cross_kv_flops(self.decoder)
        decoder = (target_length * (linear_flops(self.decoder) - kv + linear_flops(self.head)) + source_length * kv
                   + attention_flops(self.decoder, target_length, target_length, source_length))
        return training_flops(batch * (encoder + decoder))
