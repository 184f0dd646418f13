"""The other speech corpora, each on a few generated files in its official (torchaudio) layout."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import soundfile

from zoo.data.librispeech import LibriSpeech
from zoo.data.ljspeech import LJSpeech
from zoo.data.speechcommands import SpeechCommands
from zoo.data.yesno import YesNo


def wav(path: Path, rate: int = 16000, seconds: float = 0.2, fmt: str = "WAV") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * rate)) / rate
    soundfile.write(path, (0.3 * np.sin(2 * math.pi * 440 * t)).astype(np.float32), rate, format=fmt)


def setup(dm):
    dm.prepare_data()
    dm.setup()
    batch = dm.collate_fn()([dm.dataset("test")[0]])
    assert batch.source.shape[:2] == (1, 80) and batch.references == [dm.splits["test"][0].text]
    return dm


def write_yesno(root: Path) -> None:
    for name in ["0_0_1_0_1_0_1_1", "1_1_1_1_0_0_0_0", "0_1_0_1_0_1_0_1", "1_0_0_0_1_1_1_0"]:
        wav(root / "yesno" / "waves_yesno" / f"{name}.wav", rate=8000)


def write_ljspeech(root: Path) -> None:
    rows = [f"LJ001-000{i}|Chapter {i}, page {i}.|Chapter one, page {i}." for i in range(1, 5)]
    for i in range(1, 5):
        wav(root / "LJSpeech-1.1" / "wavs" / f"LJ001-000{i}.wav", rate=22050)
    (root / "LJSpeech-1.1" / "metadata.csv").write_text("\n".join(rows) + "\n")


def write_librispeech(root: Path) -> None:
    for subset, speaker in (("train-clean-100", 19), ("dev-clean", 84), ("test-clean", 121)):
        chapter = root / "LibriSpeech" / subset / str(speaker) / "198"
        lines = []
        for utt in range(2):
            wav(chapter / f"{speaker}-198-000{utt}.flac", fmt="FLAC")
            lines.append(f"{speaker}-198-000{utt} HELLO {subset.upper()} NUMBER {utt}")
        (chapter / f"{speaker}-198.trans.txt").write_text("\n".join(lines) + "\n")


def write_speechcommands(root: Path) -> None:
    folder = root / "SpeechCommands" / "speech_commands_v0.02"
    for word in ("yes", "no", "backward"):
        for speaker in ("aa11", "bb22", "cc33"):
            wav(folder / word / f"{speaker}_nohash_0.wav", seconds=0.3)
    wav(folder / "_background_noise_" / "noise.wav")
    (folder / "validation_list.txt").write_text("yes/bb22_nohash_0.wav\n")
    (folder / "testing_list.txt").write_text("no/cc33_nohash_0.wav\nbackward/cc33_nohash_0.wav\n")


def test_yesno(tmp_path):
    write_yesno(tmp_path)
    dm = setup(YesNo(str(tmp_path), str(tmp_path / "cache"), 2, val_fraction=0.25, test_fraction=0.25))
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [2, 1, 1]
    texts = {e.text for s in dm.splits.values() for e in s}
    assert "no no yes no yes no yes yes" in texts and len(texts) == 4


def test_ljspeech(tmp_path):
    write_ljspeech(tmp_path)
    dm = setup(LJSpeech(str(tmp_path), str(tmp_path / "cache"), 2, val_fraction=0.25, test_fraction=0.25))
    assert sum(len(s) for s in dm.splits.values()) == 4
    assert all(e.text.startswith("chapter one, page ") for s in dm.splits.values() for e in s)


def test_librispeech_subsets(tmp_path):
    write_librispeech(tmp_path)
    dm = setup(LibriSpeech(str(tmp_path), str(tmp_path / "cache"), 2, tokenizer="bpe", bpe_vocab_size=60))
    assert [e.text for e in dm.splits["test"]] == ["hello test-clean number 0", "hello test-clean number 1"]
    assert dm.tokenizer.decode(dm.tokenizer.encode("hello train-clean number 0")) == "hello train-clean number 0"
    with pytest.raises(FileNotFoundError, match="LibriSpeech/train-other-500 is missing"):
        LibriSpeech(str(tmp_path), str(tmp_path / "cache"), 2, train_subsets=["train-other-500"],
                    download=False).setup()


def test_speechcommands_official_split(tmp_path):
    write_speechcommands(tmp_path)
    dm = setup(SpeechCommands(str(tmp_path), str(tmp_path / "cache"), 2))
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [6, 1, 2]
    assert sorted(e.text for e in dm.splits["test"]) == ["backward", "no"]


def test_missing_corpus_offline_names_url_and_folder(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr("torchaudio.datasets.yesno.download_url_to_file", offline)
    with pytest.raises(RuntimeError, match="openslr.*waves_yesno"):
        YesNo(str(tmp_path), str(tmp_path / "cache"), 2).prepare_data()
