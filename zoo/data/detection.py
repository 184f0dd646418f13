"""Detection batches: images and, per image, its objects' classes and boxes (what DETR's set loss
and YOLOS read)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class DetectionBatch(NamedTuple):
    """``images`` (B, C, H, W) float; ``targets``: one dict per image, ``class_labels`` (M,) int64 and
    ``boxes`` (M, 4) float as (cx, cy, w, h) fractions of the image (M may be 0)."""

    images: Tensor
    targets: list[dict[str, Tensor]]


def collate(items: list[tuple[Tensor, dict[str, Tensor]]]) -> DetectionBatch:
    """(image (C, H, W), target) items -> one :class:`DetectionBatch` (images stacked, targets kept apart)."""
    return DetectionBatch(torch.stack([image for image, _ in items]), [target for _, target in items])
