"""Transcribe audio files with a trained speech-recognition checkpoint.

    python -m zoo transcribe ckpt=outputs/train/<run>/checkpoints/best-step=3000.ckpt audio=clip.wav
    python -m zoo transcribe ckpt=... audio=[a.wav,b.flac] beam=true

Any sample rate is resampled to 16 kHz. Audio longer than the encoder holds (30 s for
Whisper's shape) is transcribed in consecutive windows, with a warning, and the pieces
are joined.
"""

from __future__ import annotations

import logging

import torch
from omegaconf import DictConfig, ListConfig

from zoo.data.audio import HOP_LENGTH, SAMPLE_RATE, LogMel, load_audio
from zoo.train.checkpoint import load
from zoo.objectives.asr import SpeechRecognition

log = logging.getLogger(__name__)


def load_model(ckpt: str, device: str = "cpu") -> SpeechRecognition:
    model: SpeechRecognition = load(ckpt, device, accepts=("asr",), command="zoo transcribe")
    if model.tokenizer is None or model.bos_id is None or model.eos_id is None:
        raise ValueError(f"{ckpt} holds no tokenizer or start / end tokens: it cannot transcribe")
    return model


@torch.no_grad()
def transcribe(model: SpeechRecognition, path: str, beam: bool = False) -> str:
    """The transcript of one audio file."""
    wave = load_audio(path)
    window = model.net.towers["encoder"].embedder.max_frames * HOP_LENGTH  # samples the encoder holds
    if len(wave) > window:
        log.warning("%s is longer than the encoder's %.1f s: transcribing it in %d windows", path,
                    window / SAMPLE_RATE, -(-len(wave) // window))
    pieces = []
    log_mel = LogMel().to(model.device)
    for start in range(0, len(wave), window):
        features = log_mel(wave[start : start + window].to(model.device))[None]
        prompt = torch.tensor([[model.bos_id]], device=model.device)
        pieces.append(model.tokenizer.decode(model.decode(features, prompt, beam=beam)[0]))
    return " ".join(p for p in pieces if p)


def main(cfg: DictConfig) -> None:
    """Print ``FILE<tab>transcript`` for each file of ``audio`` (conf/transcribe.yaml)."""
    model = load_model(cfg.ckpt, cfg.device)
    files = list(cfg.audio) if isinstance(cfg.audio, ListConfig) else [cfg.audio]
    for path in files:
        print(f"{path}\t{transcribe(model, str(path), cfg.beam)}")
