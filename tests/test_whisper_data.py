"""Speech data: FSDD digit sequences (official layout, generated here), features and
batches, tokenizers, bad and too-long audio."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from zoo.data.audio import SAMPLE_RATE, BadAudioError, load_audio
from zoo.data.fsdd import FSDD, WORDS
from zoo.data.speech import IGNORE, Example, SpeechExamples
from zoo.data.tokenizers import CharTokenizer, tokenizer_from_state
from zoo.nn.embedders import AudioEmbedder


def tone(digit: int, seconds: float = 0.12, rate: int = 8000) -> np.ndarray:
    """A recording stand-in: a tone whose pitch says the digit."""
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * math.pi * (300 + 150 * digit) * t)).astype(np.float32)


def write_fsdd(root: Path, speakers=("alice", "bob"), digits=range(10), takes=range(12)) -> Path:
    """``root/fsdd/recordings/{digit}_{speaker}_{take}.wav`` at 8 kHz, as the official repository."""
    folder = root / "fsdd" / "recordings"
    folder.mkdir(parents=True)
    for speaker in speakers:
        for d in digits:
            for take in takes:
                soundfile.write(folder / f"{d}_{speaker}_{take}.wav", tone(d), 8000, subtype="PCM_16")
    return folder


def fsdd(root: Path, **kwargs) -> FSDD:
    kwargs = {"batch_size": 4, "train_batches": 5, "val_takes": 2, "test_passes": 1, **kwargs}
    dm = FSDD(str(root), str(root / "cache"), **kwargs)
    dm.prepare_data()
    dm.setup()
    return dm


def test_fsdd_official_split_and_digit_sequences(tmp_path):
    write_fsdd(tmp_path)
    dm = fsdd(tmp_path, max_digits=3)
    # test: takes 0-4 (2 speakers x 10 digits x 5 takes, each used once); val: takes 5-6
    test_words = [w for e in dm.splits["test"] for w in e.text.split()]
    assert len(test_words) == 2 * 10 * 5 and sorted(set(test_words)) == sorted(WORDS)
    assert sum(len(e.text.split()) for e in dm.splits["val"]) == 2 * 10 * 2
    assert len(dm.splits["train"]) == 5 * 4
    for split in ("train", "val", "test"):
        assert all(1 <= len(e.text.split()) <= 3 for e in dm.splits[split])
    # resampled 8 kHz -> 16 kHz: one tone of 0.12 s is 1920 samples, plus silences
    example = dm.splits["test"][0]
    n_digits = len(example.text.split())
    assert len(example.load()) >= n_digits * 1920
    assert dm.dims["vocab_size"] == dm.tokenizer.vocab_size and dm.tokenizer.decode(
        dm.tokenizer.encode("three seven one")) == "three seven one"


def test_fsdd_is_deterministic_by_seed_and_batches_share_a_length(tmp_path):
    write_fsdd(tmp_path)
    a, b, c = fsdd(tmp_path), fsdd(tmp_path), fsdd(tmp_path, seed=7)
    texts = lambda dm, split: [e.text for e in dm.splits[split]]  # noqa: E731
    assert texts(a, "train") == texts(b, "train") and texts(a, "test") == texts(b, "test")
    assert texts(a, "train") != texts(c, "train")
    torch.testing.assert_close(a.splits["train"][3].load(), b.splits["train"][3].load())
    for batch in range(5):  # training utterances come in buckets of one digit count per batch
        assert len({len(t.split()) for t in texts(a, "train")[batch * 4 : batch * 4 + 4]}) == 1


def test_batches_are_padded_for_the_encoder(tmp_path):
    write_fsdd(tmp_path)
    dm = fsdd(tmp_path, num_workers=0)
    batch = next(iter(dm.test_dataloader()))
    source, padding = batch.source, batch.source_padding
    assert source.shape[:2] == (4, 80) and padding.shape == (4, AudioEmbedder.positions_for(source.shape[-1]))
    t, bos, eos = dm.tokenizer, dm.dims["bos_id"], dm.dims["eos_id"]
    assert (batch.target_in[:, 0] == bos).all()
    for i, ref in enumerate(batch.references):
        n = len(ref)
        assert t.decode(batch.target_in[i, 1 : n + 1].tolist()) == ref
        assert batch.target_out[i, n] == eos and (batch.target_out[i, n + 1 :] == IGNORE).all()
        frames = len(dm.splits["test"][i].load()) // 160
        assert padding[i].sum() == AudioEmbedder.positions_for(frames)


def test_spec_augment_masks_training_features_only(tmp_path):
    write_fsdd(tmp_path)
    dm = fsdd(tmp_path, spec_augment={"freq_mask": 20, "time_mask": 10, "n_freq_masks": 2, "n_time_masks": 2})
    plain = fsdd(tmp_path)
    torch.manual_seed(0)
    augmented, _, _ = dm.dataset("train")[0]
    clean, _, _ = plain.dataset("train")[0]
    assert augmented.shape == clean.shape and not torch.equal(augmented, clean)
    assert (augmented == 0).any(dim=1).any()  # some frames or bands masked to 0
    torch.testing.assert_close(dm.dataset("test")[0][0], plain.dataset("test")[0][0])


def test_missing_fsdd_offline_names_url_and_path(tmp_path, monkeypatch):
    def offline(url, path):
        raise OSError("network unreachable")

    monkeypatch.setattr("urllib.request.urlretrieve", offline)
    with pytest.raises(RuntimeError, match="github.com/Jakobovski/free-spoken-digit-dataset.*put the file at .*fsdd"):
        fsdd(tmp_path)


def test_bad_audio_is_named_or_skipped(tmp_path, caplog):
    folder = write_fsdd(tmp_path, takes=range(8))
    (folder / "3_alice_9.wav").write_bytes(b"this is not a wav file")
    soundfile.write(folder / "4_bob_9.wav", np.zeros(0, dtype=np.float32), 8000)
    with pytest.raises(BadAudioError, match="3_alice_9.wav"):
        fsdd(tmp_path, val_takes=1)
    with caplog.at_level(logging.WARNING):
        dm = fsdd(tmp_path, val_takes=1, skip_bad_files=True)
    assert "3_alice_9.wav" in caplog.text and "4_bob_9.wav" in caplog.text and "empty" in caplog.text
    assert len(dm.splits["train"]) > 0


def test_load_audio_resamples_any_rate_and_mixes_to_mono(tmp_path):
    stereo = np.stack([tone(1, 0.5, 44100), tone(1, 0.5, 44100)], axis=1)
    soundfile.write(tmp_path / "a.flac", stereo, 44100)
    wave = load_audio(tmp_path / "a.flac")
    assert wave.dim() == 1 and abs(len(wave) - SAMPLE_RATE // 2) <= 1


def test_too_long_audio_is_cropped_with_a_warning_or_refused(caplog):
    long = Example(lambda: torch.randn(3 * SAMPLE_RATE), "one", "long.wav")
    tok = CharTokenizer.from_text("one ", specials=("<pad>", "<s>", "</s>"))
    with caplog.at_level(logging.WARNING):
        features, ids, _ = SpeechExamples([long], tok, max_samples=SAMPLE_RATE)[0]
    assert features.shape == (80, 100) and "long.wav is 3.0 s long: cropped" in caplog.text
    with pytest.raises(BadAudioError, match="long.wav is 3.0 s long"):
        SpeechExamples([long], tok, max_samples=SAMPLE_RATE, long_audio="error")[0]


def test_char_tokenizer_specials_travel_in_its_state():
    tok = CharTokenizer.from_text("one two", specials=("<pad>", "<s>", "</s>"))
    again = tokenizer_from_state(tok.state())
    assert [again.token_id(t) for t in ("<pad>", "<s>", "</s>", "e")] == [0, 1, 2, 4] and again.vocab_size == 3 + 6
    ids = again.encode("two one")
    assert min(ids) >= 3 and again.decode([1, *ids, 2, 0]) == "two one"
    assert CharTokenizer("ab").vocab_size == 2  # no specials: as before
