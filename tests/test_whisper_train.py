"""End to end: `train.py model=whisper data=fsdd` on generated FSDD files, then
`python -m zoo transcribe` from the checkpoint it wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import soundfile
from omegaconf import open_dict

from test_whisper_data import tone, write_fsdd
from zoo.convert.common import compose_config
from zoo.train.run import build, train

ROOT = Path(__file__).resolve().parents[1]


def config(tmp_path, *overrides):
    cfg = compose_config([
        "model=whisper", "data=fsdd", "trainer=cpu", f"paths.data_dir={tmp_path}", f"paths.cache_dir={tmp_path}/cache",
        f"paths.output_dir={tmp_path}/out", "model.net.block.d_model=32", "model.net.block.n_heads=2",
        "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", "model.decoding.max_new_tokens=8",
        "model.decoding.beam_size=2", "data.batch_size=4", "data.num_workers=0", "data.val_takes=2",
        "data.test_passes=1", "trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.limit_val_batches=1",
        "+trainer.limit_test_batches=1",
        *overrides,
    ])
    return cfg


def test_train_then_transcribe(tmp_path):
    write_fsdd(tmp_path, speakers=("alice",), takes=range(8))
    metrics = train(config(tmp_path, "data.tokenizer=bpe", "data.bpe_vocab_size=60",
                           "+data.spec_augment={freq_mask: 8, time_mask: 5}"))
    for name in ("train/loss", "val/loss", "val/wer", "val/cer", "test/wer", "test/cer", "test/wer_beam"):
        assert name in metrics and metrics[name] >= 0
    ckpt = tmp_path / "out" / "checkpoints" / "last.ckpt"
    clip = tmp_path / "clip.wav"
    soundfile.write(clip, tone(3, 1.0, 44100), 44100)
    out = subprocess.run([sys.executable, "-m", "zoo", "transcribe", f"ckpt={ckpt}", f"audio={clip}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    path, text = out.stdout.rstrip("\n").split("\t")
    assert path == str(clip) and set(text.split()) <= {"zero", "one", "two", "three", "four", "five", "six",
                                                       "seven", "eight", "nine"}
    examples = (tmp_path / "out" / "examples.txt").read_text()  # transcripts next to their references
    assert "reference:" in examples and "greedy:" in examples and "beam:" in examples
    from zoo.cli.commands import call

    call("attention-maps", [f"ckpt={ckpt}", f"audio={clip}", f"out={tmp_path / 'att'}"])
    assert (tmp_path / "att" / "alignment.png").is_file() and (tmp_path / "att" / "cross_layer00.png").is_file()
    with pytest.raises(ValueError, match="audio input .* but text input was given"):
        call("attention-maps", [f"ckpt={ckpt}", "text=hello"])


def test_whisper_on_text_data_fails_naming_both(tmp_path):
    cfg = compose_config(["model=whisper", "data=tinyshakespeare", f"paths.data_dir={tmp_path}"])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path)
    with pytest.raises(ValueError, match="reads AudioText batches, but data=.*yields TokenWindows or PaddedTokens"):
        build(cfg)
