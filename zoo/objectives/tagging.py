"""Token classification (``task=tag``): one tag per word (named entities: CoNLL-2003), scored entity
by entity as ``seqeval`` scores them (Hugging Face's ``run_ner.py``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from seqeval.metrics.sequence_labeling import get_entities
from torch import Tensor
from torchmetrics import Metric

from zoo.convert.hub import resolve
from zoo.data.batches import IGNORE, TokenTags
from zoo.objectives.base import Objective, plain
from zoo.objectives.classification import align_labels

SCORES = ("precision", "recall", "f1")  # what val and test report, entity-level, micro-averaged


class EntityScores(Metric):
    """Entity-level micro precision, recall and F1 of tag sequences, as ``seqeval.metrics`` computes
    them (its default mode: entities as :func:`seqeval.metrics.sequence_labeling.get_entities` reads
    them, an ``I-`` after ``O`` starting one): an entity is found when its type, first and last word are
    right. Kept as three sums (entities found, predicted, true) so that processes add them up."""

    full_state_update = False

    def __init__(self, names: list[str]):
        super().__init__()
        self.names = names
        for state in ("found", "predicted", "true"):
            self.add_state(state, default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, predicted: Tensor, labels: Tensor) -> None:
        """predicted, labels (B, L) tag indices; a position labelled -100 is no word (not scored)."""
        for ours, theirs in zip(predicted.tolist(), labels.tolist()):
            words = [i for i, tag in enumerate(theirs) if tag != IGNORE]
            found = set(get_entities([self.names[ours[i]] for i in words]))
            true = set(get_entities([self.names[theirs[i]] for i in words]))
            self.found += len(found & true)
            self.predicted += len(found)
            self.true += len(true)

    def compute(self) -> dict[str, Tensor]:
        """``precision``, ``recall`` and ``f1`` (0 where nothing is predicted or true, as seqeval's)."""
        precision = self.found / self.predicted if self.predicted else torch.tensor(0.0)
        recall = self.found / self.true if self.true else torch.tensor(0.0)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else torch.tensor(0.0)
        return {"precision": precision.float(), "recall": recall.float(), "f1": f1.float()}


class Tagging(Objective):
    """Cross-entropy of every word's tag logits (the head's output on each word's first sub-token;
    positions labelled -100 carry no loss and do not go through the head). Batches are
    :class:`TokenTags`. Metrics (val / test): entity-level ``precision``, ``recall`` and ``f1``
    (:class:`EntityScores`); the tag names are IOB2 (``B-PER``, ``I-PER``, ``O``).

    Args (besides :class:`Objective`'s):
        num_classes: the number of tags (the head's width).
        class_names: the tags' names, in the head's order (the export's ``id2label``).
    """

    accepts = (TokenTags,)

    def __init__(self, *args, num_classes: int, class_names: list[str], **kwargs):
        super().__init__(*args, **kwargs)
        names = list(plain(class_names))
        if kwargs.get("init_from"):
            align_labels(self.net.head, resolve(kwargs["init_from"]), names)
        self.hparams.update(num_classes=num_classes, class_names=names)
        self.scores = {"val": EntityScores(names), "test": EntityScores(names)}
        for split, metric in self.scores.items():
            self.add_module(f"{split}_scores", metric)

    def logits(self, batch: TokenTags) -> Tensor:
        """The tag logits (N, num_classes) of the N labelled positions (row-major), in float32."""
        keep = batch.labels != IGNORE
        return self.forward_net(batch.tokens, key_padding=batch.padding, keep=keep).float()

    def training_step(self, batch: TokenTags, batch_idx: int) -> Tensor:
        self.flops_per_batch = self.net.batch_flops(batch.tokens)
        loss = F.cross_entropy(self.logits(batch), batch.labels[batch.labels != IGNORE])
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def _evaluate(self, batch: TokenTags, split: str) -> None:
        keep = batch.labels != IGNORE
        logits = self.logits(batch)
        self.log(f"{split}/loss", F.cross_entropy(logits, batch.labels[keep]), prog_bar=True, sync_dist=True,
                 batch_size=batch.samples)
        predicted = torch.full_like(batch.labels, IGNORE)
        predicted[keep] = logits.argmax(-1)
        self.scores[split].update(predicted, batch.labels)

    def _log_scores(self, split: str) -> None:
        """Log the split's entity scores over the epoch (summed over processes), then start afresh."""
        for name, value in self.scores[split].compute().items():
            self.log(f"{split}/{name}", value, prog_bar=name == "f1")
        self.scores[split].reset()

    def validation_step(self, batch: TokenTags, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_scores("val")

    def test_step(self, batch: TokenTags, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        self._log_scores("test")
