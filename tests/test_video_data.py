"""moving_shapes (built-in clips), the shuffled-frames test view, and train.py's ViViT / VideoMAE
pipelines on it end to end."""

import numpy as np
import pytest
import torch
from hydra.errors import InstantiationException
from omegaconf import open_dict

from zoo.convert.common import compose_config
from zoo.data.moving_shapes import MovingShapes, shape_mask, trajectory
from zoo.data.videos import shuffle_frames
from zoo.objectives.loading import load
from zoo.train.run import objective, train


def test_clips_are_pure_functions_of_split_seed_and_index():
    dm, again = MovingShapes("unused", "unused", 4), MovingShapes("unused", "unused", 4)
    clip, label = dm.dataset("train").clip(7)
    same, same_label = again.dataset("train").clip(7)
    assert clip.shape == (8, 3, 32, 32) and clip.dtype == torch.uint8
    assert torch.equal(clip, same) and label == same_label
    others = [dm.dataset(s).clip(7)[0] for s in ("val", "test")]
    others.append(MovingShapes("u", "u", 4, seed=1).dataset("train").clip(7)[0])
    assert all(not torch.equal(clip, other) for other in others)
    assert dm.dims["num_classes"] == 12 and dm.dims["class_names"][:2] == ["circle-left", "circle-right"]
    labels = [dm.dataset("test").clip(i)[1] for i in range(600)]
    assert set(labels) == set(range(12)) and max(np.bincount(labels)) < 2 * min(np.bincount(labels))


def test_the_white_shape_moves_its_labelled_way_and_a_frame_does_not_tell_it():
    dm = MovingShapes("unused", "unused", 4, distractor=0.0)
    for index in range(40):
        clip, label = dm.dataset("train").clip(index)
        white = (clip == 255).all(dim=1)  # (T, H, W): the labelled shape
        ys, xs = torch.arange(32.0)[:, None], torch.arange(32.0)[None]
        area = white.sum(dim=(1, 2)).float()
        cx, cy = (white * xs).sum(dim=(1, 2)) / area, (white * ys).sum(dim=(1, 2)) / area
        direction = dm.options["directions"][label % 4]
        moved = {"left": -(cx[-1] - cx[0]), "right": cx[-1] - cx[0], "up": -(cy[-1] - cy[0]), "down": cy[-1] - cy[0]}
        assert moved[direction] >= 5, (index, direction, moved)  # >= 1 px per frame over 7 steps, less rasterising
        assert area.min() > 15  # it stays inside the frame
    # a path and its time-reversed twin: the same frames, so order alone tells the direction apart
    rng = np.random.default_rng(0)
    cx, cy = trajectory(rng, "right", 8, 32, 4.0, (2.0, 2.0))
    forward, backward = shape_mask("circle", cx, cy, 4.0, 32), shape_mask("circle", cx[::-1], cy[::-1], 4.0, 32)
    assert sorted(map(bytes, forward)) == sorted(map(bytes, backward)) and not np.array_equal(forward, backward)


def test_distractors_are_coloured_and_bad_options_are_named():
    clips = [MovingShapes("u", "u", 4, distractor=1.0).dataset("val").clip(i)[0] for i in range(10)]
    assert all(((c.amax(dim=1) > 0) & ~(c == 255).all(dim=1)).any() for c in clips)  # a non-white shape in each
    with pytest.raises(ValueError, match=r"data.directions=\['left', 'sideways'\]"):
        MovingShapes("u", "u", 4, directions=["left", "sideways"])
    with pytest.raises(ValueError, match="data.radius"):
        MovingShapes("u", "u", 4, radius=(4.0, 20.0))


def test_shuffled_frames_keep_each_clips_frames():
    videos = torch.arange(3 * 8).view(3, 8, 1, 1, 1).expand(3, 8, 2, 4, 4).float()
    shuffled = shuffle_frames(videos, torch.Generator().manual_seed(0))
    assert not torch.equal(shuffled, videos)
    for clip, original in zip(shuffled, videos):
        assert sorted(clip[:, 0, 0, 0].tolist()) == original[:, 0, 0, 0].tolist()


def test_unknown_test_view_is_named():
    cfg = compose_config(["model=vivit", "model.test_views=[upside_down]", "model.net.n_layers=1"])
    with open_dict(cfg):
        cfg.dims = {"num_classes": 3, "num_frames": 8, "image_size": 32, "channels": 3, "class_names": None,
                    "pixel_mean": None, "pixel_std": None}
    with pytest.raises(InstantiationException, match=r"unknown test_views \['upside_down'\].*shuffled_frames"):
        objective(cfg)


@pytest.mark.parametrize("model", ["vivit", "videomae"])
def test_train_on_moving_shapes_a_few_steps(tmp_path, model):
    cfg = compose_config([
        f"model={model}", "data=moving_shapes", "trainer=cpu", "trainer.max_steps=3", "trainer.val_check_interval=2",
        "trainer.log_every_n_steps=1", "callbacks.progress_bar.refresh_rate=0", "model.net.n_layers=1",
        "model.net.block.d_model=32", "model.net.block.n_heads=2", "data.batch_size=8", "data.train_size=64",
        "data.val_size=16", "data.test_size=16", f"paths.data_dir={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}",
    ])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "out")
    metrics = train(cfg)
    assert {"train/loss", "val/acc", "test/acc", "test/acc_shuffled_frames"} <= set(metrics)
    assert 0.0 <= metrics["test/acc_shuffled_frames"] <= 1.0
    restored = load(tmp_path / "out" / "checkpoints" / "last.ckpt", accepts=("video_classification",))
    assert restored.hparams.test_views == ["shuffled_frames"] and restored.hparams.class_names[0] == "circle-left"
    assert (tmp_path / "out" / "confusion.png").stat().st_size > 0
    assert (tmp_path / "out" / "clips.png").stat().st_size > 0  # the first test clips, predicted and true class
