"""Exact match and F1 of extractive answers, as the official SQuAD v1.1 evaluation script
(``evaluate-v1.1.py``) computes them, and the span decoding of Hugging Face's ``run_qa.py``
(``postprocess_qa_predictions``): the best valid span of an example over all its windows.

The script's definitions: an answer is normalised (lower-cased, punctuation removed, the articles
``a`` / ``an`` / ``the`` removed, whitespace collapsed); exact match is the equality of the
normalised texts, F1 the harmonic mean of the precision and recall of their shared words (a
multiset); each prediction scores the best over its example's gold answers; the totals are
percentages (100 * mean)."""

from __future__ import annotations

import re
import string
from collections import Counter

import torch
from torch import Tensor

PUNCTUATION = frozenset(string.punctuation)
ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the script's ``normalize_answer``)."""
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1(prediction: str, truth: str) -> float:
    """The F1 of the normalised words: 0 when they share none (an empty answer included)."""
    predicted, true = normalize_answer(prediction).split(), normalize_answer(truth).split()
    same = sum((Counter(predicted) & Counter(true)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(true)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: list[str], answers: list[list[str]]) -> dict[str, float]:
    """``{"em": ..., "f1": ...}`` in percent over the examples, each prediction scored against the
    best of its gold answers (the script's ``metric_max_over_ground_truths``)."""
    if not predictions:
        return {"em": 0.0, "f1": 0.0}
    em = sum(max(exact_match(p, t) for t in truths) for p, truths in zip(predictions, answers))
    f = sum(max(f1(p, t) for t in truths) for p, truths in zip(predictions, answers))
    return {"em": 100.0 * em / len(predictions), "f1": 100.0 * f / len(predictions)}


def best_spans(start: Tensor, end: Tensor, offsets: Tensor, n_best: int,
               max_length: int) -> tuple[Tensor, Tensor, Tensor]:
    """Each window's best answer span, as ``run_qa.py`` picks it: of the ``n_best`` highest start
    logits and the ``n_best`` highest end logits (over every position), the pair with the largest
    sum whose both ends are context tokens (``offsets`` not -1), the end not before the start and
    at most ``max_length`` tokens long. start, end (B, L); offsets (B, L, 2). Returns (score (B,),
    -inf where no pair is valid; the span's first and last character (B,), the last exclusive)."""
    k = min(n_best, start.shape[1])
    top_start, first = start.topk(k, dim=1)  # (B, k) each
    top_end, last = end.topk(k, dim=1)
    context = offsets[..., 0] >= 0  # (B, L)
    valid = (context.gather(1, first)[:, :, None] & context.gather(1, last)[:, None, :]
             & (last[:, None, :] >= first[:, :, None]) & (last[:, None, :] - first[:, :, None] < max_length))
    score = (top_start[:, :, None] + top_end[:, None, :]).masked_fill(~valid, float("-inf")).flatten(1)
    best = score.argmax(1)
    rows = torch.arange(start.shape[0], device=start.device)
    s, e = first[rows, best // k], last[rows, best % k]
    return score[rows, best], offsets[rows, s, 0], offsets[rows, e, 1]
