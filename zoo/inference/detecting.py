"""Detecting objects in one image with a detector checkpoint (YOLOS): what ``zoo detect`` and the
detection attention maps run.

The checkpoint holds what is needed to read an image file as the training images were read: the
network's image size, the data's pixel mean and std and its class names. An image of any size is
letterboxed into the network's square as ``data=coco`` does (the longer side scaled to it, black
padding at the bottom and the right; a square image is only resized), and the boxes are mapped back
to the pixels of the image given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from torch import Tensor, nn

from zoo.data.coco import letterbox
from zoo.data.images import MEAN, STD, to_tensor
from zoo.nn.detection import Detections
from zoo.objectives.detection import Detection, predictions
from zoo.objectives.loading import load


@dataclass(frozen=True)
class DetectedObject:
    """One detected object: its class (index, and name when the data had names), the class's
    probability, and its box (x0, y0, x1, y1) in pixels of the image given."""

    label: int
    name: str | None
    score: float
    box: tuple[float, float, float, float]

    def as_json(self) -> dict:
        """What ``zoo detect`` prints for it: the name (else the index) as ``label``, the score to 4
        places, the box to 2 (hundredths of a pixel)."""
        return {"label": self.name if self.name is not None else self.label, "class": self.label,
                "score": round(self.score, 4), "box": [round(v, 2) for v in self.box]}


def check_threshold(threshold: float) -> float:
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold={threshold}: a detection's score is a probability, give 0 <= threshold <= 1")
    return float(threshold)


class Detector:
    """A detection objective's network and how its training images were read."""

    def __init__(self, objective: Detection):
        hparams = objective.hparams
        self.net: nn.Module = objective.net
        self.image_size: int = self.net.embedder.image_size
        self.mean, self.std = hparams.pixel_mean or MEAN, hparams.pixel_std or STD
        self.class_names: list[str] | None = hparams.class_names

    @classmethod
    def from_checkpoint(cls, ckpt: str | Path, device: str = "cpu") -> Detector:
        """The detector in ``ckpt``; a checkpoint of another objective is refused, naming it."""
        return cls(load(ckpt, device, accepts=("detection",), command="zoo detect (model=yolos)"))

    def inputs(self, image: Image.Image) -> tuple[Tensor, float]:
        """The network's input for ``image``: pixels (1, 3, S, S) letterboxed and normalised, and the
        scale from the image's pixels to the square's."""
        square, scale = letterbox(image, self.image_size)
        device = next(self.net.parameters()).device
        return to_tensor(square, self.image_size, mean=self.mean, std=self.std)[None].to(device), scale

    @torch.no_grad()
    def forward(self, pixels: Tensor) -> Detections:
        """pixels (1, 3, S, S) -> the network's logits (1, Q, classes + 1) and boxes (1, Q, 4)."""
        return self.net(pixels)

    def detections(self, out: Detections, scale: float, width: int, height: int,
                   threshold: float = 0.0) -> list[DetectedObject]:
        """Every detection token of ``out`` (one image) whose best real class scores at least
        ``threshold``, best first, its box mapped back to an image of ``width`` x ``height``
        pixels (and clipped to it)."""
        (scored,) = predictions(out, self.image_size)
        bounds = torch.tensor([width, height, width, height], dtype=torch.float32)
        boxes = (scored["boxes"].cpu() / scale).clamp(min=torch.zeros(4), max=bounds)
        found = []
        for score, label, box in zip(scored["scores"].tolist(), scored["labels"].tolist(), boxes.tolist()):
            if score >= threshold:
                name = self.class_names[label] if self.class_names else None
                found.append(DetectedObject(label, name, score, tuple(box)))
        return sorted(found, key=lambda d: -d.score)

    def __call__(self, image: Image.Image, threshold: float = 0.5) -> list[DetectedObject]:
        """The objects in ``image`` scoring at least ``threshold``, best first."""
        pixels, scale = self.inputs(image)
        return self.detections(self.forward(pixels), scale, image.width, image.height, threshold)
