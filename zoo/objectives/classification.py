"""Classification (ViT, or any encoder with a classifier head): one label per input, an image's or a
text's (a sentence or a pair: ``task=classify``), or one score per text (a regression: STS-B)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from timm.data import Mixup
from torch import Tensor, nn
from torchmetrics.classification import (MulticlassAccuracy, MulticlassConfusionMatrix, MulticlassF1Score,
                                         MulticlassMatthewsCorrCoef, MultilabelExactMatch, MultilabelF1Score)
from torchmetrics.regression import PearsonCorrCoef, SpearmanCorrCoef

from zoo.convert.hub import resolve
from zoo.data.batches import ImageLabels, TextLabels, VideoClips
from zoo.data.videos import shuffle_frames
from zoo.objectives.base import Objective, plain
from zoo.plots import plot_clips, plot_confusion

# Test views: the test inputs transformed, each scored as ``test/acc_<name>`` (what the model
# does without what the view takes away). Chosen by name, so a checkpoint names no code.
TEST_VIEWS = {"shuffled_frames": shuffle_frames}  # video clips (B, T, ...) with their frames in random order


def folder_labels(folder: str) -> list[str] | None:
    """The class names of a Hugging Face folder's ``config.json`` (``id2label``, in id order), if any."""
    config = Path(folder) / "config.json"
    if not config.is_file():
        return None
    id2label = json.loads(config.read_text()).get("id2label") or {}
    return [str(id2label[key]) for key in sorted(id2label, key=int)] or None


@torch.no_grad()
def align_labels(head: nn.Module, folder: str, names: list[str]) -> None:
    """A classifier read from ``folder`` scores its own labels (its ``id2label``): where they are the
    data's ``names`` in another order, its rows are put in the data's order; other names (``LABEL_0``,
    ``NEGATIVE`` for the data's ``0``) keep the folder's order, which a warning names."""
    theirs = folder_labels(folder)
    proj = getattr(head, "proj", None)
    if theirs is None or theirs == names or not isinstance(proj, nn.Linear) or len(theirs) != proj.out_features:
        return
    if sorted(theirs) == sorted(names):
        order = torch.tensor([theirs.index(name) for name in names])
        proj.weight.copy_(proj.weight[order])
        if proj.bias is not None:
            proj.bias.copy_(proj.bias[order])
        rank_zero_info(f"{folder}'s classifier rows reordered from its id2label {theirs} to the data's {names}")
    else:
        warnings.warn(f"{folder}'s id2label names {theirs}, the data {names}: the classifier's outputs are kept "
                      f"in the folder's order (output i is the data's {names[0]!r}, ...)", stacklevel=2)


def reads_segments(net: nn.Module) -> bool:
    """Whether the net's embedder has two or more token types (BERT's), so that segment ids go in."""
    segments = getattr(getattr(net, "embedder", None), "segments", None)
    return segments is not None and segments.num_embeddings > 1


class Classification(Objective):
    """Cross-entropy of the class logits. Batches are :class:`ImageLabels` (images, labels (B,) int),
    or :class:`TextLabels` where the network embeds tokens (an encoder under ``task=classify``: its
    segment ids go in where the embedder has two or more token types); :class:`VideoClassification`
    reads video clips. ``num_classes=1`` is a regression, as Hugging Face's ``num_labels=1``: the
    mean squared error of the one output against float labels. ``multi_label``: each class is a yes or
    no of its own (labels (B, num_classes) of 0 and 1), as Hugging Face's
    ``problem_type="multi_label_classification"``: binary cross-entropy of each logit, a class predicted
    where its sigmoid exceeds 0.5; metrics micro and macro F1 and the exact-match ratio.

    Metrics: accuracy, macro F1 and Matthews' correlation (val / test), or Pearson and Spearman
    correlations for a regression.

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

    @classmethod
    def accepted(cls, model_cfg: Any) -> tuple[type, ...]:
        """Text with labels where the network embeds tokens, else what the class reads (images, clips)."""
        net = model_cfg.get("net") or {}  # a model config, or a checkpoint's hparams
        embedder = net.get("embedder") or {}
        return (TextLabels,) if str(embedder.get("_target_", "")).endswith(".TokenEmbedder") else cls.accepts

    def __init__(self, *args, num_classes: int, label_smoothing: float = 0.0,
                 mixup: dict[str, Any] | None = None, class_names: list[str] | None = None,
                 pixel_mean: list[float] | None = None, pixel_std: list[float] | None = None,
                 test_views: list[str] | None = None, multi_label: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if kwargs.get("init_from") and class_names and num_classes > 1:
            align_labels(self.net.head, resolve(kwargs["init_from"]), list(plain(class_names)))
        test_views = list(plain(test_views) or [])
        unknown = sorted(set(test_views) - set(TEST_VIEWS))
        if unknown:
            raise ValueError(f"unknown test_views {unknown}: expected names from {sorted(TEST_VIEWS)}")
        # stored in checkpoints too, so that ``Classification.load_from_checkpoint`` rebuilds this module
        self.hparams.update(num_classes=num_classes, label_smoothing=label_smoothing, mixup=plain(mixup),
                            class_names=plain(class_names), pixel_mean=plain(pixel_mean), pixel_std=plain(pixel_std),
                            test_views=test_views, multi_label=multi_label)
        self.num_classes, self.label_smoothing = num_classes, label_smoothing
        # timm's Mixup folds the label smoothing into the soft targets it makes.
        self.mixup = (Mixup(**plain(mixup), label_smoothing=label_smoothing, num_classes=num_classes)
                      if mixup else None)
        self.regression, self.multi_label = num_classes == 1, multi_label
        self.reads_segments = reads_segments(self.net)
        # registered so they move with the module; val and test only where they are not a classifier's
        self.scores = {split: self._metrics(split) for split in ("train", "val", "test")}
        for split, metrics in self.scores.items():
            self.add_module(f"{split}_scores", metrics)
        self.accuracy = {split: metrics["acc"] for split, metrics in self.scores.items() if "acc" in metrics}
        self.confusion = None if self.regression or multi_label else MulticlassConfusionMatrix(num_classes)
        self.view_accuracy = nn.ModuleDict({name: MulticlassAccuracy(num_classes, average="micro") for name in test_views})

    def _metrics(self, split: str) -> nn.ModuleDict:
        """A split's metrics: accuracy (and macro F1 and Matthews' correlation, CoLA's metric, past
        training), or a regression's correlations."""
        if self.regression:
            return nn.ModuleDict({} if split == "train" else {"pearson": PearsonCorrCoef(), "spearman": SpearmanCorrCoef()})
        if self.multi_label:
            return nn.ModuleDict({} if split == "train" else {
                "f1_micro": MultilabelF1Score(self.num_classes, average="micro"),
                "f1_macro": MultilabelF1Score(self.num_classes, average="macro"),
                "exact": MultilabelExactMatch(self.num_classes)})
        metrics = {"acc": MulticlassAccuracy(self.num_classes, average="micro")}
        return nn.ModuleDict(metrics | ({} if split == "train" else
                                        {"f1": MulticlassF1Score(self.num_classes, average="macro"),
                                         "mcc": MulticlassMatthewsCorrCoef(self.num_classes)}))

    def logits(self, batch: ImageLabels | VideoClips | TextLabels) -> Tensor:
        """The network's class logits (B, num_classes) for a batch, in float32."""
        if isinstance(batch, TextLabels):
            segments = batch.segments if self.reads_segments else None
            return self.forward_net(batch.tokens, key_padding=batch.padding, segments=segments).float()
        return self.forward_net(batch[0]).float()

    def loss(self, logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
        """Cross-entropy, a multi-label's binary cross-entropy per class, or a regression's mean squared error."""
        if self.multi_label:
            return F.binary_cross_entropy_with_logits(logits, labels.float())
        if self.regression:
            return F.mse_loss(logits.squeeze(-1), labels.float())
        return F.cross_entropy(logits, labels, label_smoothing=label_smoothing)

    def training_step(self, batch: ImageLabels | VideoClips | TextLabels, batch_idx: int) -> Tensor:
        inputs, labels = batch[0], batch[-1]  # images, clips or tokens: the network's input; the labels
        self.flops_per_batch = self.net.batch_flops(inputs)
        if self.mixup is not None:
            if inputs.shape[0] % 2:
                raise ValueError(f"mixup needs an even batch per process, got {inputs.shape[0]}")
            inputs, targets = self.mixup(inputs, labels)  # targets: (B, num_classes) probabilities
            logits = self.forward_net(inputs).float()
            loss = F.cross_entropy(logits, targets)
        else:
            logits = self.logits(batch)
            loss = self.loss(logits, labels, self.label_smoothing)
            if "train" in self.accuracy:
                self.accuracy["train"](logits, labels)  # mixed images have no single right answer
                self.log("train/acc", self.accuracy["train"], on_step=True, on_epoch=False)
        self.log("train/loss", loss, prog_bar=True, sync_dist=True)
        return loss

    def _evaluate(self, batch: ImageLabels | VideoClips | TextLabels, split: str) -> Tensor:
        """Log loss and metrics of a batch; return its logits (B, num_classes)."""
        labels = batch[-1]
        logits = self.logits(batch)
        self.log(f"{split}/loss", self.loss(logits, labels), prog_bar=True, sync_dist=True, batch_size=len(labels))
        for name, metric in self.scores[split].items():
            metric(*self.scored(logits, labels))
            shown = name in ("acc", "spearman", "f1_micro")
            self.log(f"{split}/{name}", metric, prog_bar=shown, batch_size=len(labels))
        return logits

    def scored(self, logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """(predictions, targets) as the metrics read them: a regression's one output and float scores, a
        multi-label's probabilities (torchmetrics predicts above 0.5) and 0/1 targets, else the logits
        and class indices."""
        if self.regression:
            return logits.squeeze(-1), labels.float()
        return (logits.sigmoid(), labels.long()) if self.multi_label else (logits, labels)

    def validation_step(self, batch: ImageLabels | VideoClips, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: ImageLabels | VideoClips | TextLabels, batch_idx: int) -> None:
        inputs, labels = batch[0], batch[-1]
        logits = self._evaluate(batch, "test")
        if self.confusion is not None:
            self.confusion.update(logits, labels)
        for name, accuracy in self.view_accuracy.items():
            view = TEST_VIEWS[name](inputs, torch.Generator().manual_seed(batch_idx))
            accuracy(self.forward_net(view).float(), labels)
            self.log(f"test/acc_{name}", accuracy)

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        if self.confusion is None:
            return
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
