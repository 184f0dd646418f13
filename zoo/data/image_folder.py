"""``data=images``: your own labelled images, for an image classifier (ViT, DeiT, ...).

``data.source=`` is one of:

- an ImageFolder tree: ``DIR/train/<class>/*.jpg`` and, optionally, ``DIR/val/`` and ``DIR/test/``
  of the same class folders; the classes are train's folder names, sorted (as torchvision's
  ``ImageFolder`` orders them);
- a folder Hugging Face ``datasets`` reads as ``imagefolder`` (one holding a ``metadata.csv`` /
  ``metadata.jsonl``), a ``datasets.save_to_disk`` folder, or a ``.parquet`` file with an image
  column (``data.image_column``) and a label column (``data.label_column``).

A split without a source of its own is held out of the training images, per class, seeded.
Images of any size and mode (L, LA, P, RGBA, CMYK, 16-bit) are read as 8-bit RGB
(:func:`zoo.data.images.to_rgb`), their shorter side resized to ``data.image_size`` and the centre
square cropped, then normalised with ``data.mean`` / ``data.std``. They are decoded lazily, one per
item as the loader asks (a tree of any size is never held in memory); setup only opens every file
once to check it (PIL's ``verify``), so that a corrupt one is refused, naming it, before training
(or left out and counted with ``data.on_bad=skip``). The class names go to the head as
``${dims.num_classes}`` / ``${dims.class_names}``: the checkpoint keeps them, ``zoo export`` writes
them as ``id2label``. Nothing is written next to the images: ``datasets``' Arrow files live under
``paths.cache_dir``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torchvision.transforms.functional as F
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import Dataset
from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import ImageLabels
from zoo.data.images import load_image, to_rgb, to_tensor
from zoo.data.labelled import label_names
from zoo.data.text import ROW_FORMATS, is_saved_dataset, load_rows, locate
from zoo.terminal import on_terminal, progress

SPLITS = ("train", "val", "test")
HF_SPLITS = {"train": ("train",), "val": ("validation", "val", "valid"), "test": ("test",)}  # datasets' names
METADATA = ("metadata.csv", "metadata.jsonl")  # what makes a folder datasets' imagefolder
ON_BAD = ("error", "skip")


@dataclass(frozen=True)
class Encoded:
    """An image's bytes held by a dataset (a parquet cell), and the name it is known by in messages."""

    name: str
    data: bytes


Record = Path | Encoded  # where one image is read from


def read_image(record: Record) -> Image.Image:
    """The image of ``record`` as 8-bit RGB; a corrupt one is refused naming it."""
    if isinstance(record, Path):
        return load_image(record)
    try:
        with Image.open(io.BytesIO(record.data)) as image:
            return to_rgb(image)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as err:
        raise ValueError(f"image {record.name} is corrupt or not an image: {err}") from err


def check_image(record: Record) -> str | None:
    """None where ``record`` opens as an image (PIL's ``verify``: its header and structure, not its
    pixels), else why not, naming it."""
    name = str(record) if isinstance(record, Path) else record.name
    try:
        with Image.open(record if isinstance(record, Path) else io.BytesIO(record.data)) as image:
            image.verify()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        return f"image {name} is corrupt or not an image: {err}"
    return None


def fit(image: Image.Image, size: int) -> Image.Image:
    """The shorter side resized to ``size`` (bicubic, antialiased), then the centre ``size`` square."""
    return F.center_crop(F.resize(image, size, interpolation=F.InterpolationMode.BICUBIC), [size, size])


class LabelledImages(Dataset):
    """Images read one at a time from ``records`` with their ``labels``: (3, size, size) float
    normalised by ``mean`` / ``std``, mirrored left-right half the time when ``flip``."""

    def __init__(self, records: Sequence[Record], labels: Tensor, size: int, mean: Sequence[float],
                 std: Sequence[float], flip: bool = False):
        self.records, self.labels, self.size = records, labels, size
        self.mean, self.std, self.flip = list(mean), list(std), flip

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        pixels = to_tensor(fit(read_image(self.records[i]), self.size), self.size, mean=self.mean, std=self.std)
        if self.flip and torch.rand(()) < 0.5:
            pixels = pixels.flip(-1)
        return pixels, self.labels[i]


def collate(items: list[tuple[Tensor, Tensor]]) -> ImageLabels:
    return ImageLabels(torch.stack([x for x, _ in items]), torch.stack([y for _, y in items]))


class Rows(Sequence):
    """The image column of a ``datasets`` split as records, each row read when asked for (the
    Arrow file is memory-mapped: no image is held in memory)."""

    def __init__(self, rows: Any, column: str, where: str):
        import datasets

        self.rows, self.column, self.where = rows.cast_column(column, datasets.Image(decode=False)), column, where

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Record:  # type: ignore[override]
        cell = self.rows[i][self.column]
        name = f"{self.where} record {i + 1}" + (f" ({cell['path']})" if cell.get("path") else "")
        return Path(cell["path"]) if cell.get("bytes") is None and cell.get("path") else Encoded(name, cell["bytes"] or b"")


# --- reading a source -------------------------------------------------------------------------

Split = tuple[Sequence[Record], list[str]]  # records and their class names


def tree_split(folder: Path) -> Split:
    """``folder/<class>/*`` (image suffixes; hidden folders left out): its records and their classes.
    A class folder with no image is refused, naming it."""
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise ValueError(f"{folder} holds no class folder: expected {folder}/<class>/*.jpg")
    samples = make_dataset(str(folder), {c: i for i, c in enumerate(classes)}, IMG_EXTENSIONS, allow_empty=True)
    counts = torch.bincount(torch.tensor([i for _, i in samples], dtype=torch.long), minlength=len(classes))
    if empty := [classes[i] for i in range(len(classes)) if counts[i] == 0]:
        raise ValueError(f"class folder {folder / empty[0]} holds no image ({', '.join(IMG_EXTENSIONS)}): "
                         f"add images or remove it" + (f" (also empty: {empty[1:5]})" if len(empty) > 1 else ""))
    return [Path(p) for p, _ in samples], [classes[i] for _, i in samples]


def tree_splits(root: Path) -> tuple[dict[str, Split], list[str]]:
    """The splits of an ImageFolder tree (``root/train`` and those of ``root/val``, ``root/test``
    there) and the classes: train's folder names, sorted as torchvision's ``ImageFolder`` sorts them."""
    if not (root / "train").is_dir():
        there = sorted(p.name + "/" * p.is_dir() for p in root.iterdir())[:8]
        raise ValueError(f"data.source={root} has no train/ folder (it holds {there or 'nothing'}): expected "
                         f"{root}/train/<class>/*.jpg, and optionally val/ and test/ of the same classes")
    splits = {split: tree_split(root / split) for split in SPLITS if (root / split).is_dir()}
    return splits, sorted(set(splits["train"][1]))


def dataset_splits(source: Path, image_column: str, label_column: str,
                   cache_dir: Path) -> tuple[dict[str, Split], list[str]]:
    """The splits of a ``datasets`` source (an imagefolder with metadata, a save_to_disk folder, a
    parquet file): each split's image column as records, its label column as class names; and the
    classes: a ``ClassLabel``'s names in its order, else the training labels sorted."""
    import datasets

    if not on_terminal():
        datasets.disable_progress_bars()
    if is_saved_dataset(source) or (source / "dataset_dict.json").is_file():
        loaded = datasets.load_from_disk(str(source))
    elif source.is_dir():
        loaded = datasets.load_dataset("imagefolder", data_dir=str(source), cache_dir=str(cache_dir / "datasets"))
    else:
        loaded = load_rows(source, cache_dir)
    found = loaded if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}
    out = {}
    names: list[str] = []
    for split, aliases in HF_SPLITS.items():
        name = next((n for n in aliases if n in found), None)
        if name is None:
            continue
        rows, where = found[name], f"{source} ({name})" if len(found) > 1 else str(source)
        for key, column in (("image_column", image_column), ("label_column", label_column)):
            if column not in rows.column_names:
                raise ValueError(f"{where} has no column {column!r} (data.{key}={column}): its columns are "
                                 f"{rows.column_names}")
        feature = rows.features[label_column]
        labels = list(rows[label_column])
        classes = [feature.int2str(y) for y in labels] if isinstance(feature, datasets.ClassLabel) else [str(y) for y in labels]
        out[split] = (Rows(rows, image_column, where), classes)
        if split == "train":
            names = feature.names if isinstance(feature, datasets.ClassLabel) else label_names(labels)
    if "train" not in out:
        raise ValueError(f"data.source={source} has no training split (its splits are {sorted(found)})")
    return out, names


def hold_out_per_class(classes: list[str], fractions: dict[str, float], seed: int) -> dict[str, list[int]]:
    """The indices of the training images kept for training and held out for each split of
    ``fractions``: of each class, that fraction of its images (at least one, where the class keeps
    one for training), drawn with ``seed``; all in their original order."""
    generator = torch.Generator().manual_seed(seed)
    out: dict[str, list[int]] = {split: [] for split in ("train", *fractions)}
    for name in sorted(set(classes)):
        members = [i for i, c in enumerate(classes) if c == name]
        order = [members[j] for j in torch.randperm(len(members), generator=generator).tolist()]
        counts = {split: max(1, round(len(members) * f)) for split, f in fractions.items()}
        if len(members) - sum(counts.values()) < 1:
            counts = dict.fromkeys(fractions, 0)  # too few to share: the class only trains
        start = 0
        for split, count in counts.items():
            out[split] += order[start : start + count]
            start += count
        out["train"] += order[start:]
    return {split: sorted(indices) for split, indices in out.items()}


class ImageFolderData(ZooDataModule):
    """Your labelled images as :class:`ImageLabels` batches: images (B, 3, S, S) float, labels (B,).

    Args:
        source: an ImageFolder tree, an imagefolder / save_to_disk folder or a parquet file (module
            docstring); relative: also looked for under ``data_dir``.
        image_size: the side S of the square the images are resized and cropped to.
        image_column / label_column: the columns of a ``datasets`` source.
        val_fraction / test_fraction: of each class's training images, held out for a split the
            source has none of (seeded by ``seed``).
        mean / std: the per-channel normalisation of pixels in [0, 1].
        flip: random left-right mirroring of training images.
        on_bad: ``error`` (a corrupt image is refused, naming it) or ``skip`` (left out and counted).
    """

    yields = (ImageLabels,)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, source: str | None = None,
                 image_size: int = 224, image_column: str = "image", label_column: str = "label",
                 val_fraction: float = 0.1, test_fraction: float = 0.1, seed: int = 1337,
                 mean: Sequence[float] = (0.485, 0.456, 0.406), std: Sequence[float] = (0.229, 0.224, 0.225),
                 flip: bool = True, on_bad: str = "error", num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers)
        if not source:
            raise ValueError("data.source is not set: name a folder of images, e.g. data.source=photos/ holding "
                             "photos/train/<class>/*.jpg")
        if on_bad not in ON_BAD:
            raise ValueError(f"data.on_bad={on_bad}: expected one of {', '.join(ON_BAD)}")
        self.source = Path(locate(str(source), self.data_dir)).expanduser()
        if not self.source.exists():
            raise ValueError(f"data.source={source}: no such file or folder")
        if self.source.is_file() and self.source.suffix.lower() not in ROW_FORMATS:
            raise ValueError(f"data.source={source}: expected a folder of images (DIR/train/<class>/*.jpg) or a "
                             f"rows file ({', '.join(ROW_FORMATS)}) with an image column")
        self.image_size, self.columns = image_size, (image_column, label_column)
        self.fractions = {"val": val_fraction, "test": test_fraction}
        self.seed, self.mean, self.std, self.flip, self.on_bad = seed, list(mean), list(std), flip, on_bad
        self.splits: dict[str, LabelledImages] = {}

    def read(self) -> tuple[dict[str, Split], list[str]]:
        """Every split's records and class names (its own, or held out of the training split), and
        the classes in the head's order."""
        metadata = any((self.source / name).is_file() or (self.source / "train" / name).is_file() for name in METADATA)
        if self.source.is_dir() and not metadata and not is_saved_dataset(self.source) \
                and not (self.source / "dataset_dict.json").is_file():
            splits, names = tree_splits(self.source)
        else:
            splits, names = dataset_splits(self.source, *self.columns, self.cache_dir)
        splits = {split: self.readable(*s, split) for split, s in splits.items()}
        missing = {split: f for split, f in self.fractions.items() if split not in splits}
        if missing:
            records, classes = splits["train"]
            held = hold_out_per_class(classes, missing, self.seed)
            for split, indices in held.items():
                splits[split] = ([records[i] for i in indices], [classes[i] for i in indices])
            if empty := [split for split in missing if not held[split]]:
                raise ValueError(f"data.source={self.source}: too few images per class to hold out {empty} "
                                 f"(data.val_fraction / data.test_fraction): give more images, or val/ and test/ folders")
        return splits, names

    def readable(self, records: Sequence[Record], classes: list[str], split: str) -> Split:
        """``records`` less those that do not open as images: refused (the first named) unless
        ``data.on_bad=skip``, which leaves them out and says how many, naming the first."""
        bad = [i for i, why in enumerate(check_image(r) for r in progress(records, f"checking {split} images",
                                                                           total=len(records), unit="image")) if why]
        if not bad:
            return records, classes
        first = check_image(records[bad[0]])
        if self.on_bad == "error":
            more = f" ({len(bad) - 1} more in {split})" if len(bad) > 1 else ""
            raise ValueError(f"{first}{more}: remove or replace it, or set data.on_bad=skip to leave such files out")
        names = [str(r) if isinstance(r, Path) else r.name for r in (records[i] for i in bad[:3])]
        rank_zero_info(f"data.on_bad=skip: left out {len(bad)} of {len(records)} {split} images that do not "
                       f"open, first {', '.join(names)}")
        keep = sorted(set(range(len(records))) - set(bad))
        return [records[i] for i in keep], [classes[i] for i in keep]

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        splits, names = self.read()
        for split in ("val", "test"):
            if unknown := sorted(set(splits[split][1]) - set(names)):
                raise ValueError(f"data.source={self.source}: the {split} split has classes {unknown[:5]} that "
                                 f"train has not (train's are {names[:10]}): name the class folders alike")
        index = {name: i for i, name in enumerate(names)}
        self.dims = {"num_classes": len(names), "class_names": names, "image_size": self.image_size, "channels": 3,
                     "pixel_mean": self.mean, "pixel_std": self.std}
        for split, (records, classes) in splits.items():
            labels = torch.tensor([index[c] for c in classes], dtype=torch.long)
            self.splits[split] = LabelledImages(records, labels, self.image_size, self.mean, self.std,
                                                flip=self.flip and split == "train")
        if len(self.splits["train"]) < self.batch_size:
            raise ValueError(f"data.source={self.source}: {len(self.splits['train'])} training images, fewer than "
                             f"one batch of data.batch_size={self.batch_size}")

    def dataset(self, split: str) -> Dataset:
        return self.splits[split]

    def collate_fn(self):
        return collate
