"""The optimizer and learning-rate schedule every objective shares."""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch
from torch import nn

# What conf/optim/adamw.yaml sets (a test keeps the two in step): schedule and decay_steps
# may be left out (cosine; trainer.max_steps), the others are needed.
SETTINGS = ("schedule", "lr", "min_lr", "betas", "weight_decay", "warmup_steps", "decay_steps")
NEEDED = ("lr", "min_lr", "betas", "weight_decay", "warmup_steps")
SCHEDULES = ("cosine", "inverse_sqrt")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_optim(optim: Mapping[str, Any]) -> None:
    """Fail, naming the key and the value, on a setting conf/optim does not have (a typo
    such as ``+optim.lrr=1`` would otherwise be ignored) or a value the optimizer or the
    schedule cannot use (``optim.lr=0`` would divide by zero in :func:`warmup_cosine`)."""
    unknown = sorted(set(optim) - set(SETTINGS))
    if unknown:
        raise ValueError(f"unknown optim setting(s) {', '.join(f'optim.{k}' for k in unknown)}: "
                         f"the settings are {list(SETTINGS)} (conf/optim/adamw.yaml)")
    missing = [k for k in NEEDED if k not in optim]
    if missing:
        raise ValueError(f"optim lacks {missing} (conf/optim/adamw.yaml sets them)")

    def bad(key: str, expected: str) -> ValueError:
        return ValueError(f"optim.{key}={optim[key]!r}: expected {expected}")

    lr = optim["lr"]
    if "schedule" in optim and optim["schedule"] not in SCHEDULES:
        raise bad("schedule", f"one of {list(SCHEDULES)}")
    if not _number(lr) or lr <= 0:
        raise bad("lr", "a number > 0")
    cosine = optim.get("schedule", "cosine") == "cosine"  # inverse_sqrt has no floor
    if not _number(optim["min_lr"]) or optim["min_lr"] < 0 or (cosine and optim["min_lr"] > lr):
        raise bad("min_lr", f"a number from 0 to optim.lr={lr} (the cosine schedule decays from lr to min_lr)")
    if not _whole(optim["warmup_steps"]) or optim["warmup_steps"] < 0:
        raise bad("warmup_steps", "a whole number >= 0")
    if optim.get("decay_steps") is not None and (not _whole(optim["decay_steps"]) or optim["decay_steps"] < 1):
        raise bad("decay_steps", "null (trainer.max_steps) or a whole number >= 1")
    if not _number(optim["weight_decay"]) or optim["weight_decay"] < 0:
        raise bad("weight_decay", "a number >= 0")
    betas = optim["betas"]
    if not isinstance(betas, (list, tuple)) or len(betas) != 2 or not all(_number(b) and 0 <= b < 1 for b in betas):
        raise bad("betas", "two numbers from 0 to below 1, e.g. [0.9, 0.99]")


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
