"""Contrastive image-text training of a two-tower model (``zoo.models.two_tower``): in a batch of
(image, caption) pairs, each image's own caption against every other caption of the batch.

``softmax`` (CLIP, Radford et al. 2021): the symmetric cross-entropy of the (B x B) logits, each
image choosing its caption among the batch's and each caption its image. ``sigmoid`` (SigLIP, Zhai
et al. 2023): every (image, caption) pair is a binary question, positive on the diagonal, the loss
summed over the captions and averaged over the images. Both as Hugging Face's ``return_loss=True``
computes them. The scale (and SigLIP's bias) of the logits are the model's, learned.

Metrics: the in-batch retrieval accuracy (each image's best caption is its own), and on the test
pass, for data of classes (``class_names``), zero-shot classification: each test image against the
captions of every class (``class_prompts``), encoded once by the text tower.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.data.batches import ImageCaptions
from zoo.data.tokenizers import tokenizer_from_state
from zoo.objectives.base import Objective, plain

LOSSES = ("softmax", "sigmoid")


def softmax_loss(logits_per_image: Tensor) -> Tensor:
    """CLIP's loss: (B, B) logits, pair i's on the diagonal -> the mean of the image-to-text and
    text-to-image cross-entropies."""
    labels = torch.arange(logits_per_image.shape[0], device=logits_per_image.device)
    return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_image.T, labels)) / 2


def sigmoid_loss(logits_per_image: Tensor) -> Tensor:
    """SigLIP's loss: (B, B) logits -> -log sigmoid(+logit) on the diagonal and -log sigmoid(-logit)
    off it, summed over each text's row and averaged over the rows (Hugging Face's, as big_vision's)."""
    signs = 2 * torch.eye(logits_per_image.shape[0], device=logits_per_image.device, dtype=logits_per_image.dtype) - 1
    return -F.logsigmoid(signs * logits_per_image.T).sum(-1).mean()


LOSS = {"softmax": softmax_loss, "sigmoid": sigmoid_loss}


class Contrastive(Objective):
    """Contrastive loss of :class:`ImageCaptions` batches through a two-tower net.

    Args (besides :class:`~zoo.objectives.base.Objective`'s):
        loss: ``softmax`` (CLIP) or ``sigmoid`` (SigLIP).
        class_names: the data's classes (zero-shot classification on the test pass; [] for none).
        class_prompts: each class's caption, as the data writes its captions.
        pixel_mean, pixel_std: the data's normalisation (kept so a checkpoint reads image files alike).
    """

    accepts = (ImageCaptions,)

    def __init__(self, *args, loss: str = "softmax", class_names: list[str] | None = None,
                 class_prompts: list[str] | None = None, pixel_mean: list[float] | None = None,
                 pixel_std: list[float] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}: expected one of {list(LOSSES)}")
        class_names, class_prompts = list(plain(class_names) or []), list(plain(class_prompts) or [])
        if len(class_names) != len(class_prompts):
            raise ValueError(f"{len(class_names)} class_names but {len(class_prompts)} class_prompts: one caption a class")
        self.hparams.update(loss=loss, class_names=class_names, class_prompts=class_prompts,
                            pixel_mean=plain(pixel_mean), pixel_std=plain(pixel_std))
        self.loss_fn = LOSS[loss]
        self._tokenizer = tokenizer_from_state(self.hparams.tokenizer) if self.hparams.tokenizer else None
        self._classes: Tensor | None = None  # the class captions' text vectors, on the test pass

    def full_length(self, tokens: Tensor, padding: Tensor) -> tuple[Tensor, Tensor]:
        """Captions (B, L) and their padding as the text tower reads them. A tower read at its last
        position (SigLIP's ``text_pool=last``) reads every caption right-padded to its context, as
        SigLIP trains and its processor pads (the zero-shot pipeline: to 64): the last position is
        then the same whatever other captions share the batch. Others read them as they are."""
        width = self.net.context - tokens.shape[1]
        if self.net.text_pool != "last" or width <= 0:
            return tokens, padding
        return F.pad(tokens, (0, width), value=self._tokenizer.pad_id), F.pad(padding, (0, width), value=False)

    def logits(self, batch: ImageCaptions) -> Tensor:
        """Logits per image (B, B) of a batch, pair i on the diagonal."""
        tokens, padding = self.full_length(batch.tokens, batch.padding)
        return self.forward_net(tokens, batch.images, padding).float()

    def training_step(self, batch: ImageCaptions, batch_idx: int) -> Tensor:
        self.flops_per_batch = self.net.batch_flops(self.full_length(batch.tokens, batch.padding)[0], batch.images)
        loss = self.loss_fn(self.logits(batch))
        self.log("train/loss", loss, prog_bar=True, sync_dist=True, batch_size=batch.samples)
        return loss

    def _evaluate(self, batch: ImageCaptions, stage: str) -> Tensor:
        """Log the loss and the in-batch retrieval accuracy; return the image vectors (B, P)."""
        tokens, padding = self.full_length(batch.tokens, batch.padding)
        images, texts = self.net.encode_image(batch.images), self.net.encode_text(tokens, padding)
        logits = self.net.similarity(images, texts).float()
        n = batch.samples
        self.log(f"{stage}/loss", self.loss_fn(logits), prog_bar=True, sync_dist=True, batch_size=n)
        found = (logits.argmax(-1) == torch.arange(n, device=logits.device)).float().mean()
        self.log(f"{stage}/retrieval_acc", found, prog_bar=True, sync_dist=True, batch_size=n)
        return images

    def validation_step(self, batch: ImageCaptions, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def class_vectors(self, prompts: list[str]) -> Tensor:
        """The text vectors (C, P) of ``prompts``, each tokenized as the data's captions are (ids, then
        the end-of-text id), right-padded in one batch (:meth:`full_length`)."""
        ids = [self._tokenizer.encode(p) + [self._tokenizer.eos_id] for p in prompts]
        width = max(map(len, ids))
        tokens = torch.tensor([i + [self._tokenizer.pad_id] * (width - len(i)) for i in ids], device=self.device)
        padding = torch.tensor([[True] * len(i) + [False] * (width - len(i)) for i in ids], device=self.device)
        return self.net.encode_text(*self.full_length(tokens, padding))

    def test_step(self, batch: ImageCaptions, batch_idx: int) -> None:
        images = self._evaluate(batch, "test")
        prompts = self.hparams.class_prompts
        known = batch.labels >= 0
        if not prompts or not known.any():
            return
        if self._classes is None:
            self._classes = self.class_vectors(prompts)
        predicted = self.net.similarity(images, self._classes).argmax(-1)
        accuracy = (predicted[known] == batch.labels[known]).float().mean()
        self.log("test/zero_shot_acc", accuracy, prog_bar=True, sync_dist=True, batch_size=int(known.sum()))

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        self._classes = None  # the weights may change before the next test pass
