"""The Block: attention + feed-forward, each inside a residual connection and a norm.

Every model in the zoo is a stack of this one class. It never branches on a
model family: families differ in the knobs of :class:`BlockConfig`, which are
exactly the ones the real checkpoints differ in, and in the
:class:`~zoo.nn.context.AttentionContext` their stack hands each layer. The knobs and
why each exists: :mod:`zoo.nn.knobs` (docs/design.md's table is generated from it).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from zoo.nn.attention import MultiHeadAttention
from zoo.nn.cache import LayerCache
from zoo.nn.context import AttentionContext
from zoo.nn.feedforward import feed_forward
from zoo.nn.layer_scale import scaled
from zoo.nn.norms import make_norm


@dataclass
class BlockConfig:
    """The Block's shape and knobs. What each is, its part of the Block and why it exists:
    :data:`zoo.nn.knobs.KNOBS` (one entry per field: describe and docs/design.md's table read it)."""

    d_model: int = 384
    n_heads: int = 6
    d_ff: int = 1536
    n_kv_heads: int | None = None
    head_dim: int | None = None
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    norm_bias: bool = True
    prenorm: bool = True
    input_norm: bool = True
    parallel: bool = False
    output_norm: bool = False
    qk_norm: str | None = None
    attn_softcap: float | None = None
    layer_scale: float | None = None
    activation: str = "gelu"
    gated: bool = False
    n_experts: int = 0
    top_k: int = 2
    norm_topk: bool = True
    bias_q: bool = True
    bias_k: bool = True
    bias_v: bool = True
    bias_out: bool = True
    bias_ffn: bool = True
    attn_scale: float | None = None
    dropout: float = 0.0
    attn_dropout: float = 0.0
    ffn_dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}")
        if not self.input_norm and not self.prenorm:
            raise ValueError("block.input_norm=false needs pre-LN Blocks (block.prenorm=true): a post-LN Block's "
                             "norm is its output's")
        if self.parallel and not self.prenorm:
            raise ValueError("block.parallel=true needs pre-LN Blocks (block.prenorm=true): x + attn(ln(x)) + ffn(ln(x))")

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads


class Block(nn.Module):
    """Self-attention, optional cross-attention, feed-forward; residual + norm around each.

    The one layer of every family (docs/design.md: the knobs and the families table).
    Who sees whom, and where positions act inside attention, is not decided here: it
    arrives in the forward's :class:`~zoo.nn.context.AttentionContext`.

    Args:
        cfg: the shape and knobs, shared by every layer of a stack.
        cross_attention: a cross-attention sublayer (the decoders of encoder-decoders).
        attn_norm: this layer's per-layer data, given by its stack at construction: ``False``,
            its attention reads ``x`` as it is, with no norm of its own (ModernBERT's first
            layer, whose input the embedder's norm has normed already); pre-LN only.

    Each sublayer's norms: ``attn_norm`` / ``cross_norm`` / ``ffn_norm`` on its input (pre-LN,
    unless ``input_norm=False``) or on the residual sum (post-LN), and with ``output_norm``
    ``attn_out_norm`` / ``cross_out_norm`` / ``ffn_out_norm`` on its output, before the add.
    """

    def __init__(self, cfg: BlockConfig, cross_attention: bool = False, attn_norm: bool = True):
        super().__init__()
        if not attn_norm and not cfg.prenorm:
            raise ValueError("a Block without its attention norm (first_attn_norm=false) needs pre-LN Blocks "
                             "(block.prenorm=true): a post-LN Block's norm is its output's")
        if cfg.parallel and cross_attention:
            raise ValueError("block.parallel=true has no place for cross-attention: use sequential Blocks")
        self.prenorm, self.parallel = cfg.prenorm, cfg.parallel

        def norm(width: int = cfg.d_model) -> nn.Module:
            return make_norm(cfg.norm, width, cfg.norm_eps, cfg.norm_bias)

        def attn() -> MultiHeadAttention:
            return MultiHeadAttention(
                d_model=cfg.d_model, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, bias_q=cfg.bias_q,
                bias_k=cfg.bias_k, bias_v=cfg.bias_v, bias_out=cfg.bias_out, scale=cfg.attn_scale,
                dropout=cfg.attn_dropout, d_head=cfg.head_dim, qk_norm=cfg.qk_norm, norm_layer=norm,
                softcap=cfg.attn_softcap)

        def norms(present: bool = True) -> tuple[nn.Module, nn.Module]:
            """A sublayer's (input norm, or post-LN the sum's; output norm), ``nn.Identity`` where absent."""
            inner = norm() if present and cfg.input_norm else nn.Identity()
            return inner, scaled(norm() if cfg.output_norm else nn.Identity(), cfg.d_model, cfg.layer_scale)

        self.attn, (self.attn_norm, self.attn_out_norm) = attn(), norms(attn_norm)
        self.cross_attn = attn() if cross_attention else None
        self.cross_norm, self.cross_out_norm = norms() if cross_attention else (None, None)
        self.ffn = feed_forward(cfg)  # dense, or a mixture of experts (cfg.n_experts)
        self.ffn_norm, self.ffn_out_norm = norms()
        self.dropout = nn.Dropout(cfg.dropout)

    def _residual(self, x: Tensor, norm: nn.Module, out_norm: nn.Module, sublayer, read: Tensor | None = None) -> Tensor:
        """x plus the sublayer's output; pre-LN, the sublayer reads ``read`` (None: x; a parallel Block's input)."""
        if self.prenorm:
            return x + self.dropout(out_norm(sublayer(norm(x if read is None else read))))
        return norm(x + self.dropout(out_norm(sublayer(x))))

    def forward(self, x: Tensor, context: AttentionContext | None = None, cache: LayerCache | None = None) -> Tensor:
        """x: (B, L, D) -> (B, L, D).

        ``context``: what self-attention reads besides ``x`` (mask, bias, rotary); its
        ``cross`` is the context of cross-attention (the memory (B, S, D) and its mask),
        required when this Block has cross-attention. ``cache``: incremental decoding.
        Sequential: x + attn(norm(x)), then + ffn(norm(that)); parallel: x + attn(norm(x)) + ffn(norm(x)).
        """
        context = context or AttentionContext()
        block_input = x
        x = self._residual(x, self.attn_norm, self.attn_out_norm, lambda h: self.attn(h, context, cache))
        if self.cross_attn is not None:
            if context.cross is None:
                raise ValueError("this Block has cross-attention but its context has no memory to attend to "
                                 "(give the context a cross context: AttentionContext.over(memory))")
            x = self._residual(x, self.cross_norm, self.cross_out_norm,
                               lambda h: self.cross_attn(h, context.cross, cache))
        return self._residual(x, self.ffn_norm, self.ffn_out_norm, self.ffn, block_input if self.parallel else None)
