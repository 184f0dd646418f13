"""shapes_detection: a built-in detection set (no download).

An image is ``image_size`` px of black holding 1 to ``max_objects`` shapes (circle, square,
triangle: the classes), each in a random colour and size, none overlapping another, all wholly
inside the image. Each shape's box is the tight box of its pixels, as (cx, cy, w, h) fractions of
the image. Every image is a pure function of (split, seed, index): the splits draw from disjoint
seed streams and nothing is stored.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import ImageBoxes
from zoo.data.detection import collate
from zoo.data.moving_shapes import SHAPES, SPLIT_ID, shape_mask
from zoo.data.videos import normalise

MEAN, STD = [0.5] * 3, [0.5] * 3  # pixels in [0, 1] -> [-1, 1]
TRIES = 100  # placements tried per shape before the image keeps the shapes it has
# A shape's farthest pixel from its centre, in radii (the triangle's base corners; the square's
# corners are at 1.2): shapes whose centres are farther apart than the sum of these never touch.
REACH = np.sqrt(2)


def tight_box(mask: np.ndarray) -> list[float]:
    """(size, size) bool -> the box of its pixels, (cx, cy, w, h) in fractions of the side."""
    rows, cols = np.nonzero(mask)
    size = mask.shape[0]
    x0, x1, y0, y1 = cols.min(), cols.max() + 1, rows.min(), rows.max() + 1
    return [(x0 + x1) / 2 / size, (y0 + y1) / 2 / size, (x1 - x0) / size, (y1 - y0) / size]


def make_image(rng: np.random.Generator, size: int, shapes: list[str], max_objects: int,
               radius: tuple[float, float]) -> tuple[Tensor, dict[str, Tensor]]:
    """(image (3, size, size) uint8, {"class_labels" (M,), "boxes" (M, 4)}), 1 <= M <= max_objects."""
    image = np.zeros((size, size, 3), dtype=np.uint8)
    placed: list[tuple[float, float, float]] = []  # (cx, cy, r)
    labels, boxes = [], []
    for _ in range(rng.integers(1, max_objects + 1)):
        r = rng.uniform(*radius)
        for _ in range(TRIES):  # a spot inside the image, clear of the shapes already there
            cx, cy = rng.uniform(r + 1, size - r - 1, size=2)
            if all(np.hypot(cx - x, cy - y) > REACH * (r + q) + 1 for x, y, q in placed):
                break
        else:
            continue
        label = int(rng.integers(len(shapes)))
        mask = shape_mask(shapes[label], np.array([cx]), np.array([cy]), r, size)[0]
        image[mask] = rng.integers(60, 256, size=3)  # bright enough to stand out from the black
        placed.append((cx, cy, r))
        labels.append(label)
        boxes.append(tight_box(mask))
    target = {"class_labels": torch.tensor(labels, dtype=torch.int64),
              "boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)}
    return torch.from_numpy(image).permute(2, 0, 1).contiguous(), target


class ShapesDetectionImages(Dataset):
    """A lazily generated split: image i is a pure function of (split, seed, i)."""

    def __init__(self, split: str, length: int, seed: int, **image_options):
        self.split, self.length, self.seed, self.options = split, length, seed, image_options

    def __len__(self) -> int:
        return self.length

    def raw(self, index: int) -> tuple[Tensor, dict[str, Tensor]]:
        """(image (3, H, W) uint8, target) of example ``index``."""
        return make_image(np.random.default_rng([self.seed, SPLIT_ID[self.split], index]), **self.options)

    def __getitem__(self, index: int) -> tuple[Tensor, dict[str, Tensor]]:
        """-> (image (3, H, W) normalised float, target)."""
        image, target = self.raw(index)
        return normalise(image, MEAN, STD), target


class ShapesDetection(ZooDataModule):
    """Shapes to detect, as :class:`ImageBoxes` batches.

    Args:
        image_size: the images' side in pixels.
        shapes: the classes (names from ``zoo.data.moving_shapes.SHAPES``).
        max_objects: the most shapes an image holds (at least 1).
        radius: range of the shapes' radius (px).
        train_size, val_size, test_size: images per split.
    """

    yields = (ImageBoxes,)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, image_size: int = 64,
                 shapes: list[str] = SHAPES, max_objects: int = 6, radius: tuple[float, float] = (4.0, 12.0),
                 train_size: int = 50_000, val_size: int = 500, test_size: int = 1000, seed: int = 1337,
                 num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers)
        shapes = list(shapes)
        if not shapes or set(shapes) - set(SHAPES) or len(set(shapes)) != len(shapes):
            raise ValueError(f"data.shapes={shapes}: expected distinct names from {list(SHAPES)}")
        if max_objects < 1:
            raise ValueError(f"data.max_objects={max_objects}: an image holds at least one shape")
        if not 1 <= radius[0] <= radius[1] or 2 * radius[1] + 2 >= image_size:
            raise ValueError(f"data.radius={list(radius)}: expected 1 <= low <= high < (image_size - 2) / 2 "
                             f"= {(image_size - 2) / 2}")
        self.seed, self.sizes = seed, {"train": train_size, "val": val_size, "test": test_size}
        self.order_seed = seed
        self.options = {"size": image_size, "shapes": shapes, "max_objects": max_objects, "radius": tuple(radius)}
        self.dims = {"num_classes": len(shapes), "image_size": image_size, "channels": 3, "class_names": shapes,
                     "max_objects": max_objects, "pixel_mean": MEAN, "pixel_std": STD}

    def dataset(self, name: str) -> ShapesDetectionImages:
        return ShapesDetectionImages(name, self.sizes[name], self.seed, **self.options)

    def collate_fn(self):
        return collate
