"""data=audio: your recordings from a manifest (CSV / TSV / JSONL) or an audiofolder, at any sample
rate and channel count, for Whisper (log-mel, text targets) and wav2vec 2.0 (raw audio, CTC); the
bad-data refusals, each naming the manifest and its record; and (slow) `train.py model=whisper
data=audio data.source=manifest.csv` end to end."""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
import torchaudio

from conftest import run_train
from zoo.data.audio import SAMPLE_RATE, BadAudioError, LogMel, normalise_wave
from zoo.data.audio_manifest import AudioManifest
from zoo.data.batches import IGNORE, WaveText

SECONDS = 0.25


def write_clip(path: Path, i: int) -> None:
    """Clip ``i``: even ones 16 kHz stereo (a different tone on each channel), odd ones 8 kHz mono."""
    rate, stereo = (16000, True) if i % 2 == 0 else (8000, False)
    t = np.arange(int(SECONDS * rate)) / rate
    left = 0.3 * np.sin(2 * math.pi * (300 + 40 * i) * t)
    samples = np.stack([left, 0.2 * np.sin(2 * math.pi * 900 * t)], axis=1) if stereo else left
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, samples.astype(np.float32), rate, subtype="FLOAT")


def write_corpus(folder: Path, n: int = 8, name: str = "manifest.csv") -> Path:
    """``n`` clips under ``folder/wavs`` and a manifest naming them (relative to ``folder``): CSV,
    TSV or JSONL, as ``name``'s suffix says."""
    rows = [{"path": f"wavs/clip{i}.wav", "text": f"say {i} now"} for i in range(n)]
    for i, row in enumerate(rows):
        write_clip(folder / row["path"], i)
    write_rows(folder / name, rows)
    return folder / name


def write_rows(path: Path, rows: list[dict]) -> None:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["path", "text"],
                                delimiter="\t" if path.suffix == ".tsv" else ",")
        writer.writeheader()
        writer.writerows(rows)


def by_hand(path: Path) -> torch.Tensor:
    """The clip as the model should hear it: each channel resampled to 16 kHz, their mean."""
    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    channels = [torchaudio.functional.resample(torch.from_numpy(data[:, c].copy()), rate, SAMPLE_RATE)
                for c in range(data.shape[1])]
    return torch.stack(channels).mean(0)


def manifest_data(source: Path, tmp_path: Path, **kwargs) -> AudioManifest:
    dm = AudioManifest(str(tmp_path / "data"), str(tmp_path / "cache"), 2, source=str(source), **kwargs)
    dm.setup()
    return dm


def test_every_row_is_mixed_down_and_resampled_into_whisper_features(tmp_path):
    manifest = write_corpus(tmp_path / "corpus")
    dm = manifest_data(manifest, tmp_path, val_fraction=0.25, test_fraction=0.25)
    assert [len(dm.splits[s]) for s in ("train", "val", "test")] == [4, 2, 2]
    texts = sorted(e.text for examples in dm.splits.values() for e in examples)
    assert texts == sorted(f"say {i} now" for i in range(8))
    for examples in dm.splits.values():
        for example in examples:
            expected = by_hand(Path(example.name))
            assert len(expected) == int(SECONDS * SAMPLE_RATE)
            torch.testing.assert_close(example.load(), expected, atol=1e-5, rtol=0)
    test = dm.dataset("test")
    batch = dm.collate_fn()([test[0], test[1]])
    assert batch.references == [e.text for e in dm.splits["test"]]
    for i, example in enumerate(dm.splits["test"]):
        torch.testing.assert_close(batch.source[i], LogMel()(by_hand(Path(example.name))), atol=1e-4, rtol=0)
        n = len(example.text)
        assert dm.tokenizer.decode(batch.target_in[i, 1 : n + 1].tolist()) == example.text
        assert batch.target_out[i, n] == dm.dims["eos_id"]


def test_ctc_batches_hold_the_normalised_waves_and_character_labels(tmp_path):
    manifest = write_corpus(tmp_path / "corpus")
    dm = AudioManifest(str(tmp_path), str(tmp_path / "cache"), 2, source=str(manifest))
    dm.serve(WaveText)
    dm.setup()
    batch = next(iter(dm.test_dataloader()))
    assert isinstance(batch, WaveText)
    for i, example in enumerate(dm.splits["test"][:2]):
        torch.testing.assert_close(batch.waves[i], normalise_wave(by_hand(Path(example.name))), atol=1e-4, rtol=0)
        labels = batch.labels[i][batch.labels[i] != IGNORE].tolist()
        assert dm.tokenizer.decode(labels) == example.text == batch.references[i]


@pytest.mark.parametrize("name", ["manifest.tsv", "manifest.jsonl"])
def test_tsv_and_jsonl_manifests_read_the_same_rows(tmp_path, name):
    dm = manifest_data(write_corpus(tmp_path / "corpus", name=name), tmp_path)
    assert sorted(e.text for s in dm.splits.values() for e in s) == sorted(f"say {i} now" for i in range(8))


def test_an_audiofolder_reads_its_metadata_and_val_test_manifests_replace_the_held_out_rows(tmp_path):
    folder = tmp_path / "folder"
    for i in range(6):
        write_clip(folder / f"{i}.wav", i)
    write_rows(folder / "metadata.csv", [{"file_name": f"{i}.wav", "text": f"clip {i}"} for i in range(6)])
    val = write_corpus(tmp_path / "val", n=2)
    test = write_corpus(tmp_path / "test", n=3, name="test.jsonl")
    dm = manifest_data(folder, tmp_path, val=str(val), test=str(test))
    assert [e.text for e in dm.splits["train"]] == [f"clip {i}" for i in range(6)]
    assert [e.text for e in dm.splits["val"]] == ["say 0 now", "say 1 now"]
    assert [Path(e.name) for e in dm.splits["test"]] == [tmp_path / "test" / "wavs" / f"clip{i}.wav" for i in range(3)]


def test_the_held_out_rows_are_drawn_by_the_seed(tmp_path):
    manifest = write_corpus(tmp_path / "corpus", n=10)
    held = lambda seed: [e.text for e in manifest_data(manifest, tmp_path, seed=seed).splits["val"]]  # noqa: E731
    assert held(1) == held(1) and len(held(1)) == 1  # at least one row each, of 10 at 0.1
    assert len({tuple(held(seed)) for seed in range(6)}) > 1


def test_transcripts_of_digits_stay_text_and_whitespace_is_collapsed(tmp_path):
    corpus = tmp_path / "corpus"
    manifest = write_corpus(corpus, n=4)
    write_rows(manifest, [{"path": f"wavs/clip{i}.wav", "text": t} for i, t in enumerate(["007", "  Two  Words ", "a", "b"])])
    texts = {e.text for s in manifest_data(manifest, tmp_path).splits.values() for e in s}
    assert texts == {"007", "Two Words", "a", "b"}


# --- bad data: one line each, naming the manifest and the record --------------------------------

def bad_row(tmp_path: Path, row: dict, at: int = 3) -> Path:
    """A corpus of 6 good rows whose record ``at`` (1-based) is replaced by ``row``."""
    manifest = write_corpus(tmp_path / "corpus", n=6)
    rows = [{"path": f"wavs/clip{i}.wav", "text": f"say {i} now"} for i in range(6)]
    rows[at - 1] = row
    write_rows(manifest, rows)
    return manifest


def refusal(manifest: Path, tmp_path: Path, error: type = ValueError, **kwargs) -> str:
    with pytest.raises(error) as err:
        manifest_data(manifest, tmp_path, **kwargs)
    message = str(err.value)
    assert "\n" not in message and str(manifest) in message
    return message


def test_a_missing_column_is_refused_listing_the_columns_there(tmp_path):
    manifest = tmp_path / "m.csv"
    write_rows(manifest, [{"file": "a.wav", "text": "hi"}])
    assert "has no column 'path' (data.path_column=path): its columns are ['file', 'text']" in refusal(manifest, tmp_path)
    write_rows(manifest, [{"path": "a.wav", "sentence": "hi"}])
    assert "no column 'text' (data.text_column=text)" in refusal(manifest, tmp_path)


def test_a_missing_audio_file_or_a_folder_is_refused_naming_the_record(tmp_path):
    message = refusal(bad_row(tmp_path, {"path": "wavs/gone.wav", "text": "x"}), tmp_path)
    assert "record 3: audio file wavs/gone.wav" in message and message.endswith("does not exist")
    message = refusal(bad_row(tmp_path, {"path": "wavs", "text": "x"}, at=5), tmp_path)
    assert "record 5: audio file wavs" in message and message.endswith("is not a file")


def test_a_path_outside_the_manifests_folder_is_refused_unless_absolute_paths_are_allowed(tmp_path):
    outside = tmp_path / "elsewhere.wav"
    write_clip(outside, 1)
    message = refusal(bad_row(tmp_path, {"path": "../elsewhere.wav", "text": "x"}), tmp_path)
    assert "record 3: ../elsewhere.wav leaves the manifest's folder" in message
    manifest = bad_row(tmp_path, {"path": str(outside), "text": "far away"}, at=2)
    assert f"record 2: {outside} is an absolute path" in refusal(manifest, tmp_path)
    dm = manifest_data(manifest, tmp_path, absolute_paths=True)
    assert outside in {Path(e.name) for s in dm.splits.values() for e in s}
    # allowed absolute paths do not open the ".." door
    manifest = bad_row(tmp_path, {"path": "wavs/../../elsewhere.wav", "text": "x"}, at=4)
    assert "record 4: wavs/../../elsewhere.wav leaves" in refusal(manifest, tmp_path, absolute_paths=True)


def test_a_corrupt_audio_file_is_refused_naming_it_or_skipped_and_counted(tmp_path, caplog):
    manifest = write_corpus(tmp_path / "corpus", n=8)
    (tmp_path / "corpus" / "wavs" / "clip2.wav").write_bytes(b"this is not a wav file")
    soundfile.write(tmp_path / "corpus" / "wavs" / "clip5.wav", np.zeros(0, dtype=np.float32), 8000)
    message = refusal(manifest, tmp_path, BadAudioError)
    assert "record 3: cannot read audio file" in message and "clip2.wav" in message and "data.on_bad=skip" in message
    with caplog.at_level(logging.WARNING):
        dm = manifest_data(manifest, tmp_path, on_bad="skip")
    lines = [r.getMessage() for r in caplog.records if "data.on_bad=skip" in r.getMessage()]
    assert len(lines) == 1 and "skipped 2 of 8 audio files" in lines[0]
    assert "wavs/clip2.wav" in lines[0] and "wavs/clip5.wav" in lines[0]
    kept = {Path(e.name).name for s in dm.splits.values() for e in s}
    assert len(kept) == 6 and not kept & {"clip2.wav", "clip5.wav"}


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_transcript_is_refused_naming_the_record(tmp_path, text):
    message = refusal(bad_row(tmp_path, {"path": "wavs/clip2.wav", "text": text}), tmp_path)
    assert "record 3: its transcript ('text') is empty" in message


def test_a_transcript_that_is_not_text_is_refused_naming_the_record(tmp_path):
    manifest = write_corpus(tmp_path / "corpus", n=4, name="manifest.jsonl")
    write_rows(manifest, [{"path": f"wavs/clip{i}.wav", "text": "words" if i != 1 else 42} for i in range(4)])
    assert "record 2: its transcript ('text') is 42, not text" in refusal(manifest, tmp_path)


@pytest.mark.parametrize("name", ["manifest.csv", "manifest.jsonl"])
def test_an_empty_manifest_is_refused(tmp_path, name):
    manifest = tmp_path / name
    write_rows(manifest, [])
    assert "holds no rows" in refusal(manifest, tmp_path)


def test_a_folder_without_metadata_and_an_unset_source_are_refused(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(ValueError, match=r"data.source=.*folder is a folder without a metadata file"):
        manifest_data(tmp_path / "folder", tmp_path)
    with pytest.raises(ValueError, match="data.source is not set"):
        AudioManifest(str(tmp_path), str(tmp_path / "cache"), 2)


def test_nothing_is_written_next_to_the_data(tmp_path):
    corpus = tmp_path / "corpus"
    manifest = write_corpus(corpus)
    before = sorted(p.relative_to(corpus) for p in corpus.rglob("*"))
    dm = manifest_data(manifest, tmp_path, tokenizer="bpe", bpe_vocab_size=40)
    next(iter(dm.train_dataloader()))
    assert sorted(p.relative_to(corpus) for p in corpus.rglob("*")) == before
    assert any((tmp_path / "cache" / "audio").rglob("*"))  # datasets' files: under the cache


# --- end to end -----------------------------------------------------------------------------------

TINY_WHISPER = [
    "trainer=cpu", "model.net.block.d_model=32", "model.net.block.n_heads=2", "model.net.n_encoder_layers=1",
    "model.net.n_decoder_layers=1", "model.decoding.max_new_tokens=8", "model.decoding.beam_size=2",
    "data.batch_size=2", "trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.limit_val_batches=1",
    "+trainer.limit_test_batches=1", "trainer.log_every_n_steps=1",
]


@pytest.mark.slow
def test_whisper_trains_on_a_manifest_of_mixed_rates_and_channels(tmp_path):
    data = tmp_path / "data"
    write_corpus(data)
    run = tmp_path / "run"
    run_train(run, data, "model=whisper", "data=audio", "data.source=manifest.csv", *TINY_WHISPER)
    assert (run / "checkpoints" / "last.ckpt").is_file()
    with open(run / "metrics.csv") as f:
        losses = [float(row["test/loss"]) for row in csv.DictReader(f) if row.get("test/loss")]
    assert len(losses) == 1 and math.isfinite(losses[0]) and losses[0] > 0
    references = [line for line in (run / "examples.txt").read_text().splitlines() if "reference:" in line]
    assert references and all(line.split("reference:", 1)[1].strip() in {f"say {i} now" for i in range(8)}
                              for line in references)
