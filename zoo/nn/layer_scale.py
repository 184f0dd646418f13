"""Layer scale (Touvron et al. 2021, CaiT; DINOv2, BEiT): a learned per-channel gain on a
sublayer's output, before the residual add, started small so that each Block begins near the
identity. It composes with the sublayer's output module (its output norm, or ``nn.Identity``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LayerScale(nn.Module):
    """x (..., D) -> inner(x) * gamma, gamma (D,) learned, starting at ``init`` everywhere."""

    def __init__(self, width: int, init: float, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.gamma = nn.Parameter(torch.full((width,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x) * self.gamma


def scaled(module: nn.Module, width: int, init: float | None) -> nn.Module:
    """``module`` itself when ``init`` is None (no layer scale), else a :class:`LayerScale` around it."""
    return module if init is None else LayerScale(width, init, module)
