"""Transcribe audio files with a trained speech-recognition checkpoint.

    python -m zoo.cli.transcribe ckpt=outputs/train/<run>/checkpoints/best-step=3000.ckpt audio=clip.wav
    python -m zoo.cli.transcribe ckpt=... audio=[a.wav,b.flac] beam=true

Any sample rate is resampled to 16 kHz. Audio longer than the encoder holds (30 s for
Whisper's shape) is transcribed in consecutive windows, with a warning, and the pieces
are joined.
"""

from __future__ import annotations

import logging
import sys

import torch
from omegaconf import OmegaConf

from zoo.data.audio import HOP_LENGTH, SAMPLE_RATE, LogMel, load_audio
from zoo.train.checkpoint import load
from zoo.objectives.asr import SpeechRecognition

log = logging.getLogger(__name__)


def load_model(ckpt: str, device: str = "cpu") -> SpeechRecognition:
    model: SpeechRecognition = load(ckpt, device, accepts=("asr",), command="zoo.cli.transcribe")
    if model.tokenizer is None or model.bos_id is None or model.eos_id is None:
        raise ValueError(f"{ckpt} holds no tokenizer or start / end tokens: it cannot transcribe")
    return model


@torch.no_grad()
def transcribe(model: SpeechRecognition, path: str, beam: bool = False) -> str:
    """The transcript of one audio file."""
    wave = load_audio(path)
    window = model.net.encoder_embedder.max_len * 2 * HOP_LENGTH  # samples the encoder's positions hold
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


def main(argv: list[str]) -> None:
    args = OmegaConf.from_cli(argv)
    if "ckpt" not in args or "audio" not in args:
        raise SystemExit("usage: python -m zoo.cli.transcribe ckpt=PATH audio=FILE|[FILE,...] [beam=true] [device=cpu]")
    model = load_model(args.ckpt, args.get("device", "cpu"))
    files = [args.audio] if isinstance(args.audio, str) else list(args.audio)
    for path in files:
        print(f"{path}\t{transcribe(model, path, bool(args.get('beam', False)))}")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    main(sys.argv[1:])
