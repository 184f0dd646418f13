"""Multi-head attention: the one attention layer every family uses.

Self- and cross-attention are the same module; the only difference is where
keys and values come from (the sequence itself, or the encoder's output).
Everything else the layer reads (the mask, an additive bias such as T5's relative
bias, the rotary table, the memory) arrives folded in one
:class:`~zoo.nn.context.AttentionContext`, so this file knows nothing about model
families.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.nn.blocked import Band, blocked_attention
from zoo.nn.cache import LayerCache
from zoo.nn.context import AttentionContext
from zoo.nn.flex import flex
from zoo.nn.masks import causal_mask
from zoo.nn.positions import apply_rotary

QK_NORMS = (None, "head", "all")


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout: float = 0.0,
    return_weights: bool = False,
    softcap: float | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention, softmax(q k^T * scale + mask) v.

    q: (B, H, Lq, Dh); k, v: (B, H, Lk, Dh) (k/v may have fewer heads: grouped-query, each kv
    head serving H / H_kv query heads). ``mask``: broadcastable to (B, H, Lq, Lk), either bool
    (True = may attend) or an additive float bias (-inf where hidden; see ``fold_into_bias``).
    ``scale`` defaults to 1/sqrt(Dh). Returns (output (B, H, Lq, Dh), weights
    (B, H, Lq, Lk) or None).

    The normal path is ``F.scaled_dot_product_attention`` (flash / memory-efficient
    kernels). ``return_weights=True`` takes the explicit path, which computes the
    same thing step by step and also returns the attention weights; it is for
    inspection (attention maps), not training. ``softcap`` c caps the scores smoothly before
    the mask, c * tanh(s / c) (Gemma 2), which SDPA cannot: the explicit path computes them.
    """
    if mask is not None and mask.is_floating_point():  # SDPA wants an additive mask in q's dtype (autocast)
        mask = mask.to(q.dtype)
    grouped = k.shape[1] != q.shape[1]  # grouped-query attention: each kv head serves several query heads
    if not return_weights and softcap is None:
        # enable_gqa: SDPA reads each kv head for its group, where repeating k and v would copy
        # them (the whole cache, at every decoding step)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, scale=scale, enable_gqa=grouped
        )
        return out, None
    if grouped:
        repeat = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if is_causal:
        scores = scores.masked_fill(~causal_mask(*scores.shape[-2:], q.device), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    # a query that sees no key at all (a padded one whose window holds only padding) gets zero
    # weights, as SDPA gives it, not the NaN of softmax over -inf: its NaN would reach every later
    # query through the next layer's (hidden, weight 0) keys
    weights = scores.softmax(dim=-1).masked_fill(scores.isneginf().all(-1, keepdim=True), 0.0)
    weights = F.dropout(weights, dropout) if dropout > 0 else weights
    return weights @ v, weights


class MultiHeadAttention(nn.Module):
    """Project to heads, attend, merge heads, project out.

    Args (keywords only: thirteen settings, several of one type, read wrongly by position):
        d_model: model width.
        n_heads: query heads; ``d_model`` must divide by it.
        n_kv_heads: key/value heads (fewer than ``n_heads`` = grouped-query attention).
        bias_q, bias_k, bias_v, bias_out: a bias on each projection (Whisper has no
            key bias; T5 and Llama have none at all).
        scale: logit scale; None = 1/sqrt(d_head); T5 uses 1.0.
        dropout: dropout on the attention weights (training only).
        d_head: width of a head; None = d_model / n_heads.
        qk_norm: a norm on the queries and keys, before rotary: ``head`` (over each head's
            d_head values: Qwen3, Gemma 3) or ``all`` (over the whole projection: OLMo 2); None: none.
        norm_layer: ``width -> norm module``, the norm ``qk_norm`` builds.
        softcap: c, the attention scores become c * tanh(s / c) (Gemma 2); None: as they are.
    """

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        bias_q: bool = True,
        bias_k: bool = True,
        bias_v: bool = True,
        bias_out: bool = True,
        scale: float | None = None,
        dropout: float = 0.0,
        d_head: int | None = None,
        qk_norm: str | None = None,
        norm_layer: Callable[[int], nn.Module] | None = None,
        softcap: float | None = None,
    ):
        super().__init__()
        n_kv_heads = n_kv_heads or n_heads
        if d_head is None and d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.d_head = d_head or d_model // n_heads
        self.scale, self.dropout, self.softcap = scale, dropout, softcap
        if qk_norm not in QK_NORMS:
            raise ValueError(f"qk_norm={qk_norm!r}: expected one of {list(QK_NORMS)}")
        self.qk_norm = qk_norm
        self.q = nn.Linear(d_model, n_heads * self.d_head, bias=bias_q)
        self.k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias_k)
        self.v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias_v)
        self.out = nn.Linear(n_heads * self.d_head, d_model, bias=bias_out)
        self.q_norm = self.k_norm = None
        if qk_norm is not None:  # over one head's values, or over all of a projection's
            self.q_norm = norm_layer(self.d_head if qk_norm == "head" else n_heads * self.d_head)
            self.k_norm = norm_layer(self.d_head if qk_norm == "head" else n_kv_heads * self.d_head)
        # Inspection path (attention maps): when True, the explicit path runs and
        # the last weights are kept in ``last_weights`` (B, H, Lq, Lk).
        self.keep_weights = False
        self.last_weights: Tensor | None = None

    def _heads(self, x: Tensor, n: int) -> Tensor:
        """(B, L, n*Dh) -> (B, n, L, Dh)."""
        b, length, _ = x.shape
        return x.view(b, length, n, self.d_head).transpose(1, 2)

    def _normed_heads(self, x: Tensor, n: int, norm: nn.Module | None) -> Tensor:
        """A query or key projection (B, L, n*Dh) -> (B, n, L, Dh), through its norm (``qk_norm``)."""
        if self.qk_norm == "all":
            x = norm(x)
        x = self._heads(x, n)
        return norm(x) if self.qk_norm == "head" else x

    def forward(self, x: Tensor, context: AttentionContext | None = None, cache: LayerCache | None = None) -> Tensor:
        """x: (B, L, D) -> (B, L, D), attending as ``context`` says (None: everyone, no positions).

        Cross-attention when ``context.memory`` (B, S, D) is set: keys and values come from
        the memory, and with a ``cache`` they are computed once and reused afterwards.
        Self-attention with a ``cache`` (incremental decoding) appends the new keys/values.
        """
        context = context or AttentionContext()
        cross = context.memory is not None
        q = self._normed_heads(self.q(x), self.n_heads, self.q_norm)
        if cross and cache is not None and cache.cross is not None:
            k, v = cache.cross
        else:
            source = context.memory if cross else x
            if context.zero_keys:  # a grid padded to whole windows (Swin): the padding reads as zero vectors
                source = torch.cat([source, source.new_zeros(source.shape[0], context.zero_keys, source.shape[2])], 1)
            k = self._normed_heads(self.k(source), self.n_kv_heads, self.k_norm)
            v = self._heads(self.v(source), self.n_kv_heads)
            if context.rope is not None:
                q, k = apply_rotary(q, *context.rope), apply_rotary(k, *context.rope)
            if cache is not None:
                if cross:
                    cache.cross = (k, v)
                else:
                    k, v = cache.append(k, v)
        dropout = self.dropout if self.training else 0.0
        if isinstance(context.plan, (list, Band)) and not self.keep_weights:  # the block backend's plan
            out, weights = blocked_attention(q, k, v, context.plan, context.key_padding, lambda q_, k_, v_, m: attention(
                q_, k_, v_, mask=m, scale=self.scale, dropout=dropout, softcap=self.softcap)[0]), None
        elif context.plan is not None and not self.keep_weights:  # FlexAttention's BlockMask
            out, weights = flex(q, k, v, context.plan, self.scale, self.softcap), None
        else:
            mask, is_causal = context.dense(q.shape[2], k.shape[2], q.device)
            if mask is not None and mask.shape[-1] > k.shape[2]:
                mask = mask[..., -k.shape[2]:]  # a rolling cache kept only the latest keys: their columns
            out, weights = attention(q, k, v, mask=mask, is_causal=is_causal, scale=self.scale,
                                     dropout=dropout, return_weights=self.keep_weights, softcap=self.softcap)
        self.last_weights = weights
        b, _, length, _ = out.shape
        return self.out(out.transpose(1, 2).reshape(b, length, self.n_heads * self.d_head))
