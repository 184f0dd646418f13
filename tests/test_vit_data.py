"""CIFAR-10 data module on tiny generated ImageFolder trees, and train.py's ViT pipeline on them."""

import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest
import torch
import torchvision
from omegaconf import open_dict

from zoo.convert.common import compose_config
from zoo.data import cifar10
from zoo.data.cifar10 import CIFAR10, CLASSES
from zoo.data.images import InMemoryImages
from zoo.objectives.loading import load
from zoo.train.run import train


def make_image_folder(root: Path, per_class: dict[str, int], size: int = 32) -> None:
    """``root/cifar10/<split>/<class>/NNNN.png``: random images, like the staged copy's layout."""
    g = torch.Generator().manual_seed(0)
    for split, n in per_class.items():
        for cls in CLASSES:
            folder = root / "cifar10" / split / cls
            folder.mkdir(parents=True)
            for i in range(n):
                image = torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=g)
                torchvision.io.write_png(image, str(folder / f"{i:04d}.png"))


@pytest.fixture
def image_tree(tmp_path: Path) -> Path:
    make_image_folder(tmp_path / "data", {"train": 4, "test": 2})
    return tmp_path


def test_splits_dims_and_batches(image_tree: Path):
    dm = CIFAR10(str(image_tree / "data"), str(image_tree / "cache"), batch_size=4, val_size=8)
    dm.setup("fit")
    assert {k: dm.dims[k] for k in ("num_classes", "image_size", "channels")} == {"num_classes": 10, "image_size": 32, "channels": 3}
    assert dm.dims["class_names"][0] == "airplane" and len(dm.dims["pixel_mean"]) == len(dm.dims["pixel_std"]) == 3
    assert [len(dm.splits[s][1]) for s in ("train", "val", "test")] == [32, 8, 20]
    assert sorted(dm.splits["test"][1].tolist()) == sorted(list(range(10)) * 2)
    images, labels = next(iter(dm.train_dataloader()))
    assert images.shape == (4, 3, 32, 32) and images.dtype == torch.float32 and labels.shape == (4,)


def test_decoded_images_are_cached_and_reused(image_tree: Path, monkeypatch):
    data, cache = str(image_tree / "data"), str(image_tree / "cache")
    first = CIFAR10(data, cache, batch_size=4, val_size=8)
    first.setup("fit")
    assert len(list((image_tree / "cache" / "cifar10").glob("*.pt"))) == 2  # train and test

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again instead of reading the cache")

    monkeypatch.setattr(cifar10, "decode_image_folder", no_decoding)
    second = CIFAR10(data, cache, batch_size=4, val_size=8)
    second.setup("fit")
    assert torch.equal(second.splits["train"][0], first.splits["train"][0])


def test_corrupt_image_names_its_file(image_tree: Path):
    bad = image_tree / "data" / "cifar10" / "train" / "cat" / "0002.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    dm = CIFAR10(str(image_tree / "data"), str(image_tree / "cache"), batch_size=4, val_size=8)
    with pytest.raises(RuntimeError, match=f"cannot decode image {bad}"):
        dm.setup("fit")


def test_missing_data_offline_names_url_and_folder(tmp_path: Path, monkeypatch):
    def offline(*args, download=False, **kwargs):
        raise urllib.error.URLError("no network") if download else RuntimeError("Dataset not found")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", offline)
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "url", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                        raising=False)
    dm = CIFAR10(str(tmp_path / "data"), str(tmp_path / "cache"), batch_size=4)
    with pytest.raises(RuntimeError, match="cifar-10-python.tar.gz") as err:
        dm.prepare_data()
    assert str(tmp_path / "data") in str(err.value)
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "data")):
        dm.setup("fit")


def test_crop_and_flip_move_pixels_without_changing_them():
    images = torch.randint(1, 256, (64, 3, 8, 8), dtype=torch.uint8)
    plain = InMemoryImages(images, torch.zeros(64), mean=(0, 0, 0), std=(1 / 255,) * 3)
    assert torch.equal(plain.__getitems__(list(range(64)))[0], images.float())
    augmented = InMemoryImages(images, torch.zeros(64), (0, 0, 0), (1 / 255,) * 3, augment=True, crop_padding=2, flip=True)
    out = augmented.__getitems__(list(range(64)))[0].to(torch.uint8)
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    for image, source in zip(out, padded):  # every output is a window of the padded image, maybe mirrored
        windows = source.unfold(1, 8, 1).unfold(2, 8, 1).permute(1, 2, 0, 3, 4).flatten(0, 1)  # (25, C, 8, 8)
        assert any(torch.equal(image, w) or torch.equal(image, w.flip(-1)) for w in windows)
    assert not torch.equal(out, images)


def _config(root: Path, overrides: list[str]):
    cfg = compose_config([
        "model=vit", "data=cifar10", "trainer=cpu", "trainer.max_steps=3", "trainer.val_check_interval=2",
        "trainer.limit_val_batches=1", "+trainer.limit_test_batches=1", "trainer.log_every_n_steps=1",
        "callbacks.progress_bar.refresh_rate=0",
        "model.net.n_layers=1", "model.net.block.d_model=32", "model.net.block.n_heads=2", "data.batch_size=8",
        "data.val_size=8", f"paths.data_dir={root / 'data'}", f"paths.cache_dir={root / 'cache'}", *overrides,
    ])
    with open_dict(cfg):
        cfg.paths.output_dir = str(root / "out")
    return cfg


@pytest.mark.parametrize("extra", [[], ["model.mixup={mixup_alpha: 0.8, cutmix_alpha: 1.0}", "model.label_smoothing=0.1"]])
def test_train_vit_on_cifar10_a_few_steps(image_tree: Path, extra):
    metrics = train(_config(image_tree, extra))
    assert {"train/loss", "val/acc", "test/acc", "test/loss"} <= set(metrics)
    assert 0.0 <= metrics["test/acc"] <= 1.0
    restored = load(image_tree / "out" / "checkpoints" / "last.ckpt", accepts=("classification",))
    assert restored.hparams.num_classes == 10 and restored.hparams.label_smoothing == (0.1 if extra else 0.0)
    assert restored.hparams.class_names[:2] == ["airplane", "automobile"]
    assert (image_tree / "out" / "confusion.png").stat().st_size > 0  # the test pass leaves its confusion matrix
    if not extra:
        from zoo.cli.commands import call

        image = next((image_tree / "data" / "cifar10" / "test").rglob("*.png"))
        call("attention-maps", [f"ckpt={image_tree / 'out' / 'checkpoints' / 'last.ckpt'}", f"image={image}",
                                f"out={image_tree / 'att'}"])
        assert (image_tree / "att" / "rollout.png").is_file() and (image_tree / "att" / "self_layer00.png").is_file()


def test_vit_on_text_data_fails_at_start_up_naming_both_sides(tmp_path: Path):
    repo = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [sys.executable, "train.py", "model=vit", "data=tinyshakespeare", f"paths.data_dir={tmp_path}",
         f"hydra.run.dir={tmp_path / 'out'}"],
        cwd=repo, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode != 0
    assert ("model=vit (Classification) reads ImageLabels batches, but data=tinyshakespeare (TinyShakespeare) "
            "yields TokenWindows or PaddedTokens" in run.stderr)


def test_randaugment_keeps_shape_and_only_touches_training():
    images = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
    train = InMemoryImages(images, torch.zeros(8), (0.5,) * 3, (0.25,) * 3, augment=True, randaugment="rand-m9-n2-mstd0.5")
    out, _ = train.__getitems__(list(range(8)))
    assert out.shape == (8, 3, 32, 32) and out.dtype == torch.float32
    evaluation = InMemoryImages(images, torch.zeros(8), (0.5,) * 3, (0.25,) * 3, randaugment="rand-m9-n2-mstd0.5")
    assert evaluation.randaugment is None
