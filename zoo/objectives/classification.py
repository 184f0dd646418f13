"""Classification (ViT, or any encoder with a classifier head): one label per input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from timm.data import Mixup
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from zoo.data.batches import ImageLabels, VideoClips
from zoo.data.videos import shuffle_frames
from zoo.objectives.base import Objective, plain
from zoo.plots import plot_clips, plot_confusion

# Test views: the test inputs transformed, each scored as ``test/acc_<name>`` (what the model
# does without what the view takes away). Chosen by name, so a checkpoint names no code.
TEST_VIEWS = {"shuffled_frames": shuffle_frames}  # video clips (B, T, ...) with their frames in random order


class Classification(Objective):
    """Cross-entropy of the class logits. Batches are :class:`ImageLabels` (images, labels (B,) int);
    :class:`VideoClassification` reads video clips.

    Args (besides :class:`Objective`'s):
        num_classes: number of classes (the head's width).
        label_smoothing: mass spread uniformly over all classes in the training target.
        mixup: ``timm.data.Mixup`` arguments (e.g. ``{mixup_alpha: 0.8, cutmix_alpha: 1.0}``)
            to blend pairs of training images and their labels; None = off. Validation
            and test always see plain images and hard labels.
        class_names: the classes' names (the confusion matrix's labels, the attention maps' titles).
        pixel_mean, pixel_std: the data's per-channel normalisation, so that a checkpoint can
            read an image file the way it read its training images.
        test_views: names from :data:`TEST_VIEWS`; the test pass also reports the accuracy on
            each view of its inputs as ``test/acc_<name>`` (randomness seeded by the batch index).

    The test pass leaves ``confusion.png`` (the test set's confusion matrix) in the run directory.
    """

    accepts = (ImageLabels,)

    def __init__(self, *args, num_classes: int, label_smoothing: float = 0.0,
                 mixup: dict[str, Any] | None = None, class_names: list[str] | None = None,
                 pixel_mean: list[float] | None = None, pixel_std: list[float] | None = None,
                 test_views: list[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        test_views = list(plain(test_views) or [])
        unknown = sorted(set(test_views) - set(TEST_VIEWS))
        if unknown:
            raise ValueError(f"unknown test_views {unknown}: expected names from {sorted(TEST_VIEWS)}")
        # stored in checkpoints too, so that ``Classification.load_from_checkpoint`` rebuilds this module
        self.hparams.update(num_classes=num_classes, label_smoothing=label_smoothing, mixup=plain(mixup),
                            class_names=plain(class_names), pixel_mean=plain(pixel_mean), pixel_std=plain(pixel_std),
                            test_views=test_views)
        self.num_classes, self.label_smoothing = num_classes, label_smoothing
        # timm's Mixup folds the label smoothing into the soft targets it makes.
        self.mixup = (Mixup(**plain(mixup), label_smoothing=label_smoothing, num_classes=num_classes)
                      if mixup else None)
        self.accuracy = {split: MulticlassAccuracy(num_classes, average="micro") for split in ("train", "val", "test")}
        for split, metric in self.accuracy.items():  # registered so they move with the module
            self.add_module(f"{split}_accuracy", metric)
        self.confusion = MulticlassConfusionMatrix(num_classes)
        self.view_accuracy = nn.ModuleDict({name: MulticlassAccuracy(num_classes, average="micro") for name in test_views})

    def training_step(self, batch: ImageLabels | VideoClips, batch_idx: int) -> Tensor:
        inputs, labels = batch  # images or clips: the network's one input, and the labels
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

    def _evaluate(self, batch: ImageLabels | VideoClips, split: str) -> Tensor:
        """Log loss and accuracy of a batch; return its logits (B, num_classes)."""
        inputs, labels = batch
        logits = self.forward_net(inputs).float()
        self.log(f"{split}/loss", F.cross_entropy(logits, labels), prog_bar=True, sync_dist=True)
        self.accuracy[split](logits, labels)
        self.log(f"{split}/acc", self.accuracy[split], prog_bar=True)
        return logits

    def validation_step(self, batch: ImageLabels | VideoClips, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: ImageLabels | VideoClips, batch_idx: int) -> None:
        inputs, labels = batch
        self.confusion.update(self._evaluate(batch, "test"), labels)
        for name, accuracy in self.view_accuracy.items():
            view = TEST_VIEWS[name](inputs, torch.Generator().manual_seed(batch_idx))
            accuracy(self.forward_net(view).float(), labels)
            self.log(f"test/acc_{name}", accuracy)

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        matrix = self.confusion.compute().cpu()  # summed over processes
        self.confusion.reset()
        if self.trainer.is_global_zero and matrix.sum() > 0:
            names = self.hparams.class_names or [str(i) for i in range(self.num_classes)]
            plot_confusion(matrix, names, Path(self.trainer.default_root_dir) / "confusion.png")


class VideoClassification(Classification):
    """:class:`Classification` of video clips (ViViT, VideoMAE): batches are :class:`VideoClips`.

    The test pass also leaves ``clips.png``: the first :attr:`shown` test clips as strips of
    frames, each titled with its predicted and true class."""

    accepts = (VideoClips,)
    shown = 4

    def test_step(self, batch: VideoClips, batch_idx: int) -> None:
        super().test_step(batch, batch_idx)
        if batch_idx == 0:
            clips, labels = batch.clips[: self.shown], batch.labels[: self.shown]
            self._shown = (clips.cpu(), self.forward_net(clips).argmax(-1).cpu(), labels.cpu())

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        shown, self._shown = getattr(self, "_shown", None), None
        if shown is None or not self.trainer.is_global_zero:
            return
        clips, predicted, labels = shown
        names = self.hparams.class_names or [str(i) for i in range(self.num_classes)]
        mean, std = self.hparams.pixel_mean or [0.0] * 3, self.hparams.pixel_std or [1.0] * 3
        pixels = clips * torch.tensor(std).view(1, 1, -1, 1, 1) + torch.tensor(mean).view(1, 1, -1, 1, 1)
        titles = [f"predicted {names[p]}, true {names[y]}" for p, y in zip(predicted.tolist(), labels.tolist())]
        plot_clips(pixels, titles, Path(self.trainer.default_root_dir) / "clips.png")
