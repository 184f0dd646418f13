"""CIFAR-10: 50,000 training and 10,000 test images, 32x32 RGB, 10 classes.

Two layouts under ``${data_dir}``, the first found is used:

- ``cifar10/{train,test}/<class>/*.{png,jpg}``: an ImageFolder copy (the offline staging);
- ``cifar-10-batches-py/``: torchvision's layout, downloaded from the official URL when missing.

Images are decoded once and kept in memory as uint8 (an ImageFolder copy's decoded
tensors are cached under ``${cache_dir}/cifar10`` so the 60,000 decodes happen once,
not once per run; zoo.data.cache checks the file on each read); augmentation runs on the
fly on whole batches.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
import torchvision
from torch import Tensor

from zoo.data.base import ZooDataModule
from zoo.data.cache import cached_tensors
from zoo.data.batches import ImageLabels
from zoo.data.images import InMemoryImages, collate_batch, decode_image_folder

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
MEAN = (0.4914, 0.4822, 0.4465)  # per-channel statistics of the training images
STD = (0.2470, 0.2435, 0.2616)


def _folder_fingerprint(root: Path) -> str:
    """A hash of every file's relative path, size and modification time under ``root``: a changed
    copy (a file replaced, even by one of the same size) gets a new cache. (Reading the bytes of
    60,000 files to hash them would cost much of what the cache saves.)"""
    digest = hashlib.sha256(str(root.resolve()).encode())
    for directory, subdirs, files in sorted(os.walk(root)):
        subdirs.sort()
        for name in sorted(files):
            path = Path(directory, name)
            stat = path.stat()
            digest.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


class CIFAR10(ZooDataModule):
    """CIFAR-10 as :class:`ImageLabels` batches: images (B, 3, 32, 32) normalised float, labels (B,).

    Splits: ``val_size`` images held out of the official training set (a seeded
    permutation; 0 = none, validation then reports the test set), train = the rest,
    test = the official test set.

    Args:
        val_size: training images held out for validation.
        crop_padding: training crops are taken from the image padded by this many pixels (0 = no crop).
        flip: random horizontal flips in training.
        randaugment: timm RandAugment config string (e.g. ``"rand-m9-n2-mstd0.5"``), None = off.
        download: fetch the official archive when no copy is found.
    """

    yields = (ImageLabels,)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, val_size: int = 5000, seed: int = 1337,
                 crop_padding: int = 4, flip: bool = True, randaugment: str | None = None,
                 download: bool = True, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers)
        self.val_size, self.seed, self.download = val_size, seed, download
        self.augmentation = {"crop_padding": crop_padding, "flip": flip, "randaugment": randaugment}
        self.folder = self.data_dir / "cifar10"
        self.splits: dict[str, tuple[Tensor, Tensor]] = {}
        self.dims = {"num_classes": len(CLASSES), "image_size": 32, "channels": 3, "class_names": list(CLASSES),
                     "pixel_mean": list(MEAN), "pixel_std": list(STD)}

    def _has_folder_copy(self) -> bool:
        return (self.folder / "train").is_dir() and (self.folder / "test").is_dir()

    def prepare_data(self) -> None:
        if self._has_folder_copy() or not self.download:
            return
        try:
            torchvision.datasets.CIFAR10(str(self.data_dir), train=True, download=True)
        except Exception as err:
            raise RuntimeError(
                f"could not download CIFAR-10 from {torchvision.datasets.CIFAR10.url} ({err}). Without a network, "
                f"extract cifar-10-python.tar.gz into {self.data_dir} (giving {self.data_dir / 'cifar-10-batches-py'}) "
                f"or put an ImageFolder copy at {self.folder}/{{train,test}}/<class>/*.png, and point "
                f"ZOO_DATA_DIR / paths.data_dir at it"
            ) from err

    def _load_folder_copy(self, split: str) -> tuple[Tensor, Tensor]:
        root = self.folder / split
        cache = self.cache_dir / "cifar10" / f"{split}-{_folder_fingerprint(root)}.pt"

        def decode() -> dict[str, Tensor]:
            images, labels, _ = decode_image_folder(root, CLASSES)
            return {"images": images, "labels": labels}

        data = cached_tensors(cache, decode)
        return data["images"], data["labels"]

    def _load_torchvision(self, split: str) -> tuple[Tensor, Tensor]:
        try:
            data = torchvision.datasets.CIFAR10(str(self.data_dir), train=split == "train", download=False)
        except RuntimeError as err:
            raise FileNotFoundError(
                f"CIFAR-10 is not in {self.data_dir} (neither {self.folder}/{{train,test}}/<class>/ nor "
                f"{self.data_dir / 'cifar-10-batches-py'}): run prepare_data() or put it there ({err})"
            ) from err
        images = torch.from_numpy(data.data).permute(0, 3, 1, 2).contiguous()  # (N, H, W, C) -> (N, C, H, W)
        return images, torch.tensor(data.targets, dtype=torch.int64)

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        load = self._load_folder_copy if self._has_folder_copy() else self._load_torchvision
        (train_x, train_y), test = load("train"), load("test")
        order = torch.randperm(len(train_y), generator=torch.Generator().manual_seed(self.seed))
        val, train = order[: self.val_size], order[self.val_size:]
        self.splits = {"train": (train_x[train], train_y[train]), "test": test,
                       "val": (train_x[val], train_y[val]) if self.val_size else test}
        image_shape = tuple(train_x.shape[1:])
        if image_shape != (3, 32, 32):
            raise ValueError(f"CIFAR-10 images in {self.data_dir} are {image_shape} (C, H, W), expected (3, 32, 32)")

    def dataset(self, split: str) -> InMemoryImages:
        images, labels = self.splits[split]
        if split == "train":
            return InMemoryImages(images, labels, MEAN, STD, augment=True, **self.augmentation)
        return InMemoryImages(images, labels, MEAN, STD)

    def collate_fn(self):
        return collate_batch
