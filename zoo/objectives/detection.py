"""Object detection (YOLOS, or any network whose head gives :class:`zoo.nn.detection.Detections`):
DETR's set loss, mean average precision on validation and test."""

from __future__ import annotations

import logging

from torch import Tensor, nn
from torchmetrics.detection import MeanAveragePrecision
from torchvision.ops import box_convert

from zoo.data.batches import ImageBoxes
from zoo.nn.detection import Detections
from zoo.objectives.base import Objective, plain
from zoo.objectives.set_loss import SetLoss

LOSS_PARTS = ("loss", "loss_ce", "loss_bbox", "loss_giou")
# faster-coco-eval prints its whole COCO summary table at INFO on every evaluation; the zoo logs the numbers
logging.getLogger("faster_coco_eval").setLevel(logging.WARNING)


def predictions(out: Detections, image_size: int) -> list[dict[str, Tensor]]:
    """Per image, every detection token as a scored box (what ``MeanAveragePrecision`` reads): its
    most likely real class (never "no object"), that class's probability, the box in pixels (xyxy)."""
    scores, labels = out.logits.float().softmax(-1)[..., :-1].max(-1)
    boxes = box_convert(out.boxes.float(), "cxcywh", "xyxy") * image_size
    return [{"boxes": b, "scores": s, "labels": l} for b, s, l in zip(boxes, scores, labels)]


def in_pixels(targets: list[dict[str, Tensor]], image_size: int) -> list[dict[str, Tensor]]:
    """The targets' boxes as ``MeanAveragePrecision`` reads them: xyxy, in pixels."""
    return [{"boxes": box_convert(t["boxes"], "cxcywh", "xyxy") * image_size, "labels": t["class_labels"]}
            for t in targets]


class Detection(Objective):
    """DETR's set loss (:class:`zoo.objectives.set_loss.SetLoss`) of the detection tokens' classes and
    boxes. Batches are :class:`zoo.data.batches.ImageBoxes`.

    Args (besides :class:`Objective`'s):
        num_classes: object classes (the head adds a "no object" class).
        class_names: the classes' names.
        max_objects: the most objects an image of the data holds (refused at start-up when the network
            has fewer detection tokens; any image over the network's count is refused by the loss).
        pixel_mean, pixel_std: the data's per-channel normalisation, so that a checkpoint can read an
            image file the way it read its training images.
        class_cost, bbox_cost, giou_cost: the Hungarian matching's cost weights.
        bbox_loss_coefficient, giou_loss_coefficient: the box losses' weights in the total.
        eos_coefficient: the no-object class's cross-entropy weight.

    Logs ``<split>/loss`` and its parts; validation and test also ``<split>/map`` and
    ``<split>/map_50`` (COCO mean average precision over IoU 0.5:0.95, and at IoU 0.5).
    """

    accepts = (ImageBoxes,)

    def __init__(self, *args, num_classes: int, class_names: list[str] | None = None, max_objects: int | None = None,
                 pixel_mean: list[float] | None = None, pixel_std: list[float] | None = None,
                 class_cost: float = 1.0, bbox_cost: float = 5.0, giou_cost: float = 2.0,
                 bbox_loss_coefficient: float = 5.0, giou_loss_coefficient: float = 2.0,
                 eos_coefficient: float = 0.1, **kwargs):
        super().__init__(*args, **kwargs)
        n_detections = self.net.embedder.n_detections
        if max_objects is not None and max_objects > n_detections:
            raise ValueError(f"the data's images hold up to {max_objects} objects, more than the model's "
                             f"{n_detections} detection tokens: set model.net.embedder.n_detections >= {max_objects}")
        weights = {"class_cost": class_cost, "bbox_cost": bbox_cost, "giou_cost": giou_cost,
                   "bbox_loss_coefficient": bbox_loss_coefficient, "giou_loss_coefficient": giou_loss_coefficient,
                   "eos_coefficient": eos_coefficient}
        # stored in checkpoints too, so that ``Detection.load_from_checkpoint`` rebuilds this module
        self.hparams.update(num_classes=num_classes, class_names=plain(class_names), max_objects=max_objects,
                            pixel_mean=plain(pixel_mean), pixel_std=plain(pixel_std), **weights)
        self.set_loss = SetLoss(num_classes, **weights)
        self.image_size = self.net.embedder.image_size
        # faster-coco-eval: the maintained COCO evaluator (pycocotools' results, faster), in the detection extra
        self.mean_ap = nn.ModuleDict({split: MeanAveragePrecision(backend="faster_coco_eval") for split in ("val", "test")})

    def _losses(self, batch: ImageBoxes, split: str) -> tuple[Detections, Tensor]:
        """Log the set loss and its parts; return (the network's output, the loss)."""
        out = self.forward_net(batch.images)
        losses = self.set_loss(out.logits.float(), out.boxes.float(), batch.targets)
        for part in LOSS_PARTS:
            self.log(f"{split}/{part}", losses[part], prog_bar=part == "loss", sync_dist=True,
                     batch_size=len(batch.targets))
        return out, losses["loss"]

    def training_step(self, batch: ImageBoxes, batch_idx: int) -> Tensor:
        self.flops_per_batch = self.net.batch_flops(batch.images)
        return self._losses(batch, "train")[1]

    def _evaluate(self, batch: ImageBoxes, split: str) -> None:
        out, _ = self._losses(batch, split)
        self.mean_ap[split].update(predictions(out, self.image_size), in_pixels(batch.targets, self.image_size))

    def _log_mean_ap(self, split: str) -> None:
        result = self.mean_ap[split].compute()  # over every process's images
        self.mean_ap[split].reset()
        self.log(f"{split}/map", result["map"])
        self.log(f"{split}/map_50", result["map_50"])

    def validation_step(self, batch: ImageBoxes, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self._log_mean_ap("val")

    def test_step(self, batch: ImageBoxes, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        self._log_mean_ap("test")
