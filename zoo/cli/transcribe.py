"""Transcribe audio files with a trained speech-recognition checkpoint.

    python -m zoo transcribe ckpt=outputs/train/<run>/checkpoints/best-step=3000.ckpt audio=clip.wav
    python -m zoo transcribe ckpt=... audio=[a.wav,b.flac] beam=true

Any sample rate is resampled to 16 kHz. Audio longer than the encoder holds (30 s for
Whisper's shape) is transcribed in consecutive windows of equal length, with a warning, and
the pieces are joined; a file longer than ``max_seconds`` is refused before it is read. Each
window is read as the run read its audio: zero-padded to the encoder's window (a
``data.pad_audio`` run, Whisper's convention) or as it is (then a file needs at least
:data:`~zoo.data.audio.MIN_SAMPLES` samples, one log-mel frame's worth: shorter is refused).
"""

from __future__ import annotations

import logging

import soundfile
import torch
from omegaconf import DictConfig, ListConfig

from zoo.data.audio import HOP_LENGTH, MIN_SAMPLES, SAMPLE_RATE, BadAudioError, LogMel, load_audio
from zoo.objectives.loading import load
from zoo.objectives.asr import SpeechRecognition

log = logging.getLogger(__name__)


def load_model(ckpt: str, device: str = "cpu") -> SpeechRecognition:
    model: SpeechRecognition = load(ckpt, device, accepts=("asr",), command="zoo transcribe")
    if model.tokenizer is None or model.bos_id is None or model.eos_id is None:
        raise ValueError(f"{ckpt} holds no tokenizer or start / end tokens: it cannot transcribe")
    return model


def check_length(path: str, max_seconds: float) -> None:
    """Refuse ``path`` if it is longer than ``max_seconds``, from its header (before reading it)."""
    try:
        seconds = soundfile.info(str(path)).duration
    except Exception as err:  # soundfile raises several types; load_audio names them the same way
        raise BadAudioError(f"cannot read audio file {path}: {err}") from err
    if seconds > max_seconds:
        raise BadAudioError(f"{path} is {seconds:.1f} s long, longer than max_seconds={max_seconds:g}: "
                            f"cut it, or raise max_seconds=")


@torch.no_grad()
def transcribe(model: SpeechRecognition, path: str, beam: bool = False) -> str:
    """The transcript of one audio file: its windows' transcripts, joined by spaces."""
    wave = load_audio(path)
    window = model.net.towers["encoder"].embedder.max_frames * HOP_LENGTH  # samples the encoder holds
    padded = model.hparams.get("audio_window") is not None
    if not padded and len(wave) < MIN_SAMPLES:
        raise BadAudioError(f"{path} is {len(wave)} samples long at {SAMPLE_RATE} Hz: the model reads at least "
                            f"{MIN_SAMPLES} ({MIN_SAMPLES / SAMPLE_RATE * 1000:.1f} ms, one log-mel frame)")
    n = -(-len(wave) // window)
    if n > 1:
        log.warning("%s is longer than the encoder's %.1f s: transcribing it in %d windows", path,
                    window / SAMPLE_RATE, n)
    # n windows of equal length (each at least half of the encoder's): no short remainder at the end
    size = -(-len(wave) // n)
    log_mel = LogMel(window=window if padded else None).to(model.device)
    pieces = []
    for start in range(0, len(wave), size):
        features = log_mel(wave[start : start + size].to(model.device))[None]
        prompt = torch.tensor([[model.bos_id]], device=model.device)
        pieces.append(model.tokenizer.decode(model.decode(features, prompt, beam=beam)[0]))
    return " ".join(p for p in pieces if p)


def main(cfg: DictConfig) -> None:
    """Print ``FILE<tab>transcript`` for each file of ``audio`` (conf/transcribe.yaml)."""
    model = load_model(cfg.ckpt, cfg.device)
    files = list(cfg.audio) if isinstance(cfg.audio, ListConfig) else [cfg.audio]
    for path in files:
        check_length(str(path), cfg.max_seconds)
    for path in files:
        print(f"{path}\t{transcribe(model, str(path), cfg.beam)}")
