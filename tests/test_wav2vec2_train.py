"""wav2vec 2.0 / HuBERT on the speech data: the data modules yield WaveText batches (the waveform
normalised as Wav2Vec2FeatureExtractor does, CTC targets) when the model reads them, `train.py
model=wav2vec2 data=fsdd` trains, and `zoo transcribe` decodes a CTC checkpoint greedily."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import soundfile
import torch
from transformers import Wav2Vec2FeatureExtractor

from test_export_clients import checkpoint
from test_whisper_data import fsdd, tone, write_fsdd
from zoo.cli.commands import call
from zoo.cli.transcribe import load_model
from zoo.convert.common import compose_config
from zoo.data.audio import SAMPLE_RATE, normalise_wave
from zoo.data.batches import IGNORE, AudioText, WaveText
from zoo.data.fsdd import FSDD, WORDS
from zoo.data.tokenizers import CharTokenizer
from zoo.models.ctc import greedy
from zoo.train.run import train

TINY = ["model.net.n_layers=1", "model.net.block.d_model=16", "model.net.block.n_heads=2",
        "model.net.block.d_ff=32", "model.net.embedder.conv_dim=[8,8,8]", "model.net.embedder.n_conv_pos=4",
        "model.net.embedder.conv_pos_groups=2"]


def fsdd_waves(root, **kwargs) -> FSDD:
    """FSDD (tests/test_whisper_data.py's generated files) served as a CTC model reads it."""
    dm = FSDD(str(root), str(root / "cache"), **{"batch_size": 4, "train_batches": 5, "val_takes": 2,
                                                 "test_passes": 1, **kwargs})
    dm.serve(WaveText)
    dm.prepare_data()
    dm.setup()
    return dm


def test_normalise_wave_is_wav2vec2_feature_extractors():
    """Two utterances of other lengths and levels, padded in one batch: each normalised over its own
    samples, as Wav2Vec2FeatureExtractor(do_normalize=True) with an attention mask does."""
    g = torch.Generator().manual_seed(0)
    waves = [3.0 * torch.randn(37 * 11, generator=g) + 0.5, 0.01 * torch.randn(5 * 13, generator=g) - 0.2]
    ref = Wav2Vec2FeatureExtractor(do_normalize=True, return_attention_mask=True)(
        [w.numpy() for w in waves], sampling_rate=SAMPLE_RATE, padding=True, return_tensors="pt")
    for i, wave in enumerate(waves):
        out = normalise_wave(wave)
        torch.testing.assert_close(out, ref.input_values[i, : len(wave)], rtol=1e-5, atol=1e-5)
        assert abs(float(out.mean())) < 1e-5 and abs(float(out.std(unbiased=False)) - 1) < 1e-3  # eps 1e-7 under the root


def test_fsdd_yields_wave_batches_with_ctc_targets_when_served_them(tmp_path):
    write_fsdd(tmp_path)
    dm = fsdd(tmp_path)
    assert dm.batch_type is AudioText  # Whisper's, the default
    dm = fsdd_waves(tmp_path)
    batch = next(iter(dm.test_dataloader()))
    assert isinstance(batch, WaveText) and batch.waves.shape == batch.wave_padding.shape
    for i, ref in enumerate(batch.references):
        wave = dm.splits["test"][i].load()
        n = len(wave)
        assert batch.wave_padding[i].sum() == n and not batch.wave_padding[i, n:].any()
        torch.testing.assert_close(batch.waves[i, :n], normalise_wave(wave))
        assert (batch.waves[i, n:] == 0).all()
        ids = batch.labels[i][batch.labels[i] != IGNORE].tolist()
        assert dm.tokenizer.decode(ids) == ref and len(ids) == len(ref)  # one id a character, no start / end
        assert dm.dims["pad_id"] not in ids  # the pad id is CTC's blank


def test_log_mel_settings_with_wave_batches_are_refused(tmp_path):
    write_fsdd(tmp_path)
    with pytest.raises(ValueError, match="reads raw audio .*data.pad_audio=false data.spec_augment=null"):
        fsdd_waves(tmp_path, spec_augment={"freq_mask": 8})


def test_greedy_ctc_collapses_repeats_and_drops_blanks():
    best = torch.tensor([[0, 3, 3, 0, 3, 4, 4, 0, 5], [4, 4, 0, 0, 5, 5, 3, 3, 3]])
    logits = torch.nn.functional.one_hot(best, 6).float()
    padding = torch.ones(2, 9, dtype=torch.bool)
    padding[1, 6:] = False
    assert greedy(logits, padding, blank=0) == [[3, 3, 4, 5], [4, 5]]


def test_train_then_transcribe(tmp_path, capsys):
    """`model=wav2vec2 data=fsdd` trains from the data's WaveText batches (the start-up pairing picks
    them); `zoo transcribe` reads the checkpoint it wrote as a CTC model."""
    write_fsdd(tmp_path, speakers=("alice",), takes=range(8))
    cfg = compose_config([
        "model=wav2vec2", "data=fsdd", "trainer=cpu", f"paths.data_dir={tmp_path}",
        f"paths.cache_dir={tmp_path}/cache", f"paths.output_dir={tmp_path}/out", *TINY, "data.batch_size=4",
        "data.val_takes=2", "data.test_passes=1", "trainer.max_steps=3", "trainer.val_check_interval=3",
        "trainer.limit_val_batches=1", "+trainer.limit_test_batches=1"])
    metrics = train(cfg)
    for name in ("train/loss", "val/loss", "val/wer", "val/cer", "test/wer", "test/cer"):
        assert name in metrics and metrics[name] >= 0
    clip = tmp_path / "clip.wav"
    soundfile.write(clip, tone(3, 1.0, 44100), 44100)
    capsys.readouterr()
    call("transcribe", [f"ckpt={tmp_path / 'out' / 'checkpoints' / 'last.ckpt'}", f"audio={clip}"])
    path, text = capsys.readouterr().out.rstrip("\n").split("\t")
    assert path == str(clip) and set(text) <= set("".join(WORDS) + " ")


@pytest.fixture(scope="module")
def ctc_ckpt(tmp_path_factory):
    """A CTC checkpoint built as train.py builds it, its weights randomised (its transcripts are not
    empty)."""
    tok = CharTokenizer.from_text(" ".join(WORDS), specials=("<pad>", "<s>", "</s>"))
    path = tmp_path_factory.mktemp("ctc") / "ctc.ckpt"
    checkpoint(path, "wav2vec2", {"vocab_size": tok.vocab_size, "pad_id": 0}, *TINY, tokenizer=tok)
    return path


def test_transcribe_reads_a_file_as_the_run_reads_its_batch(tmp_path, capsys, ctc_ckpt):
    """The transcript of a test utterance's file is the objective's greedy transcript of that utterance
    in a WaveText batch (normalised the same way), and not empty. The batch's longest row: the first
    conv's GroupNorm (wav2vec 2.0 base's) also reads a shorter row's padding, as Hugging Face's does."""
    write_fsdd(tmp_path)
    dm = fsdd_waves(tmp_path)
    batch = next(iter(dm.test_dataloader()))
    model = load_model(str(ctc_ckpt))
    with torch.no_grad():
        expected = model.transcribe(batch.waves, batch.wave_padding)
    assert any(expected)
    i = int(batch.wave_padding.sum(-1).argmax())
    clip = tmp_path / "utterance.wav"
    soundfile.write(clip, dm.splits["test"][i].load().numpy(), SAMPLE_RATE, subtype="FLOAT")
    capsys.readouterr()
    call("transcribe", [f"ckpt={ctc_ckpt}", f"audio={clip}"])
    assert capsys.readouterr().out.rstrip("\n").split("\t")[1] == expected[i]


def test_long_short_and_beam_for_ctc(tmp_path, capsys, caplog, ctc_ckpt):
    model = load_model(str(ctc_ckpt))
    embedder = model.net.embedder
    window, least = embedder.samples_for(model.net.context), embedder.samples_for(1)  # 30 s, 165 samples
    wave = (0.1 * np.sin(np.arange(window + 7) / 7.0)).astype(np.float32)
    soundfile.write(tmp_path / "long.wav", wave, SAMPLE_RATE, subtype="FLOAT")
    with caplog.at_level(logging.WARNING):
        call("transcribe", [f"ckpt={ctc_ckpt}", f"audio={tmp_path / 'long.wav'}"])
    assert "in 2 windows" in caplog.text
    soundfile.write(tmp_path / "short.wav", wave[: least - 1], SAMPLE_RATE, subtype="FLOAT")
    with pytest.raises(ValueError, match=f"is {least - 1} samples long .* at least {least} .*one conv vector"):
        call("transcribe", [f"ckpt={ctc_ckpt}", f"audio={tmp_path / 'short.wav'}"])
    soundfile.write(tmp_path / "ok.wav", wave[:least], SAMPLE_RATE, subtype="FLOAT")
    call("transcribe", [f"ckpt={ctc_ckpt}", f"audio={tmp_path / 'ok.wav'}"])
    with pytest.raises(ValueError, match="beam=true: .* is a CTC checkpoint, decoded greedily"):
        call("transcribe", [f"ckpt={ctc_ckpt}", f"audio={tmp_path / 'ok.wav'}", "beam=true"])
