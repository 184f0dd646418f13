"""UCF101 (Soomro et al. 2012): 13,320 clips of 101 human actions, in its official extracted layout.

    ${data_dir}/UCF-101/<Class>/v_<Class>_gXX_cYY.avi          # UCF101.rar, extracted
    ${data_dir}/ucfTrainTestlist/{classInd.txt,trainlist0N.txt,testlist0N.txt}   # the split zip

Splits: official fold ``fold`` (1-3); the training list's ``val_groups`` highest-numbered groups
(gXX: clips of one group come from one long video, so a group never straddles two splits) are held
out for validation. Each clip is decoded with PyAV, ``frames`` frames sampled evenly over it and
centre-cropped and resized to ``image_size``; the result is cached as uint8 under
``${cache_dir}/ucf101`` so the decoding happens once.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import torch
from torch import Tensor

from zoo.data.base import ZooDataModule
from zoo.data.batches import VideoClips
from zoo.data.cache import cached_tensors
from zoo.data.videos import InMemoryClips, decode_video, fit_clip, warn_fitted

VIDEO_URL = "https://www.crcv.ucf.edu/data/UCF101/UCF101.rar"
SPLITS_URL = "https://www.crcv.ucf.edu/data/UCF101/UCF101TrainTestSplits-RecognitionTask.zip"
MEAN = [0.5] * 3  # pixels in [0, 1] -> [-1, 1]
STD = [0.5] * 3
GROUP = re.compile(r"_g(\d+)_c\d+\.avi$")


def read_split_list(path: Path, classes: list[str]) -> list[tuple[str, int]]:
    """(``<Class>/<file>.avi``, label) per line of a train/test list; the label comes from the
    class folder (the test lists give none)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the official split files come from {SPLITS_URL}")
    items = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        name = line.split()[0]
        folder = name.split("/")[0]
        if folder not in classes or not GROUP.search(name):
            raise ValueError(f"{path}:{number}: {name!r} is not <Class>/v_<Class>_gXX_cYY.avi of a class in classInd.txt")
        items.append((name, classes.index(folder)))
    return items


class UCF101(ZooDataModule):
    """UCF101 as :class:`VideoClips` batches: clips (B, T, 3, S, S) float in [-1, 1], labels (B,).

    Args:
        frames, image_size: what each clip becomes (T frames of S x S pixels).
        fold: the official train/test split, 1-3.
        val_groups: groups of the training list held out for validation.
        resize: sample and resize clips of another length or size (with a warning); False
            refuses them, naming the clip and both shapes.
        flip: random horizontal flips in training.
    """

    yields = (VideoClips,)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, frames: int = 8, image_size: int = 32,
                 fold: int = 1, val_groups: int = 2, resize: bool = True, flip: bool = True, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers)
        if fold not in (1, 2, 3):
            raise ValueError(f"data.fold={fold}: UCF101 has the official folds 1, 2 and 3")
        self.frames, self.image_size, self.fold, self.val_groups = frames, image_size, fold, val_groups
        self.resize, self.flip = resize, flip
        self.videos, self.lists = self.data_dir / "UCF-101", self.data_dir / "ucfTrainTestlist"
        self.splits: dict[str, tuple[Tensor, Tensor]] = {}
        self.dims = {"num_frames": frames, "image_size": image_size, "channels": 3, "pixel_mean": MEAN,
                     "pixel_std": STD}

    def _check_layout(self) -> None:
        if not self.videos.is_dir() or not (self.lists / "classInd.txt").is_file():
            raise FileNotFoundError(
                f"UCF101 is not in {self.data_dir}: expected {self.videos}/<Class>/v_<Class>_gXX_cYY.avi and "
                f"{self.lists}/classInd.txt. Download {VIDEO_URL} (a .rar archive: extract it with an unrar tool "
                f"such as unrar, unar or 7z) and {SPLITS_URL}, extract both into {self.data_dir}, and point "
                f"ZOO_DATA_DIR / paths.data_dir at it")

    def prepare_data(self) -> None:
        self._check_layout()  # no download: the archive is a .rar, which Python does not extract

    def classes(self) -> list[str]:
        """The class names in classInd.txt's order (``<index> <Class>`` per line, from 1)."""
        path = self.lists / "classInd.txt"
        rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
        if any(len(row) != 2 or row[0] != str(i) for i, row in enumerate(rows, 1)):
            raise ValueError(f"{path} is not '<index> <Class>' lines numbered from 1")
        return [name for _, name in rows]

    def _decode(self, items: list[tuple[str, int]], split: str) -> tuple[Tensor, Tensor]:
        """(clips (N, T, 3, S, S) uint8, labels (N,)), decoded once and cached."""
        files = [self.videos / name for name, _ in items]
        for file in files:
            if not file.is_file():
                raise FileNotFoundError(f"{file} is listed in {self.lists} but missing")
        stats = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
        key = hashlib.sha256(repr((str(self.videos.resolve()), self.frames, self.image_size, self.resize,
                                   stats)).encode()).hexdigest()[:16]
        cache = self.cache_dir / "ucf101" / f"{split}-{key}.pt"

        def decode() -> dict[str, Tensor]:
            clips, fitted = [], 0
            for file in files:
                clip, changed = fit_clip(decode_video(file), self.frames, self.image_size, self.resize, str(file))
                clips.append(clip)
                fitted += changed
            warn_fitted(f"{self.videos} ({split})", fitted, len(files), self.frames, self.image_size)
            return {"clips": torch.stack(clips), "labels": torch.tensor([label for _, label in items])}

        data = cached_tensors(cache, decode)  # (checked on each read: zoo.data.cache)
        return data["clips"], data["labels"]

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        self._check_layout()
        classes = self.classes()
        self.dims |= {"num_classes": len(classes), "class_names": classes}
        train = read_split_list(self.lists / f"trainlist0{self.fold}.txt", classes)
        test = read_split_list(self.lists / f"testlist0{self.fold}.txt", classes)
        groups = sorted({int(GROUP.search(name).group(1)) for name, _ in train})
        if not 0 <= self.val_groups < len(groups):
            raise ValueError(f"data.val_groups={self.val_groups}: the training list has {len(groups)} groups")
        held_out = set(groups[len(groups) - self.val_groups:])
        is_val = [int(GROUP.search(name).group(1)) in held_out for name, _ in train]
        val = [item for item, v in zip(train, is_val) if v]
        train = [item for item, v in zip(train, is_val) if not v]
        self.splits = {"train": self._decode(train, "train"), "test": self._decode(test, "test")}
        self.splits["val"] = self._decode(val, "val") if val else self.splits["test"]

    def dataset(self, split: str) -> InMemoryClips:
        clips, labels = self.splits[split]
        return InMemoryClips(clips, labels, MEAN, STD, flip=self.flip and split == "train")
