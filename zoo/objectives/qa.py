"""Extractive question answering (``task=qa``): an encoder reads ``[CLS] question [SEP] context [SEP]``
windows and scores each position as the answer's start and end (:class:`zoo.nn.heads.SpanHead`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.data.batches import QuestionSpans
from zoo.objectives.base import Objective
from zoo.objectives.classification import reads_segments
from zoo.objectives.squad_metric import best_spans, squad_scores


class QuestionAnswering(Objective):
    """The mean of the start and the end positions' cross-entropies (Hugging Face's
    ``*ForQuestionAnswering`` loss) over :class:`QuestionSpans` windows; a window without the
    answer points both at its ``[CLS]``.

    Validation and test answer each question with the best span over all its windows (``run_qa.py``'s
    decoding: :func:`zoo.objectives.squad_metric.best_spans`) and report ``em`` and ``f1`` as the
    official SQuAD v1.1 script computes them (percentages), besides the loss.

    Args (besides :class:`Objective`'s):
        n_best: the highest start and end logits of a window whose pairs are considered.
        max_answer_length: the longest answer, in tokens.
    """

    accepts = (QuestionSpans,)

    def __init__(self, *args, n_best: int = 20, max_answer_length: int = 30, **kwargs):
        super().__init__(*args, **kwargs)
        self.hparams.update(n_best=n_best, max_answer_length=max_answer_length)
        self.n_best, self.max_answer_length = n_best, max_answer_length
        self.reads_segments = reads_segments(self.net)
        self.answers: dict[int, tuple[float, str, list[str]]] = {}  # example -> (score, its best span, its golds)

    def logits(self, batch: QuestionSpans) -> tuple[Tensor, Tensor]:
        """The start and end logits (B, L) each, in float32."""
        segments = batch.segments if self.reads_segments else None
        out = self.forward_net(batch.tokens, key_padding=batch.padding, segments=segments).float()
        return out[..., 0], out[..., 1]

    @staticmethod
    def loss(start: Tensor, end: Tensor, batch: QuestionSpans) -> Tensor:
        return (F.cross_entropy(start, batch.starts) + F.cross_entropy(end, batch.ends)) / 2

    def training_step(self, batch: QuestionSpans, batch_idx: int) -> Tensor:
        self.flops_per_batch = self.net.batch_flops(batch.tokens)
        loss = self.loss(*self.logits(batch), batch)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def keep_best(self, start: Tensor, end: Tensor, batch: QuestionSpans) -> None:
        """Keep each example's best span so far (its windows may be in several batches)."""
        scores, first, last = best_spans(start, end, batch.offsets, self.n_best, self.max_answer_length)
        for row, (example, score) in enumerate(zip(batch.example.tolist(), scores.tolist())):
            text = batch.contexts[row][int(first[row]): int(last[row])] if score > float("-inf") else ""
            if example not in self.answers or score > self.answers[example][0]:
                self.answers[example] = (score, text, batch.answers[row])

    def _evaluate(self, batch: QuestionSpans, split: str) -> None:
        start, end = self.logits(batch)
        self.log(f"{split}/loss", self.loss(start, end, batch), prog_bar=True, sync_dist=True,
                 batch_size=batch.samples)
        self.keep_best(start, end, batch)

    def _report(self, split: str) -> None:
        """Log EM and F1 of the kept answers; they are cleared for the next pass."""
        answers, self.answers = self.answers, {}
        if not answers:
            return
        scores = squad_scores([text for _, text, _ in answers.values()], [golds for *_, golds in answers.values()])
        for name, value in scores.items():
            self.log(f"{split}/{name}", value, prog_bar=name == "f1", sync_dist=True)

    def validation_step(self, batch: QuestionSpans, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._report("val")

    def test_step(self, batch: QuestionSpans, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_test_epoch_end(self) -> None:
        self._report("test")
        super().on_test_epoch_end()

    @torch.no_grad()
    def answer(self, batch: QuestionSpans) -> list[str]:
        """The answer to each example of ``batch`` (all its windows in it), in the order of their indices."""
        self.answers = {}
        self.keep_best(*self.logits(batch), batch)
        answers, self.answers = self.answers, {}
        return [answers[i][1] for i in sorted(answers)]
