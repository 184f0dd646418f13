"""COCO 2017 object detection in its official layout, through torchvision's ``CocoDetection``::

    ${data_dir}/coco/train2017/*.jpg
    ${data_dir}/coco/val2017/*.jpg
    ${data_dir}/coco/annotations/instances_{train,val}2017.json

Missing pieces are downloaded from cocodataset.org (``zoo.data.download``: timeouts, retries, and,
offline, an error naming the URL and the folder to fill). The test split is val2017 (COCO's
test-dev labels are not public: DETR and YOLOS report on val2017); the validation during training
reads the first ``val_size`` images of it.

Each image is letterboxed into an ``image_size`` square (the longer side scaled to it, the rest
padded black, at the bottom and the right), and its boxes follow: (cx, cy, w, h) as fractions of
the square, crowd annotations and empty boxes left out. The 80 categories (sparse ids 1..90) become
classes 0..79 in id order. An annotation file is data: it is read as JSON, and one that is not
COCO's format fails naming the file and what is missing.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset, Subset

from zoo.data.base import ZooDataModule
from zoo.data.batches import ImageBoxes
from zoo.data.detection import collate
from zoo.data.download import ensure_file
from zoo.data.images import to_tensor

URL = "http://images.cocodataset.org"
ZIPS = {"train2017": f"{URL}/zips/train2017.zip", "val2017": f"{URL}/zips/val2017.zip",
        "annotations": f"{URL}/annotations/annotations_trainval2017.zip"}
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]  # ImageNet statistics, as DETR and YOLOS use


def read_categories(path: Path) -> list[dict]:
    """The ``categories`` of a COCO annotation file, in id order; a file that is not COCO's
    instances format fails naming it and the missing key."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not a readable JSON annotation file: {err}") from err
    for key in ("images", "annotations", "categories"):
        if not isinstance(data, dict) or not isinstance(data.get(key), list):
            raise ValueError(f"{path} is not a COCO instances file: it has no list under {key!r}")
    return sorted(data["categories"], key=lambda c: c["id"])


def letterbox(image: Image.Image, size: int) -> tuple[Image.Image, float]:
    """``image`` scaled so its longer side is ``size`` and padded to a square (black, bottom
    right); returns it and the scale."""
    scale = size / max(image.size)
    resized = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                           Image.BICUBIC)
    square = Image.new("RGB", (size, size))
    square.paste(resized, (0, 0))
    return square, scale


class CocoImages(Dataset):
    """One COCO split as (image (3, S, S) normalised, {"class_labels" (M,), "boxes" (M, 4)})."""

    def __init__(self, images: Path, annotations: Path, image_size: int, class_of: dict[int, int]):
        from torchvision.datasets import CocoDetection

        self.coco = CocoDetection(str(images), str(annotations))
        self.annotations, self.image_size, self.class_of = annotations, image_size, class_of

    def __len__(self) -> int:
        return len(self.coco)

    def __getitem__(self, index: int) -> tuple[Tensor, dict[str, Tensor]]:
        image, objects = self.coco[index]
        square, scale = letterbox(image.convert("RGB"), self.image_size)
        labels, boxes = [], []
        for obj in objects:
            x, y, w, h = (float(v) * scale / self.image_size for v in obj["bbox"])
            if obj.get("iscrowd", 0) or w <= 0 or h <= 0:
                continue
            if obj["category_id"] not in self.class_of:
                raise ValueError(f"{self.annotations}: an annotation of image {obj['image_id']} has category_id "
                                 f"{obj['category_id']}, which is not among its categories")
            labels.append(self.class_of[obj["category_id"]])
            boxes.append([x + w / 2, y + h / 2, w, h])
        target = {"class_labels": torch.tensor(labels, dtype=torch.int64),
                  "boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)}
        return to_tensor(square, self.image_size, mean=MEAN, std=STD), target


class Coco(ZooDataModule):
    """COCO 2017 detection as :class:`zoo.data.batches.ImageBoxes` batches.

    Args:
        image_size: the side of the letterboxed square images (the ViT's image size).
        val_size: how many val2017 images the validation during training reads.
        max_objects: the most objects a target may hold (YOLOS's detection tokens must be at least this).
    """

    yields = (ImageBoxes,)
    drop_last = True

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, image_size: int = 512, val_size: int = 500,
                 max_objects: int = 100, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers)
        self.root = Path(data_dir) / "coco"
        self.image_size, self.val_size, self.max_objects = image_size, val_size, max_objects

    def _annotations(self, split: str) -> Path:
        return self.root / "annotations" / f"instances_{split}.json"

    def prepare_data(self) -> None:
        """Download and unpack what is missing of the layout."""
        for name, url in ZIPS.items():
            wanted = self._annotations("train2017") if name == "annotations" else self.root / name
            if wanted.exists():
                continue
            archive = ensure_file(self.root / Path(url).name, url)
            with zipfile.ZipFile(archive) as z:
                z.extractall(self.root)

    def setup(self, stage: str | None = None) -> None:
        for split in ("train2017", "val2017"):
            for path in (self.root / split, self._annotations(split)):
                if not path.exists():
                    raise FileNotFoundError(f"{path} is missing: COCO's layout under {self.root} is train2017/, "
                                            f"val2017/ and annotations/ (from {', '.join(ZIPS.values())})")
        categories = read_categories(self._annotations("val2017"))
        if read_categories(self._annotations("train2017")) != categories:
            raise ValueError(f"{self._annotations('train2017')} and {self._annotations('val2017')} list different "
                             f"categories")
        self.class_of = {c["id"]: i for i, c in enumerate(categories)}
        self.dims = {"num_classes": len(categories), "image_size": self.image_size, "channels": 3,
                     "class_names": [c["name"] for c in categories], "max_objects": self.max_objects,
                     "pixel_mean": MEAN, "pixel_std": STD}

    def dataset(self, name: str) -> Dataset:
        folder = "train2017" if name == "train" else "val2017"
        images = CocoImages(self.root / folder, self._annotations(folder), self.image_size, self.class_of)
        return Subset(images, range(min(self.val_size, len(images)))) if name == "val" else images

    def collate_fn(self):
        return collate
