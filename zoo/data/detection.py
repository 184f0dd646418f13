"""Detection batches (:class:`zoo.data.batches.ImageBoxes`): images and, per image, its objects'
classes and boxes (what DETR's set loss and YOLOS read)."""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.data.batches import ImageBoxes


def collate(items: list[tuple[Tensor, dict[str, Tensor]]]) -> ImageBoxes:
    """(image (C, H, W), target) items -> one :class:`ImageBoxes` (images stacked, targets kept apart)."""
    return ImageBoxes(torch.stack([image for image, _ in items]), [target for _, target in items])
