"""``zoo transcribe`` on a file of any length (issue 27, item 15): from 1 sample up, a file
transcribes or is refused in one line naming the limit; a file over the encoder's window by a
few samples (30 s + 1 .. 199) is read in two equal windows, not crashed on a remainder too short
for a log-mel frame; a file over ``max_seconds`` is refused before it is read. Both input
conventions: a run's own frames (``audio_window`` None) and Whisper's padded window."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from test_export_clients import checkpoint
from zoo.cli.commands import call
from zoo.data.audio import MIN_SAMPLES, SAMPLE_RATE
from zoo.data.tokenizers import CharTokenizer

WINDOW = 30 * SAMPLE_RATE  # Whisper's encoder: 1500 positions = 3000 frames = 30 s
TINY = ["model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", "model.net.block.d_model=16",
        "model.net.block.n_heads=2", "model.net.block.d_ff=32", "model.net.encoder_embedder.n_mels=80",
        "model.net.context=16", "model.decoding.max_new_tokens=3"]


@pytest.fixture(scope="module", params=[None, WINDOW], ids=["own-frames", "padded-window"])
def ckpt(request, tmp_path_factory):
    tok = CharTokenizer.from_text("one two three", specials=("<pad>", "<s>", "</s>"))
    path = tmp_path_factory.mktemp("ckpt") / "asr.ckpt"
    dims = {"vocab_size": tok.vocab_size, "n_mels": 80, "pad_id": 0, "bos_id": 1, "eos_id": 2,
            "audio_window": request.param}
    checkpoint(path, "whisper", dims, *TINY, tokenizer=tok)
    return path, request.param


def _wav(path, n: int):
    soundfile.write(path, (0.1 * np.sin(np.arange(n) / 7.0)).astype(np.float32), SAMPLE_RATE)
    return path


@pytest.mark.parametrize("n", [1, 2, 199, MIN_SAMPLES, SAMPLE_RATE, WINDOW + 1, WINDOW + 199])
def test_every_length_transcribes_or_is_refused_naming_the_limit(tmp_path, capsys, ckpt, n):
    path, window = ckpt
    wav = _wav(tmp_path / "x.wav", n)
    capsys.readouterr()
    if window is None and n < MIN_SAMPLES:  # a run that read its own frames needs one frame
        with pytest.raises(ValueError, match=f"{wav} is {n} samples long .* at least {MIN_SAMPLES}"):
            call("transcribe", [f"ckpt={path}", f"audio={wav}"])
        return
    call("transcribe", [f"ckpt={path}", f"audio={wav}"])
    name, text = capsys.readouterr().out.rstrip("\n").split("\t")
    assert name == str(wav) and set(text) <= set("one two three")


def test_a_file_over_max_seconds_is_refused_before_it_is_read(tmp_path, ckpt):
    path, _ = ckpt
    wav = _wav(tmp_path / "x.wav", 3 * SAMPLE_RATE + 1)
    with pytest.raises(ValueError, match=r"x\.wav is 3\.0 s long, longer than max_seconds=3: "):
        call("transcribe", [f"ckpt={path}", f"audio={wav}", "max_seconds=3"])


@pytest.mark.parametrize("window,max_len,match", [
    (2 * SAMPLE_RATE, 1500, r"pads to data\.max_seconds=2 s, but the encoder holds 30 s .*"
                            r"max_seconds=30 or max_len=100"),
    (SAMPLE_RATE * 3 // 2, 75, r"max_seconds=1\.5 s: give a whole number of seconds")])
def test_a_padded_window_that_is_not_the_encoders_or_not_whole_seconds_is_refused(tmp_path, window, max_len, match):
    """``data.pad_audio`` pads to ``data.max_seconds``: Whisper's encoder (and Hugging Face's, which
    takes exactly its window) reads one window, and the export's feature extractor whole seconds."""
    tok = CharTokenizer.from_text("one", specials=("<pad>", "<s>", "</s>"))
    dims = {"vocab_size": tok.vocab_size, "n_mels": 80, "pad_id": 0, "bos_id": 1, "eos_id": 2, "audio_window": window}
    with pytest.raises(Exception, match=match):  # hydra's InstantiationException carries the model's ValueError
        checkpoint(tmp_path / "asr.ckpt", "whisper", dims, *TINY, f"model.net.encoder_embedder.max_len={max_len}",
                   tokenizer=tok)
