"""UCF101 in its official layout, on a few tiny clips this test writes with PyAV."""

from pathlib import Path

import pytest
import torch

from zoo.data import ucf101
from zoo.data.ucf101 import UCF101

av = pytest.importorskip("av", reason="PyAV (the video extra: pip install av) decodes UCF101's .avi clips")

CLASSES = ["ApplyEyeMakeup", "Basketball"]


def write_clip(path: Path, frames: int, width: int, height: int, value: int) -> None:
    """An MPEG-4 Part 2 .avi (UCF101's codec family): a flat grey frame brightening over time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for t in range(frames):
            pixels = torch.full((height, width, 3), min(255, value + 8 * t), dtype=torch.uint8).numpy()
            container.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        container.mux(stream.encode())


def make_ucf101(root: Path, frames: int = 12, width: int = 48, height: int = 32) -> Path:
    """``root/UCF-101/<Class>/v_<Class>_gXX_cYY.avi`` for groups 1-4 (2 clips each) and the split files:
    groups 3-4 train, 1-2 test, as the official fold 1 splits by group."""
    lists = root / "ucfTrainTestlist"
    lists.mkdir(parents=True)
    (lists / "classInd.txt").write_text("".join(f"{i} {c}\n" for i, c in enumerate(CLASSES, 1)))
    train, test = [], []
    for label, name in enumerate(CLASSES):
        for group in range(1, 5):
            for clip in range(1, 3):
                file = f"{name}/v_{name}_g{group:02d}_c{clip:02d}.avi"
                write_clip(root / "UCF-101" / file, frames, width, height, value=40 + 100 * label)
                (train if group >= 3 else test).append(file)
    (lists / "trainlist01.txt").write_text("".join(f"{f} {CLASSES.index(f.split('/')[0]) + 1}\n" for f in train))
    (lists / "testlist01.txt").write_text("".join(f"{f}\n" for f in test))
    return root


def test_splits_hold_out_whole_groups_and_clips_are_sampled_resized_and_cached(tmp_path, monkeypatch):
    data = make_ucf101(tmp_path / "data")
    dm = UCF101(str(data), str(tmp_path / "cache"), batch_size=2, frames=4, image_size=16, val_groups=1)
    with pytest.warns(UserWarning, match="8 of 8 clips in .* were not 4 frames of 16x16: sampled and resized"):
        dm.setup("fit")
    assert dm.dims["num_classes"] == 2 and dm.dims["class_names"] == CLASSES and dm.dims["num_frames"] == 4
    clips, labels = dm.splits["train"]
    assert clips.shape == (4, 4, 3, 16, 16) and clips.dtype == torch.uint8  # group 3 (group 4 is validation)
    assert [len(dm.splits[s][1]) for s in ("train", "val", "test")] == [4, 4, 8]
    assert sorted(labels.tolist()) == [0, 0, 1, 1]
    brightness = clips.float().mean(dim=(2, 3, 4))  # (N, T): the clips brighten over time, classes differ
    assert (brightness.diff(dim=1) > 0).all()
    assert (brightness[labels == 1].mean() - brightness[labels == 0].mean()) > 50
    batch, batch_labels = next(iter(dm.test_dataloader()))
    assert batch.shape == (2, 4, 3, 16, 16) and batch.dtype == torch.float32 and batch.abs().max() <= 1

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again instead of reading the cache")

    monkeypatch.setattr(ucf101, "decode_video", no_decoding)
    again = UCF101(str(data), str(tmp_path / "cache"), batch_size=2, frames=4, image_size=16, val_groups=1)
    again.setup("fit")
    assert torch.equal(again.splits["train"][0], clips)


def test_resize_false_refuses_a_clip_naming_both_shapes(tmp_path):
    data = make_ucf101(tmp_path / "data", frames=8, width=32, height=32)
    # clips of the model's shape are taken as they are
    UCF101(str(data), str(tmp_path / "cache"), batch_size=2, val_groups=1, resize=False).setup("fit")
    dm = UCF101(str(data), str(tmp_path / "cache"), batch_size=2, frames=6, val_groups=1, resize=False)
    with pytest.raises(ValueError, match=r"clip .*v_ApplyEyeMakeup_g0\d_c01.avi is 8 frames of 32x32, the model takes "
                                         r"6 frames of 32x32 \(set data.resize=true"):
        dm.setup("fit")


def test_unreadable_video_is_named(tmp_path):
    data = make_ucf101(tmp_path / "data")
    bad = data / "UCF-101" / "Basketball" / "v_Basketball_g03_c02.avi"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00AVI not really a video")
    with pytest.raises(ValueError, match=f"cannot decode video {bad}"):
        UCF101(str(data), str(tmp_path / "cache"), batch_size=2, val_groups=1).setup("fit")


def test_missing_folder_names_the_urls_the_folder_and_unrar(tmp_path):
    dm = UCF101(str(tmp_path / "nothing"), str(tmp_path / "cache"), batch_size=2)
    with pytest.raises(FileNotFoundError) as err:
        dm.prepare_data()
    message = str(err.value)
    for needed in ("https://www.crcv.ucf.edu/data/UCF101/UCF101.rar", "UCF101TrainTestSplits-RecognitionTask.zip",
                   str(tmp_path / "nothing" / "UCF-101"), "unrar"):
        assert needed in message
