"""Which one position of a tower's output stands for the whole input: the pooling rules of
two-tower models, as a (B, L) mask with one True per row (what ``Model.forward(keep=)`` takes,
so that only that position goes through the tower's head).

``first``: position 0 (a CLS token: CLIP's vision tower). ``last``: the last position, padding or
not (SigLIP's text tower, trained on text padded to its full length). ``eos``: the first position
holding the end-of-text id (CLIP's text tower; a row without one pools position 0, as Hugging
Face's ``argmax`` of an all-False row does). ``argmax``: the position of the largest id (CLIP's
rule for configs whose ``eos_token_id`` is 2, written before the end-of-text id was in the config:
the end-of-text token is the largest id of CLIP's vocabulary).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

RULES = ("first", "last", "eos", "argmax")


def check_rule(rule: str, eos_id: int | None) -> None:
    """Refuse an unknown rule, and ``eos`` without the id it looks for."""
    if rule not in RULES:
        raise ValueError(f"pool={rule!r}: expected one of {list(RULES)}")
    if rule == "eos" and eos_id is None:
        raise ValueError("pool=eos needs eos_id, the end-of-text id it pools at")


def pooled_positions(rule: str, inputs: Tensor, length: int, eos_id: int | None = None) -> Tensor:
    """(B, length) bool, True at the one position of each row that ``rule`` pools. ``inputs``: the
    token ids (B, length) for ``eos`` and ``argmax``; for the others only its batch size is read."""
    if rule in ("first", "last"):
        index = torch.full((inputs.shape[0],), 0 if rule == "first" else length - 1, device=inputs.device)
    elif rule == "eos":
        index = (inputs == eos_id).int().argmax(-1)
    else:
        index = inputs.int().argmax(-1)
    return F.one_hot(index.long(), length).bool()
