"""Sentence embeddings (``task=embed``) as sentence-transformers trains them: an encoder's hidden
states pooled into one vector per text (the mean over the real tokens, or the first token's), trained
on pairs of texts.

``mnrl`` (sentence-transformers' ``MultipleNegativesRankingLoss``, in-batch negatives): each first
text against every second text of the batch, its own the positive: the cross-entropy of the cosine
similarities times ``scale`` (20). ``cosine`` (``CosineSimilarityLoss``): the mean squared error
between the pair's cosine similarity and its score divided by ``max_score`` (STS-B's 0-5 -> [0, 1]).
By default (``loss=null``) a batch with scores trains the cosine loss, one without the ranking loss.

Metric (val / test): the Spearman correlation between the pairs' cosine similarities and their
scores (STS-B's), over the whole split; and the in-batch retrieval accuracy (each first text's most
similar second text is its own).

``model.init_from=`` a sentence-transformers folder starts from its Transformer and takes its
pooling (``1_Pooling/config.json``) and ``Normalize``; a plain Hugging Face encoder folder starts from
its weights, pooled by ``pooling`` (mean by default).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics.regression import SpearmanCorrCoef

from zoo.convert.hub import resolve
from zoo.data.batches import TextPairs
from zoo.models import sentence_transformers
from zoo.models.pooling import Pooling
from zoo.objectives.base import Objective

LOSSES = ("mnrl", "cosine")


def similarities(first: Tensor, second: Tensor) -> Tensor:
    """(B, D), (C, D) -> (B, C): the cosine similarity of every pair of rows (sentence-transformers' ``cos_sim``)."""
    return F.normalize(first, dim=-1) @ F.normalize(second, dim=-1).T


def mnrl_loss(first: Tensor, second: Tensor, scale: float = 20.0) -> Tensor:
    """In-batch negatives: row i of ``first`` picks row i of ``second`` among all rows, by the
    cross-entropy of its ``scale``-d cosine similarities (``MultipleNegativesRankingLoss``)."""
    scores = similarities(first, second) * scale
    return F.cross_entropy(scores, torch.arange(scores.shape[0], device=scores.device))


def cosine_loss(first: Tensor, second: Tensor, scores: Tensor) -> Tensor:
    """The mean squared error between each pair's cosine similarity and its score in [0, 1]
    (``CosineSimilarityLoss``)."""
    return F.mse_loss(F.cosine_similarity(first, second, dim=-1), scores.float())


def folder_settings(init_from: str | None) -> tuple[str | None, Pooling | None]:
    """(the folder the converter reads, the pooling it says) of ``model.init_from``: a
    sentence-transformers folder's Transformer folder and its Pooling (and Normalize) modules, read
    as data and checked (:func:`zoo.models.sentence_transformers.read`); else itself and None."""
    folder = resolve(init_from) if init_from else None
    if folder is None or not sentence_transformers.is_sentence_transformer(folder):
        return folder, None
    st = sentence_transformers.read(folder)
    return str(st.model_dir), st.pooling


class Embedding(Objective):
    """Sentence embeddings of :class:`TextPairs` batches through an encoder whose head is
    ``torch.nn.Identity`` (the net gives its hidden states).

    Args (besides :class:`~zoo.objectives.base.Objective`'s):
        pooling: ``mean`` (over the real tokens), ``cls`` (the first token) or ``max``; None: the
            ``init_from`` sentence-transformers folder's, else ``mean``.
        normalize: the vectors scaled to unit length (sentence-transformers' ``Normalize``); None:
            the folder's, else false. The losses and the metric read cosines, which it leaves as they are.
        loss: ``mnrl``, ``cosine``, or None (by the batch: ``cosine`` where it has scores).
        scale: the ranking loss's factor on the cosine similarities (sentence-transformers' 20).
        max_score: the scores are divided by it for the cosine loss (STS-B's 5).
    """

    accepts = (TextPairs,)

    def __init__(self, *args, pooling: str | None = None, normalize: bool | None = None, loss: str | None = None,
                 scale: float = 20.0, max_score: float = 5.0, **kwargs):
        model_dir, theirs = folder_settings(kwargs.get("init_from"))
        if model_dir is not None:
            kwargs["init_from"] = model_dir
        if loss is not None and loss not in LOSSES:
            raise ValueError(f"model.loss={loss}: expected one of {', '.join(LOSSES)}, or null (by the data)")
        super().__init__(*args, **kwargs)
        mode = pooling or (theirs.mode if theirs else "mean")
        normalize = normalize if normalize is not None else bool(theirs and theirs.normalize)
        self.pooling = Pooling(mode, normalize)
        self.hparams.update(pooling=mode, normalize=normalize, loss=loss, scale=scale, max_score=max_score)
        self.loss_name, self.scale, self.max_score = loss, scale, max_score
        self.spearman = {split: SpearmanCorrCoef() for split in ("val", "test")}
        for split, metric in self.spearman.items():
            self.add_module(f"{split}_spearman", metric)

    def embed(self, tokens: Tensor, padding: Tensor) -> Tensor:
        """Texts (B, L) and their padding -> their embeddings (B, D), in float32."""
        return self.pooling(self.forward_net(tokens, key_padding=padding).float(), padding)

    def loss(self, batch: TextPairs, first: Tensor, second: Tensor) -> Tensor:
        """The configured loss, or the one the batch's data asks for (scores: the cosine loss)."""
        name = self.loss_name or ("cosine" if batch.scores is not None else "mnrl")
        if name == "mnrl":
            return mnrl_loss(first, second, self.scale)
        if batch.scores is None:
            raise ValueError("model.loss=cosine needs pairs with scores: name their column with data.label=, "
                             "or train pairs without scores with model.loss=mnrl")
        return cosine_loss(first, second, batch.scores / self.max_score)

    def pair_embeddings(self, batch: TextPairs) -> tuple[Tensor, Tensor]:
        return self.embed(batch.first, batch.first_padding), self.embed(batch.second, batch.second_padding)

    def training_step(self, batch: TextPairs, batch_idx: int) -> Tensor:
        self.flops_per_batch = self.net.batch_flops(batch.first) + self.net.batch_flops(batch.second)
        loss = self.loss(batch, *self.pair_embeddings(batch))
        self.log("train/loss", loss, prog_bar=True, sync_dist=True, batch_size=batch.samples)
        return loss

    def _evaluate(self, batch: TextPairs, split: str) -> None:
        first, second = self.pair_embeddings(batch)
        n = batch.samples
        self.log(f"{split}/loss", self.loss(batch, first, second), prog_bar=True, sync_dist=True, batch_size=n)
        cosines = similarities(first, second)
        found = (cosines.argmax(-1) == torch.arange(n, device=cosines.device)).float().mean()
        self.log(f"{split}/retrieval_acc", found, sync_dist=True, batch_size=n)
        if batch.scores is not None:
            self.spearman[split](cosines.diagonal(), batch.scores.float())
            self.log(f"{split}/spearman", self.spearman[split], prog_bar=True, batch_size=n)

    def validation_step(self, batch: TextPairs, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: TextPairs, batch_idx: int) -> None:
        self._evaluate(batch, "test")
