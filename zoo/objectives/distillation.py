"""DeiT's hard-label distillation (Touvron et al. 2021, section 5.2): the student's class head
learns the labels, its distillation head the teacher's predicted class; the loss is the mean of
the two cross-entropies."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.data.batches import ImageLabels
from zoo.objectives.classification import Classification
from zoo.objectives.loading import load


class Distillation(Classification):
    """:class:`Classification` of a net with a :class:`~zoo.nn.heads.DistilledHead` (DeiT).

    Args (besides :class:`Classification`'s):
        teacher: a zoo classification checkpoint (a ``.ckpt`` of ``model=vit`` or any classifier)
            read on the images the student reads; its argmax is the distillation head's target.
            None: no teacher, the distillation head learns the labels too. Read when fitting
            starts, never stored in this checkpoint (evaluating or exporting the student needs no
            teacher).

    Evaluation scores the averaged heads (what the net returns), as DeiT's inference does.
    """

    accepts = (ImageLabels,)

    def __init__(self, *args, teacher: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.hparams.update(teacher=teacher)
        self.teacher_path = teacher
        self._teacher: list[torch.nn.Module] = []  # a list: the teacher is not a submodule, nor in the state dict

    def on_fit_start(self) -> None:
        if self.teacher_path is None:
            return
        teacher = load(self.teacher_path, self.device, ("classification",), "model.teacher")
        mine, theirs = self.hparams, teacher.hparams
        sizes = (mine.net["embedder"].get("image_size"), (theirs.net.get("embedder") or {}).get("image_size"))
        for key, (ours, its) in {"num_classes": (mine.get("num_classes"), theirs.get("num_classes")),
                                 "pixel_mean": (mine.get("pixel_mean"), theirs.get("pixel_mean")),
                                 "pixel_std": (mine.get("pixel_std"), theirs.get("pixel_std")), "image_size": sizes}.items():
            if ours != its:
                raise ValueError(f"model.teacher={self.teacher_path} has {key}={its}, the student {ours}: "
                                 f"train the teacher on the student's data")
        teacher.requires_grad_(False)
        self._teacher = [teacher.net.eval()]

    def training_step(self, batch: ImageLabels, batch_idx: int) -> Tensor:
        images, labels = batch
        self.flops_per_batch = self.net.batch_flops(images)
        targets = labels
        if self.mixup is not None:
            if images.shape[0] % 2:
                raise ValueError(f"mixup needs an even batch per process, got {images.shape[0]}")
            images, targets = self.mixup(images, labels)
        cls, dist = (t.float() for t in self.net.head.pair(self.net.hidden(images)))
        if self._teacher:
            with torch.no_grad():
                taught = self._teacher[0](images).argmax(-1)
        else:
            taught = targets
        smoothing = 0.0 if self.mixup is not None else self.label_smoothing  # mixup's targets hold it
        loss = (F.cross_entropy(cls, targets, label_smoothing=smoothing) + F.cross_entropy(dist, taught)) / 2
        if self.mixup is None:
            self.accuracy["train"]((cls + dist) / 2, labels)
            self.log("train/acc", self.accuracy["train"], on_step=True, on_epoch=False)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return loss
