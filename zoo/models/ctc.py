"""CTC (Graves et al. 2006) for the speech encoders (wav2vec 2.0, HuBERT): the loss as Hugging
Face's ``ForCTCLoss`` computes it, and greedy decoding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def ctc_loss(logits: Tensor, padding: Tensor, labels: Tensor, blank: int, reduction: str = "mean",
             zero_infinity: bool = False, ignore: int = -100) -> Tensor:
    """logits (B, L, V), padding (B, L) True at real positions, labels (B, S) ids (``ignore`` or the
    blank at padding) -> the CTC loss: log-softmax in float32, ``reduction`` ``mean`` (each
    utterance's loss over its target length, then the batch mean) or ``sum`` (Hugging Face's
    ``ctc_loss_reduction``)."""
    real = (labels != ignore) & (labels != blank)
    log_probs = F.log_softmax(logits, dim=-1, dtype=torch.float32).transpose(0, 1)
    return F.ctc_loss(log_probs, labels.masked_select(real), padding.sum(-1), real.sum(-1), blank=blank,
                      reduction=reduction, zero_infinity=zero_infinity)


def greedy(logits: Tensor, padding: Tensor | None, blank: int) -> list[list[int]]:
    """logits (B, L, V) -> each utterance's ids: the best id per real position, repeats collapsed,
    blanks dropped."""
    best = logits.argmax(-1)
    out = []
    for i, row in enumerate(best):
        row = row if padding is None else row[padding[i]]
        kept = torch.unique_consecutive(row)
        out.append([int(t) for t in kept if t != blank])
    return out
