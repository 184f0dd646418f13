"""``zoo detect`` (the objects a YOLOS checkpoint finds in an image, as JSON and a PNG) and the
detection attention maps, on a tiny YOLOS trained a few steps on shapes_detection."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from test_bad_input_checkpoints import KINDS, hostile, objective_of, save_objective
from test_yolos_data import _config, _data
from zoo.cli.commands import call
from zoo.data.coco import letterbox
from zoo.data.images import to_tensor
from zoo.data.moving_shapes import SHAPES
from zoo.nn.detection import DetectionEmbedder
from zoo.objectives.loading import load
from zoo.train.run import train
from zoo.viz.attention_maps import detection_heat


@pytest.fixture(scope="module")
def yolos_ckpt(tmp_path_factory) -> Path:
    """A real detector checkpoint: the tiny YOLOS of tests/test_yolos_data.py trained 2 steps."""
    root = tmp_path_factory.mktemp("yolos")
    train(_config(root, "trainer.max_steps=2", "trainer.val_check_interval=2", "test=false"))
    return root / "out" / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def raw_image() -> torch.Tensor:
    """A shapes_detection test image, (3, 64, 64) uint8."""
    return _data().dataset("test").raw(0)[0]


def write_png(pixels: torch.Tensor, path: Path) -> Path:
    Image.fromarray(pixels.permute(1, 2, 0).numpy()).save(path)
    return path


def expected(ckpt: Path, pixels: torch.Tensor, scale: float) -> list[tuple[float, list[float]]]:
    """(score, box xyxy in the image's pixels) of every detection token, from the network's forward
    on ``pixels`` (1, 3, 64, 64): the best real class's probability, the box's (cx, cy, w, h) in
    fractions of the network's square, over ``scale``."""
    net = load(ckpt).net
    with torch.no_grad():
        out = net(pixels)
    scores = out.logits[0].softmax(-1)[:, :-1].max(-1).values
    cx, cy, w, h = (out.boxes[0] * 64 / scale).unbind(-1)
    boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)
    return sorted(zip(scores.tolist(), boxes.tolist()), key=lambda pair: -pair[0])


def detect(capsys, ckpt: Path, image: Path, *overrides: str) -> list[dict]:
    call("detect", [f"ckpt={ckpt}", f"image={image}", *overrides])
    return json.loads(capsys.readouterr().out)


def test_detect_prints_every_box_the_network_gives_and_draws_them(yolos_ckpt, raw_image, tmp_path, capsys):
    image = write_png(raw_image, tmp_path / "shapes.png")
    found = detect(capsys, yolos_ckpt, image, "threshold=0", f"out={tmp_path / 'boxes.png'}")
    # the network's own input: the image normalised as the data module does (64 px: no resizing)
    want = expected(yolos_ckpt, _data().dataset("test")[0][0][None], 1.0)
    assert len(found) == len(want) == 10  # threshold 0: every detection token
    for got, (score, box) in zip(found, want):
        assert set(got) == {"label", "class", "score", "box"}
        assert got["label"] == SHAPES[got["class"]]  # the data module's class names
        assert got["score"] == pytest.approx(score, abs=1e-4)
        clipped = np.clip(box, 0, 64)
        assert got["box"] == pytest.approx(clipped.tolist(), abs=0.01)
        x0, y0, x1, y1 = got["box"]
        assert 0 <= x0 <= x1 <= 64 and 0 <= y0 <= y1 <= 64
    drawn = Image.open(tmp_path / "boxes.png")
    assert drawn.format == "PNG" and drawn.size == (64, 64)
    assert not np.array_equal(np.asarray(drawn.convert("RGB")), raw_image.permute(1, 2, 0).numpy())  # boxes drawn


def test_the_threshold_keeps_only_the_boxes_scoring_at_least_it(yolos_ckpt, raw_image, tmp_path, capsys):
    image = write_png(raw_image, tmp_path / "shapes.png")
    every = call("detect", [f"ckpt={yolos_ckpt}", f"image={image}", "threshold=0", f"out={tmp_path / 'all.png'}"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == [d.as_json() for d in every]  # what main returns is what it prints
    scores = [d.score for d in every]  # (unrounded: a tiny model's scores lie close together)
    assert scores == sorted(scores, reverse=True) and scores[2] > scores[3], scores
    threshold = (scores[2] + scores[3]) / 2  # between the third and the fourth best
    kept = detect(capsys, yolos_ckpt, image, f"threshold={threshold!r}", f"out={tmp_path / 'kept.png'}")
    assert kept == printed[:3]
    assert detect(capsys, yolos_ckpt, image, "threshold=1", f"out={tmp_path / 'none.png'}") == []
    assert Image.open(tmp_path / "none.png").size == (64, 64)


def test_another_size_is_letterboxed_and_its_boxes_come_back_in_its_pixels(yolos_ckpt, raw_image, tmp_path, capsys):
    """A 128 x 96 image: the network reads it scaled by 1/2 and padded below; the boxes are in the
    128 x 96 image's pixels, inside it."""
    wide = Image.fromarray(raw_image.permute(1, 2, 0).numpy()).resize((128, 96), Image.NEAREST)
    wide.save(tmp_path / "wide.png")
    found = detect(capsys, yolos_ckpt, tmp_path / "wide.png", "threshold=0", f"out={tmp_path / 'wide_boxes.png'}")
    square, scale = letterbox(wide, 64)
    assert scale == 0.5 and np.asarray(square)[48:].max() == 0  # the padding: the rows below the image
    want = expected(yolos_ckpt, to_tensor(square, 64, mean=[0.5] * 3, std=[0.5] * 3)[None], scale)
    for got, (score, box) in zip(found, want, strict=True):
        assert got["score"] == pytest.approx(score, abs=1e-4)
        assert got["box"] == pytest.approx(np.clip(box, 0, [128, 96, 128, 96]).tolist(), abs=0.01)
        x0, y0, x1, y1 = got["box"]
        assert 0 <= x0 <= x1 <= 128 and 0 <= y0 <= y1 <= 96
    assert Image.open(tmp_path / "wide_boxes.png").size == (128, 96)


@pytest.mark.parametrize("threshold", ["1.5", "-0.1"])
def test_a_threshold_outside_0_1_is_refused_before_the_checkpoint_is_read(threshold, tmp_path):
    with pytest.raises(ValueError, match=f"threshold={threshold}: .* 0 <= threshold <= 1"):
        call("detect", [f"ckpt={tmp_path / 'absent.ckpt'}", f"image={tmp_path / 'x.png'}", f"threshold={threshold}"])


def test_a_checkpoint_that_is_not_a_detector_is_refused_naming_what_it_is(tmp_path, raw_image):
    ckpt = save_objective(objective_of("vit"), tmp_path / "vit.ckpt")
    image = write_png(raw_image, tmp_path / "shapes.png")
    with pytest.raises(ValueError, match=r"vit.ckpt is a classification checkpoint \(Classification\): "
                                         r"zoo detect \(model=yolos\) needs detection"):
        call("detect", [f"ckpt={ckpt}", f"image={image}", f"out={tmp_path / 'boxes.png'}"])
    assert not (tmp_path / "boxes.png").exists()


def test_detect_refuses_a_hostile_checkpoint_and_runs_nothing(yolos_ckpt, raw_image, tmp_path, monkeypatch):
    """Every kind of checkpoint that names code to run (tests/test_bad_input_checkpoints.py), made
    from the detector's own: refused naming it, before anything is built or written."""
    image = write_png(raw_image, tmp_path / "shapes.png")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    for kind, (ckpt, named) in hostile(yolos_ckpt, tmp_path).items():
        torch.save(ckpt, tmp_path / "p.ckpt")
        with pytest.raises(ValueError, match=re.escape(named)):
            call("detect", [f"ckpt={tmp_path / 'p.ckpt'}", f"image={image}", "out=boxes.png"])
    assert sorted(hostile(yolos_ckpt, tmp_path)) == sorted(KINDS)
    assert list(work.iterdir()) == [] and list((tmp_path / "loot").iterdir()) == []


def test_an_unreadable_image_is_named(yolos_ckpt, tmp_path):
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="image .*broken.png is corrupt or not an image"):
        call("detect", [f"ckpt={yolos_ckpt}", f"image={tmp_path / 'broken.png'}", f"out={tmp_path / 'b.png'}"])


def test_detection_heat_is_each_detection_tokens_last_layer_look_over_the_patches():
    """[CLS, 2 x 2 patches, 2 detection tokens]: in the last layer token det0 reads patch (1, 0) in one
    head and patch (1, 1) in the other, det1 reads the CLS and patch (0, 0); earlier layers do not count."""
    positions = DetectionEmbedder(image_size=8, patch_size=4, d_model=4, n_detections=2).describe_positions(None)
    length = len(positions)
    assert length == 1 + 4 + 2
    last = torch.zeros(1, 2, length, length)
    last[0, 0, 5, 1 + 2] = last[0, 1, 5, 1 + 3] = 1.0
    last[0, :, 6, 0] = last[0, :, 6, 1] = 0.5
    heat = detection_heat([torch.rand(1, 2, length, length), last], positions)
    assert torch.equal(heat, torch.tensor([[[0.0, 0.0], [0.5, 0.5]], [[0.5, 0.0], [0.0, 0.0]]]))


def test_attention_maps_of_a_detector_show_each_detection_tokens_look(yolos_ckpt, raw_image, tmp_path, capsys):
    image = write_png(raw_image, tmp_path / "shapes.png")
    call("attention-maps", [f"ckpt={yolos_ckpt}", f"image={image}", f"out={tmp_path / 'att'}"])
    written = capsys.readouterr().out
    assert (tmp_path / "att" / "detections.png").is_file() and (tmp_path / "att" / "self_layer00.png").is_file()
    assert "detections.png" in written and not (tmp_path / "att" / "rollout.png").exists()  # not a classifier's
    assert Image.open(tmp_path / "att" / "detections.png").size[0] > 3 * 64  # a grid of panels across
