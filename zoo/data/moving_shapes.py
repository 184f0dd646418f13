"""moving_shapes: a built-in video classification set (no download).

A clip is ``frames`` frames of ``image_size`` px: one white shape (circle, square, triangle)
moving in a straight line at a steady speed (left, right, up or down), and with probability
``distractor`` a second shape in colour moving its own way. The class is (shape, direction) of
the white shape: one frame tells its shape, only the order of the frames tells its direction.

Without the frame order (``test/acc_shuffled_frames``) a clip still shows the shape and the
axis of motion (the set of positions lies along a row or a column), but not its sign: a clip
moving right and its time-reversed twin moving left hold the same frames, and the start
positions are drawn so that both are equally likely. So an order-blind model can reach
2 / len(directions) (50% with four directions: shape and axis known, sign a coin toss), and
knowing the shape alone gives 1 / len(directions) (25%).

Every clip is a pure function of (split, seed, index): the splits draw from disjoint seed
streams and nothing is stored.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import VideoClips
from zoo.data.videos import normalise

SHAPES = ("circle", "square", "triangle")
DIRECTIONS = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}  # (dx, dy), y grows downwards
DISTRACTOR_COLOURS = ((230, 50, 50), (50, 200, 70), (70, 100, 250), (230, 210, 50), (60, 210, 220), (210, 70, 210))
SPLIT_ID = {"train": 0, "val": 1, "test": 2}
MEAN, STD = [0.5] * 3, [0.5] * 3  # pixels in [0, 1] -> [-1, 1]


def shape_mask(shape: str, cx: np.ndarray, cy: np.ndarray, r: float, size: int) -> np.ndarray:
    """(T, size, size) bool: ``shape`` of radius ``r`` centred at (cx[t], cy[t]) in each frame t."""
    grid = np.arange(size) + 0.5  # pixel centres
    dx = grid[None, None, :] - cx[:, None, None]
    dy = grid[None, :, None] - cy[:, None, None]
    if shape == "circle":
        return dx**2 + dy**2 <= r**2
    if shape == "square":  # side 1.7 r: about the circle's area
        return np.maximum(np.abs(dx), np.abs(dy)) <= 0.85 * r
    if shape == "triangle":  # apex up, base 2 r wide
        return (np.abs(dy) <= r) & (np.abs(dx) <= (dy + r) / 2)
    raise ValueError(f"unknown shape {shape!r}: expected one of {SHAPES}")


def trajectory(rng: np.random.Generator, direction: str, frames: int, size: int, r: float,
               speed: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """(cx, cy), each (frames,): a straight path at a steady speed that stays in the frame.
    The start is uniform over the starts that fit, so a path and its reverse are equally likely."""
    dx, dy = DIRECTIONS[direction]
    fastest = min(speed[1], (size - 2 * r) / max(frames - 1, 1))  # the longest path that fits
    travel = rng.uniform(min(speed[0], fastest), fastest) * (frames - 1)
    along = rng.uniform(r + travel * (dx + dy < 0), size - r - travel * (dx + dy > 0))
    across = rng.uniform(r, size - r)
    steps = (dx + dy) * travel / max(frames - 1, 1) * np.arange(frames)
    path = along + steps
    return (path, np.full(frames, across)) if dx else (np.full(frames, across), path)


def make_clip(rng: np.random.Generator, label: int, frames: int, size: int, shapes: list[str], directions: list[str],
              distractor: float, radius: tuple[float, float], speed: tuple[float, float]) -> Tensor:
    """The clip of class ``label`` (shape ``label // len(directions)``, direction ``label % len(directions)``):
    (frames, 3, size, size) uint8."""
    clip = np.zeros((frames, size, size, 3), dtype=np.uint8)
    if rng.random() < distractor:  # drawn first: the labelled shape stays on top
        r = rng.uniform(*radius)
        cx, cy = trajectory(rng, rng.choice(list(DIRECTIONS)), frames, size, r, speed)
        clip[shape_mask(rng.choice(shapes), cx, cy, r, size)] = DISTRACTOR_COLOURS[rng.integers(len(DISTRACTOR_COLOURS))]
    r = rng.uniform(*radius)
    cx, cy = trajectory(rng, directions[label % len(directions)], frames, size, r, speed)
    clip[shape_mask(shapes[label // len(directions)], cx, cy, r, size)] = 255
    return torch.from_numpy(clip).permute(0, 3, 1, 2).contiguous()


class MovingShapesClips(Dataset):
    """A lazily generated split: clip i is a pure function of (split, seed, i), its class drawn
    uniformly."""

    def __init__(self, split: str, length: int, seed: int, **clip_options):
        self.split, self.length, self.seed, self.options = split, length, seed, clip_options
        self.num_classes = len(clip_options["shapes"]) * len(clip_options["directions"])

    def __len__(self) -> int:
        return self.length

    def clip(self, index: int) -> tuple[Tensor, int]:
        """(clip (T, 3, H, W) uint8, label) of example ``index``."""
        rng = np.random.default_rng([self.seed, SPLIT_ID[self.split], index])
        label = int(rng.integers(self.num_classes))
        return make_clip(rng, label, **self.options), label

    def __getitem__(self, index: int) -> VideoClips:
        """-> VideoClips(clip (T, 3, H, W) normalised float, label () int64)."""
        clip, label = self.clip(index)
        return VideoClips(normalise(clip, MEAN, STD), torch.tensor(label))


class MovingShapes(ZooDataModule):
    """Moving shapes as :class:`VideoClips` batches: clips (B, T, 3, H, W) float in [-1, 1], labels (B,).

    Args:
        frames, image_size: the clips' length and side in pixels.
        shapes, directions: the labelled shape's kinds and motions; the classes are their
            product, named ``<shape>-<direction>``.
        distractor: probability that a clip also holds a coloured shape moving its own way.
        radius, speed: ranges of the shapes' radius (px) and speed (px per frame).
        train_size, val_size, test_size: clips per split.
    """

    yields = (VideoClips,)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, frames: int = 8, image_size: int = 32,
                 shapes: list[str] = SHAPES, directions: list[str] = tuple(DIRECTIONS), distractor: float = 0.5,
                 radius: tuple[float, float] = (3.5, 5.5), speed: tuple[float, float] = (1.0, 2.5),
                 train_size: int = 50_000, val_size: int = 1000, test_size: int = 2000, seed: int = 1337,
                 num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers)
        shapes, directions = list(shapes), list(directions)
        for kind, names, known in (("shapes", shapes, SHAPES), ("directions", directions, DIRECTIONS)):
            if not names or set(names) - set(known) or len(set(names)) != len(names):
                raise ValueError(f"data.{kind}={names}: expected distinct names from {list(known)}")
        if not 0 < radius[0] <= radius[1] or 2 * radius[1] >= image_size:
            raise ValueError(f"data.radius={list(radius)}: expected 0 < low <= high < image_size / 2 = {image_size / 2}")
        if not 0 <= speed[0] <= speed[1]:
            raise ValueError(f"data.speed={list(speed)}: expected 0 <= low <= high (px per frame)")
        self.seed, self.sizes = seed, {"train": train_size, "val": val_size, "test": test_size}
        self.order_seed = seed
        self.options = {"frames": frames, "size": image_size, "shapes": shapes, "directions": directions,
                        "distractor": distractor, "radius": tuple(radius), "speed": tuple(speed)}
        self.dims = {"num_classes": len(shapes) * len(directions), "num_frames": frames, "image_size": image_size,
                     "channels": 3, "class_names": [f"{s}-{d}" for s in shapes for d in directions],
                     "pixel_mean": MEAN, "pixel_std": STD}

    def dataset(self, name: str) -> MovingShapesClips:
        return MovingShapesClips(name, self.sizes[name], self.seed, **self.options)
