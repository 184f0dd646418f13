"""data=coco on a few images and annotation files the test writes in COCO's layout: classes from
the sparse category ids, letterboxed images with their boxes, crowd and empty boxes left out, and
the errors for a missing layout and for annotation files that are not COCO's."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

pytest.importorskip("pycocotools", reason="data=coco needs the detection extra (pycocotools)")

from zoo.data.coco import Coco  # noqa: E402

CATEGORIES = [{"id": 7, "name": "zebra"}, {"id": 1, "name": "person"}, {"id": 3, "name": "car"}]


def write_split(root, split: str, sizes: list[tuple[int, int]], objects: list[list[dict]]) -> None:
    (root / split).mkdir(parents=True)
    images = []
    for i, (w, h) in enumerate(sizes):
        Image.new("RGB", (w, h), (200, 10, 10)).save(root / split / f"{i:012d}.jpg")
        images.append({"id": i, "file_name": f"{i:012d}.jpg", "width": w, "height": h})
    annotations = [dict(obj, id=100 * i + j, image_id=i, area=1.0, iscrowd=obj.get("iscrowd", 0))
                   for i, objs in enumerate(objects) for j, obj in enumerate(objs)]
    (root / "annotations").mkdir(exist_ok=True)
    (root / "annotations" / f"instances_{split}.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": CATEGORIES}))


def write_layout(data_dir, copies: int = 1) -> None:
    """Two images per split (``copies`` times) under data_dir/coco, in COCO's layout."""
    objects = [[{"bbox": [10, 20, 40, 20], "category_id": 3}, {"bbox": [0, 0, 5, 5], "category_id": 1, "iscrowd": 1}],
               [{"bbox": [50, 0, 50, 100], "category_id": 7}, {"bbox": [5, 5, 0, 10], "category_id": 1}]]
    for split in ("train2017", "val2017"):
        write_split(data_dir / "coco", split, [(200, 100), (100, 100)] * copies, objects * copies)


@pytest.fixture
def coco_dir(tmp_path):
    write_layout(tmp_path)
    return tmp_path


def data(path, **kw) -> Coco:
    module = Coco(str(path), str(path / "cache"), batch_size=2, image_size=64, num_workers=0, **kw)
    module.setup("fit")
    return module


def test_classes_images_and_boxes(coco_dir):
    module = data(coco_dir)
    assert module.dims["class_names"] == ["person", "car", "zebra"] and module.dims["num_classes"] == 3
    images, targets = next(iter(module.test_dataloader()))
    assert images.shape == (2, 3, 64, 64)
    # image 0 is 200 x 100, scaled by 64/200 into the top half of the square; the crowd box is left out
    assert targets[0]["class_labels"].tolist() == [1]
    assert torch.allclose(targets[0]["boxes"], torch.tensor([[30 / 200, 30 / 200, 40 / 200, 20 / 200]]))
    padding, picture = images[0, 0, 33:, :], images[0, 0, :31, :]  # red channel: rows 32.. are padding
    assert padding.std() < 1e-6 and picture.mean() > padding.mean() + 2
    # image 1 fills the square; its empty box is left out
    assert targets[1]["class_labels"].tolist() == [2]
    assert torch.allclose(targets[1]["boxes"], torch.tensor([[0.75, 0.5, 0.5, 1.0]]))
    assert len(module.dataset("val")) == 2 and len(data(coco_dir, val_size=1).dataset("val")) == 1


def test_a_missing_layout_names_the_folder_and_the_urls(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"coco/train2017 is missing: .*images.cocodataset.org/zips"):
        data(tmp_path)


def test_annotation_files_that_are_not_cocos_are_refused_naming_them(coco_dir):
    bad = coco_dir / "coco" / "annotations" / "instances_val2017.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="instances_val2017.json is not a readable JSON annotation file"):
        data(coco_dir)
    bad.write_text(json.dumps({"images": [], "annotations": []}))
    with pytest.raises(ValueError, match="instances_val2017.json is not a COCO instances file: .*'categories'"):
        data(coco_dir)
