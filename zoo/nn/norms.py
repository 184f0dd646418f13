"""Normalisation layers: LayerNorm (mean and variance) or RMSNorm (scale only)."""

from __future__ import annotations

from torch import nn


def make_norm(kind: str, d_model: int, eps: float, bias: bool = True) -> nn.Module:
    """``layernorm`` (original, GPT, BERT, ViT, Whisper) or ``rmsnorm`` (T5, Llama)."""
    if kind == "layernorm":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=eps)
    raise ValueError(f"unknown norm {kind!r}: expected 'layernorm' or 'rmsnorm'")
