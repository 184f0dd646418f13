"""Which one position of a tower's output stands for the whole input: the pooling rules of
two-tower models, as one index per row, so that only that position goes through the tower's head.
(An index, not a boolean mask: ``x[mask]`` has a shape that depends on the data, which stops
torch.compile's graph; picking one position per row does not.)

``first``: position 0 (a CLS token: CLIP's vision tower). ``last``: the last position, padding or
not (SigLIP's text tower, trained on text padded to its full length). ``eos``: the first position
holding the end-of-text id (CLIP's text tower; a row without one pools position 0, as Hugging
Face's ``argmax`` of an all-False row does). ``argmax``: the position of the largest id (CLIP's
rule for configs whose ``eos_token_id`` is 2, written before the end-of-text id was in the config:
the end-of-text token is the largest id of CLIP's vocabulary).
"""

from __future__ import annotations

import torch
from torch import Tensor

RULES = ("first", "last", "eos", "argmax")


def check_rule(rule: str, eos_id: int | None) -> None:
    """Refuse an unknown rule, and ``eos`` without the id it looks for."""
    if rule not in RULES:
        raise ValueError(f"pool={rule!r}: expected one of {list(RULES)}")
    if rule == "eos" and eos_id is None:
        raise ValueError("pool=eos needs eos_id, the end-of-text id it pools at")


def pooled_index(rule: str, inputs: Tensor, length: int, eos_id: int | None = None) -> Tensor:
    """(B,) long: the one position of each row, of ``length``, that ``rule`` pools. ``inputs``: the
    token ids (B, length) for ``eos`` and ``argmax``; for the others only its batch size is read."""
    if rule in ("first", "last"):
        return torch.full((inputs.shape[0],), 0 if rule == "first" else length - 1, device=inputs.device)
    if rule == "eos":
        return (inputs == eos_id).int().argmax(-1)
    return inputs.int().argmax(-1)


def pick(x: Tensor, index: Tensor) -> Tensor:
    """x (B, L, D), index (B,) -> (B, D): each row's vector at its index."""
    return x[torch.arange(x.shape[0], device=x.device), index]
