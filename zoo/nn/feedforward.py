"""The position-wise feed-forward network, plain or gated, and the Block's choice of feed-forward kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.nn.moe import MoEFeedForward

if TYPE_CHECKING:
    from zoo.nn.block import BlockConfig


def quick_gelu(x: Tensor) -> Tensor:
    """CLIP's sigmoid approximation of GELU."""
    return x * torch.sigmoid(1.702 * x)


ACTIVATIONS = {
    "relu": F.relu,
    "tanh": torch.tanh,  # BERT's and RoBERTa's sequence-classifier poolers (zoo.nn.heads.ClassifierHead)
    "gelu": F.gelu,  # exact (erf) GELU: BERT, ViT, Whisper
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2, T5 v1.1
    "quick_gelu": quick_gelu,  # CLIP
    "silu": F.silu,  # Llama (SwiGLU when gated)
}


def get_activation(name: str):
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}: expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class FeedForward(nn.Module):
    """x -> act(x W_in) W_out, or with ``gated=True``: (act(x W_gate) * x W_in) W_out.

    Gated variants: GEGLU (gelu, T5 v1.1), SwiGLU (silu, Llama).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        activation: str = "gelu",
        gated: bool = False,
        bias: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.act = get_activation(activation)
        self.gate = nn.Linear(d_model, d_ff, bias=bias) if gated else None
        self.fc_in = nn.Linear(d_model, d_ff, bias=bias)
        self.fc_out = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, L, D)."""
        h = self.fc_in(x)
        h = self.act(h) if self.gate is None else self.act(self.gate(x)) * h
        return self.fc_out(self.dropout(h))


def feed_forward(cfg: BlockConfig) -> nn.Module:
    """The Block's feed-forward, chosen by its config: the dense :class:`FeedForward`, or with
    ``cfg.n_experts`` a mixture of that many of them, ``cfg.top_k`` per token (:mod:`zoo.nn.moe`)."""
    def dense() -> FeedForward:
        return FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.gated, cfg.bias_ffn, cfg.ffn_dropout)

    return MoEFeedForward(cfg.d_model, cfg.n_experts, cfg.top_k, cfg.norm_topk, dense) if cfg.n_experts else dense()
