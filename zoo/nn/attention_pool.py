"""Multihead attention pooling (the "MAP head", Zhai et al. 2022): one learned probe attends over
every position of a tower's output, and the attended vector goes through a residual feed-forward.

SigLIP's vision tower has no CLS token; this head is how it makes one vector of an image
(Hugging Face's ``SiglipMultiheadAttentionPoolingHead``). Built from the zoo's own pieces: the
attention is :class:`~zoo.nn.attention.MultiHeadAttention` as cross-attention from the probe into
the tower's output, the feed-forward is :class:`~zoo.nn.feedforward.FeedForward`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.nn.attention import MultiHeadAttention
from zoo.nn.context import AttentionContext
from zoo.nn.feedforward import FeedForward


class AttentionPoolHead(nn.Module):
    """Vectors (B, L, D) -> one vector (B, D): probe <- attention over the L vectors; then
    ``x + ffn(norm(x))`` (pre-LN, no norm before the attention: the tower's final norm is its input's).

    Args:
        d_model: width of the tower's output (and of the probe).
        n_heads: heads of the probe's attention (SigLIP: the tower's).
        d_ff: the feed-forward's inner width (SigLIP: the tower's ``intermediate_size``).
        activation: the feed-forward's activation (``zoo.nn.feedforward.ACTIVATIONS``).
        norm_eps: the LayerNorm's epsilon.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, activation: str = "gelu_tanh", norm_eps: float = 1e-6):
        super().__init__()
        self.probe = nn.Parameter(torch.randn(1, 1, d_model))
        self.attn = MultiHeadAttention(d_model=d_model, n_heads=n_heads)
        self.norm = nn.LayerNorm(d_model, eps=norm_eps)
        self.ffn = FeedForward(d_model, d_ff, activation)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, L, D), every position real (an image's patches) -> (B, D)."""
        pooled = self.attn(self.probe.expand(x.shape[0], -1, -1), AttentionContext.over(x))
        return (pooled + self.ffn(self.norm(pooled)))[:, 0]
