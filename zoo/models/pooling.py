"""Hidden states -> one vector per input: the pooling of sentence embeddings and image features.

``mean`` averages the real positions (padding left out), ``max`` takes each feature's largest
value over them, ``cls`` the first position's vector; ``normalize`` then scales each vector to
unit L2 norm (sentence-transformers' ``Normalize``). These are the modes
sentence-transformers' ``Pooling`` module computes one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

MODES = ("mean", "max", "cls")


@dataclass(frozen=True)
class Pooling:
    """How hidden states become one vector: ``mode`` (one of :data:`MODES`), then ``normalize``."""

    mode: str
    normalize: bool

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"pooling={self.mode!r}: expected one of {list(MODES)}")

    def __call__(self, states: Tensor, real: Tensor) -> Tensor:
        """states (B, L, D), real (B, L) bool (True at positions to pool) -> (B, D)."""
        if self.mode == "cls":
            pooled = states[:, 0]
        elif self.mode == "mean":
            weights = real[:, :, None].to(states.dtype)
            pooled = (states * weights).sum(1) / weights.sum(1).clamp(min=1)
        else:
            pooled = states.masked_fill(~real[:, :, None], torch.finfo(states.dtype).min).amax(1)
        return F.normalize(pooled, dim=-1) if self.normalize else pooled
