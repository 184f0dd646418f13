"""data=images: your own labelled images (an ImageFolder tree, or a `datasets` imagefolder / parquet
source) of any size and mode, read as RGB, resized and centre-cropped, the classes read from the
folders and handed to the head; refusals that name the file; and (slow) ViT training on such a
tree as a user runs it, its checkpoint's head sized from the data and `zoo export` writing the
class names as id2label."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import ROOT, run_train
from zoo.data.image_folder import ImageFolderData, LabelledImages

# One mode and format per image, in turn: every mode a user's photos come in.
MODES = [("RGB", "png"), ("L", "jpg"), ("RGBA", "png"), ("P", "png"), ("CMYK", "jpg"), ("I;16", "png"), ("LA", "png"),
         ("RGB", "jpeg")]
CLASSES = ("cat", "dog", "ship")


def image_bytes(k: int, mode: str, fmt: str, size: tuple[int, int] = (64, 48)) -> bytes:
    """A random ``size`` (W, H) image in ``mode``, encoded as ``fmt``."""
    rng = np.random.default_rng(k)
    if mode == "I;16":
        image = Image.fromarray(rng.integers(0, 65536, size[::-1], dtype=np.uint16))
    else:
        image = Image.fromarray(rng.integers(0, 256, (*size[::-1], 3), dtype=np.uint8)).convert(mode)
    out = io.BytesIO()
    image.save(out, format="JPEG" if fmt in ("jpg", "jpeg") else "PNG")
    return out.getvalue()


def write_tree(root: Path, per_class: int = 8, splits: dict[str, tuple[str, ...]] | None = None) -> Path:
    """``root/<split>/<class>/NN.<ext>``: ``per_class`` 48 x 64 images of mixed modes per class."""
    for split, classes in (splits or {"train": CLASSES}).items():
        for c, name in enumerate(classes):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                mode, ext = MODES[(c + i) % len(MODES)]
                (folder / f"{i:02d}.{ext}").write_bytes(image_bytes(100 * c + i, mode, ext))
    return root


def module(source: Path | str, **kwargs) -> ImageFolderData:
    data = ImageFolderData("unused", str(Path(source).parent / "cache"), kwargs.pop("batch_size", 4),
                           source=str(source), image_size=kwargs.pop("image_size", 32), **kwargs)
    data.setup()
    return data


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


# --- an ImageFolder tree ------------------------------------------------------------------------

def test_a_tree_gives_its_sorted_classes_to_the_head_and_holds_out_val_and_test_per_class(tmp_path):
    root = write_tree(tmp_path / "photos", per_class=10, splits={"train": ("ship", "cat", "dog")})
    before = snapshot(root)
    data = module(root)
    assert data.dims["num_classes"] == 3 and data.dims["class_names"] == ["cat", "dog", "ship"]
    assert data.dims["image_size"] == 32 and data.dims["channels"] == 3
    splits = {s: data.splits[s] for s in ("train", "val", "test")}
    for split in ("val", "test"):  # one of each class's 10 (round(10 * 0.1)), per class
        assert sorted(splits[split].labels.tolist()) == [0, 1, 2]
    assert sorted(splits["train"].labels.tolist()) == sorted([0, 1, 2] * 8)
    every = [str(r) for s in splits.values() for r in s.records]
    assert sorted(every) == sorted(str(root / k) for k in before)  # every image once, in one split
    for split in splits.values():  # each image labelled by its own folder
        assert [data.dims["class_names"][y] for y in split.labels] == [Path(r).parent.name for r in split.records]
    again = module(root)  # the draw is seeded
    assert [str(r) for r in again.splits["val"].records] == [str(r) for r in splits["val"].records]
    batch = next(iter(data.train_dataloader()))
    assert batch.images.shape == (4, 3, 32, 32) and batch.images.dtype == torch.float32 and batch.labels.shape == (4,)
    assert snapshot(root) == before and not (root.parent / "cache").exists()  # nothing written, nothing moved


def test_val_and_test_folders_are_used_as_they_are(tmp_path):
    root = write_tree(tmp_path / "photos", per_class=4, splits={"train": CLASSES, "val": CLASSES, "test": ("dog",)})
    data = module(root)
    assert len(data.splits["train"]) == 12 and len(data.splits["val"]) == 12
    assert data.splits["test"].labels.tolist() == [1] * 4  # a split may hold some classes, by name


def test_every_mode_is_read_as_rgb_resized_on_its_shorter_side_and_centre_cropped(tmp_path):
    # left quarter red, middle half green, right quarter blue: a centre crop of the 2:1 image is all green
    pixels = np.zeros((40, 80, 3), dtype=np.uint8)
    pixels[:, :20, 0], pixels[:, 20:60, 1], pixels[:, 60:, 2] = 255, 255, 255
    path = tmp_path / "wide.png"
    Image.fromarray(pixels).save(path)
    (out,), _ = zip(LabelledImages([path], torch.tensor([0]), 16, mean=[0, 0, 0], std=[1, 1, 1])[0])
    assert out.shape == (3, 16, 16)
    assert out[1, :, 1:-1].min() > 0.95 and out[0].max() < 0.1 and out[2].max() < 0.1  # (bicubic's edge)
    white = tmp_path / "white16.png"  # 16-bit greyscale: full scale is white, not clipped
    Image.fromarray(np.full((48, 64), 65535, dtype=np.uint16)).save(white)
    records = [white]
    for k, (mode, ext) in enumerate(MODES):
        records.append(tmp_path / f"{k}.{ext}")
        records[-1].write_bytes(image_bytes(k, mode, ext))
    images = LabelledImages(records, torch.zeros(len(records), dtype=torch.long), 24, [0.5] * 3, [0.5] * 3)
    read = [images[i][0] for i in range(len(images))]
    assert all(x.shape == (3, 24, 24) and torch.isfinite(x).all() for x in read)
    assert torch.allclose(read[0], torch.ones(3, 24, 24))


# --- datasets sources ---------------------------------------------------------------------------

def test_a_parquet_file_with_an_image_column_and_a_folder_with_metadata(tmp_path):
    import datasets

    labels = [CLASSES[i % 3] for i in range(12)]
    rows = datasets.Dataset.from_dict({
        "picture": [{"bytes": image_bytes(i, *MODES[i % len(MODES)]), "path": None} for i in range(12)],
        "kind": labels}).cast_column("picture", datasets.Image())
    rows.to_parquet(str(tmp_path / "rows.parquet"))
    data = module(tmp_path / "rows.parquet", image_column="picture", label_column="kind")
    assert data.dims["class_names"] == list(CLASSES) and len(data.splits["val"]) == len(data.splits["test"]) == 3
    assert next(iter(data.train_dataloader())).images.shape == (4, 3, 32, 32)
    with pytest.raises(ValueError, match=r"rows.parquet has no column 'label' \(data.label_column=label\): its "
                                         r"columns are \['picture', 'kind'\]"):
        module(tmp_path / "rows.parquet", image_column="picture")
    saved = rows.train_test_split(test_size=3, seed=0)  # a save_to_disk DatasetDict: its test split is used
    saved.save_to_disk(str(tmp_path / "saved"))
    data = module(tmp_path / "saved", image_column="picture", label_column="kind")
    assert len(data.splits["test"]) == 3 and len(data.splits["train"]) + len(data.splits["val"]) == 9
    cells = list(rows.cast_column("picture", datasets.Image(decode=False))["picture"])
    cells[2] = {"bytes": b"\x89PNG not an image", "path": None}
    broken = datasets.Dataset.from_dict({"picture": cells, "kind": labels}).cast_column("picture", datasets.Image())
    broken.to_parquet(str(tmp_path / "broken.parquet"))
    with pytest.raises(ValueError, match=r"image .*broken.parquet record 3 is corrupt or not an image"):
        module(tmp_path / "broken.parquet", image_column="picture", label_column="kind")

    root = write_tree(tmp_path / "flat", per_class=4)  # datasets' imagefolder: labels from a metadata file
    lines = [f"{p.relative_to(root / 'train')},{'wild' if p.parent.name != 'dog' else 'pet'}"
             for p in sorted((root / "train").rglob("*.*"))]
    (root / "train" / "metadata.csv").write_text("file_name,label\n" + "\n".join(lines) + "\n")
    data = module(root)
    assert data.dims["class_names"] == ["pet", "wild"]
    assert sum(len(s) for s in data.splits.values()) == 12


# --- refusals ------------------------------------------------------------------------------------

@pytest.mark.parametrize("break_it, expected", [
    (lambda root: (root / "train" / "bird").mkdir(), r"class folder .*train/bird holds no image \(\.jpg"),
    (lambda root: (root / "train").rename(root / "training"), r"data.source=.*photos has no train/ folder \(it holds "
                                                               r"\['training/'\]\): expected .*photos/train/<class>/"),
    (lambda root: (root / "train" / "dog" / "03.jpg").write_bytes(b"\xff\xd8 not a jpeg"),
     r"image .*train/dog/03.jpg is corrupt or not an image: .*data.on_bad=skip"),
    (lambda root: write_tree(root, 2, {"val": ("cat", "dgo")}),
     r"the val split has classes \['dgo'\] that train has not \(train's are \['cat', 'dog', 'ship'\]\)"),
])
def test_bad_data_is_refused_in_one_line_naming_the_file(tmp_path, break_it, expected):
    root = write_tree(tmp_path / "photos")
    break_it(root)
    before = snapshot(root)
    with pytest.raises(ValueError, match=expected) as err:
        module(root)
    assert "\n" not in str(err.value)
    assert snapshot(root) == before


def test_an_empty_or_missing_source_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"data.source=.*empty has no train/ folder \(it holds nothing\)"):
        module(tmp_path / "empty")
    with pytest.raises(ValueError, match=r"data.source=.*nowhere: no such file or folder"):
        module(tmp_path / "nowhere")
    (tmp_path / "one.png").write_bytes(image_bytes(0, "RGB", "png"))
    with pytest.raises(ValueError, match=r"data.source=.*one.png: expected a folder of images \(DIR/train/<class>/"):
        module(tmp_path / "one.png")
    (tmp_path / "empty" / "train").mkdir()
    with pytest.raises(ValueError, match=r"empty/train holds no class folder"):
        module(tmp_path / "empty")


def test_on_bad_skip_leaves_corrupt_images_out_and_says_how_many(tmp_path, caplog):
    root = write_tree(tmp_path / "photos")
    bad = [sorted((root / "train" / c).iterdir())[i] for c, i in (("cat", 1), ("ship", 5))]
    for path in bad:
        path.write_bytes(b"\x89PNG\r\n\x1a\n cut short")
    with caplog.at_level(logging.INFO):
        data = module(root, on_bad="skip")
    read = [r for s in data.splits.values() for r in s.records]
    assert len(read) == 22 and not set(bad) & set(read)
    assert re.search(rf"data.on_bad=skip: left out 2 of 24 train images that do not open, first {bad[0]}, {bad[1]}$",
                     caplog.text, re.M)


# --- a run, as a user runs it ---------------------------------------------------------------------

TINY_VIT = ["model=vit", "data=images", "data.image_size=32", "model.net.n_layers=1", "model.net.block.d_model=32",
            "model.net.block.n_heads=2", "data.batch_size=4", "trainer=cpu", "trainer.max_steps=3",
            "trainer.val_check_interval=3", "trainer.limit_val_batches=1", "trainer.log_every_n_steps=1",
            "optim.warmup_steps=1", "test=true"]


@pytest.mark.slow
def test_vit_trains_on_three_classes_and_exports_their_names(tmp_path):
    from transformers import ViTForImageClassification

    from zoo.objectives.loading import load

    root = write_tree(tmp_path / "photos")
    run_train(tmp_path / "run", tmp_path / "data", *TINY_VIT, f"data.source={root}")
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    restored = load(ckpt, accepts=("classification",))
    assert restored.net.head.proj.out_features == 3 and restored.hparams.class_names == list(CLASSES)
    out = subprocess.run([sys.executable, "-m", "zoo", "export", f"ckpt={ckpt}", f"out={tmp_path / 'hf'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "cat", "1": "dog", "2": "ship"}
    model = ViTForImageClassification.from_pretrained(tmp_path / "hf")
    assert model.config.id2label == {0: "cat", 1: "dog", 2: "ship"} and model.classifier.out_features == 3
