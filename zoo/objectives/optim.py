"""The optimizer and learning-rate schedule every objective shares."""

from __future__ import annotations

import math

import torch
from torch import nn


def adamw(model: nn.Module, lr: float, betas, weight_decay: float) -> torch.optim.AdamW:
    """AdamW that decays matrices only: biases, norms and 1-d parameters are left alone."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas))


def warmup_cosine(step: int, warmup_steps: int, decay_steps: int, lr: float, min_lr: float) -> float:
    """Learning-rate multiplier at ``step``: linear warm-up, cosine decay to min_lr, then flat."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr / lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return (min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)) / lr


def warmup_inverse_sqrt(step: int, warmup_steps: int) -> float:
    """"Attention Is All You Need"'s schedule as a multiplier of the peak lr: linear
    warm-up to 1 at ``warmup_steps``, then decay with 1/sqrt(step). The paper's
    lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) is this with a peak lr of
    (d_model * warmup_steps)^-0.5."""
    step = step + 1
    return min(step / warmup_steps, (warmup_steps / step) ** 0.5)
