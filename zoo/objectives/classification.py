"""Classification (ViT, or any encoder with a classifier head): one label per input."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from timm.data import Mixup
from torch import Tensor
from torchmetrics.classification import MulticlassAccuracy

from zoo.objectives.base import Objective, plain


class Classification(Objective):
    """Cross-entropy of the class logits. Batches are (inputs, labels (B,) int).

    Args (besides :class:`Objective`'s):
        num_classes: number of classes (the head's width).
        label_smoothing: mass spread uniformly over all classes in the training target.
        mixup: ``timm.data.Mixup`` arguments (e.g. ``{mixup_alpha: 0.8, cutmix_alpha: 1.0}``)
            to blend pairs of training images and their labels; None = off. Validation
            and test always see plain images and hard labels.
    """

    def __init__(self, *args, num_classes: int, label_smoothing: float = 0.0,
                 mixup: dict[str, Any] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        # stored in checkpoints too, so that ``Classification.load_from_checkpoint`` rebuilds this module
        self.hparams.update(num_classes=num_classes, label_smoothing=label_smoothing, mixup=plain(mixup))
        self.num_classes, self.label_smoothing = num_classes, label_smoothing
        # timm's Mixup folds the label smoothing into the soft targets it makes.
        self.mixup = (Mixup(**plain(mixup), label_smoothing=label_smoothing, num_classes=num_classes)
                      if mixup else None)
        self.accuracy = {split: MulticlassAccuracy(num_classes, average="micro") for split in ("train", "val", "test")}
        for split, metric in self.accuracy.items():  # registered so they move with the module
            self.add_module(f"{split}_accuracy", metric)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, labels = batch
        self.flops_per_batch = self.net.batch_flops(inputs)
        if self.mixup is not None:
            if inputs.shape[0] % 2:
                raise ValueError(f"mixup needs an even batch per process, got {inputs.shape[0]}")
            inputs, targets = self.mixup(inputs, labels)  # targets: (B, num_classes) probabilities
            logits = self.forward_net(inputs).float()
            loss = F.cross_entropy(logits, targets)
        else:
            logits = self.forward_net(inputs).float()
            loss = F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing)
            self.accuracy["train"](logits, labels)  # mixed images have no single right answer
            self.log("train/acc", self.accuracy["train"], on_step=True, on_epoch=False)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def _evaluate(self, batch: tuple[Tensor, Tensor], split: str) -> None:
        inputs, labels = batch
        logits = self.forward_net(inputs).float()
        self.log(f"{split}/loss", F.cross_entropy(logits, labels), prog_bar=True, sync_dist=True)
        self.accuracy[split](logits, labels)
        self.log(f"{split}/acc", self.accuracy[split], prog_bar=True)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")
