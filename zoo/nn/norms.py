"""Normalisation layers: LayerNorm (mean and variance) or RMSNorm (scale only), by name.

A Block's norms, its stack's final norm and its queries' and keys' norms (``BlockConfig.qk_norm``)
are all of one class, named by ``BlockConfig.norm`` (timm passes the class, ``norm_layer``; here it
is a name, so that a stored config stays data and names no code).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class UnitOffsetRMSNorm(nn.Module):
    """RMSNorm that scales by ``1 + weight`` (Gemma 2 / 3): the weight starts at 0, not 1.

    Computed in at least float32 and cast back to the input's dtype, as Gemma's reference does
    (``(x * w).to(bf16)``, not Llama's ``x.to(bf16) * w``). x (..., d) -> (..., d).
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.to(h.dtype))).to(x.dtype)


NORMS = ("layernorm", "rmsnorm", "rmsnorm_1p")


def make_norm(kind: str, d_model: int, eps: float, bias: bool = True) -> nn.Module:
    """``layernorm`` (original, GPT, BERT, ViT, Whisper), ``rmsnorm`` (T5, Llama, Qwen, OLMo 2) or
    ``rmsnorm_1p`` (Gemma 2 / 3: RMSNorm scaled by 1 + w) over the last ``d_model`` values."""
    if kind == "layernorm":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=eps)
    if kind == "rmsnorm_1p":
        return UnitOffsetRMSNorm(d_model, eps=eps)
    raise ValueError(f"unknown norm {kind!r}: expected one of {list(NORMS)}")
