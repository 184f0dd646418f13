"""Transcribe audio files with a trained speech-recognition checkpoint.

    python -m zoo transcribe ckpt=outputs/train/<run>/checkpoints/best-step=3000.ckpt audio=clip.wav
    python -m zoo transcribe ckpt=... audio=[a.wav,b.flac] beam=true

The checkpoint's objective says how it reads: a sequence-to-sequence one (Whisper) decodes
log-mel features with its decoder (greedy, or beam search with ``beam=true``); a CTC one
(wav2vec 2.0, HuBERT) reads the normalised raw waveform and decodes its per-vector logits
greedily (repeats collapsed, blanks dropped; ``beam=true`` is refused).

Any sample rate is resampled to 16 kHz. Audio longer than the encoder holds (30 s for
Whisper's shape; ``model.net.context`` vectors for a CTC model) is transcribed in consecutive
windows of equal length, with a warning, and the pieces are joined; a file longer than
``max_seconds`` is refused before it is read. Each window is read as the run read its audio:
log-mel features zero-padded to the encoder's window (a ``data.pad_audio`` run, Whisper's
convention) or of the window as it is (then a file needs at least
:data:`~zoo.data.audio.MIN_SAMPLES` samples, one log-mel frame's worth), or the window's waveform
normalised (it needs the samples of one vector of the conv front end). Shorter is refused.
"""

from __future__ import annotations

import logging

import soundfile
import torch
from omegaconf import DictConfig, ListConfig

from zoo.data.audio import HOP_LENGTH, MIN_SAMPLES, SAMPLE_RATE, BadAudioError, LogMel, load_audio, normalise_wave
from zoo.objectives.asr import SpeechRecognition
from zoo.objectives.ctc import CTCRecognition
from zoo.objectives.loading import load

log = logging.getLogger(__name__)


def load_model(ckpt: str, device: str = "cpu") -> SpeechRecognition | CTCRecognition:
    model = load(ckpt, device, accepts=("asr", "ctc"), command="zoo transcribe")
    ends = () if isinstance(model, CTCRecognition) else (model.bos_id, model.eos_id)  # CTC has no start / end
    if model.tokenizer is None or None in ends:
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
def transcribe(model: SpeechRecognition | CTCRecognition, path: str, beam: bool = False) -> str:
    """The transcript of one audio file: its windows' transcripts, joined by spaces."""
    wave = load_audio(path)
    if isinstance(model, CTCRecognition):
        embedder = model.net.embedder
        window, least, unit = embedder.samples_for(model.net.context), embedder.samples_for(1), "one conv vector"

        def read(piece: torch.Tensor) -> str:
            return model.transcribe(normalise_wave(piece)[None])[0]
    else:
        window = model.net.towers["encoder"].embedder.max_frames * HOP_LENGTH  # samples the encoder holds
        padded = model.hparams.get("audio_window") is not None
        least, unit = 0 if padded else MIN_SAMPLES, "one log-mel frame"
        log_mel = LogMel(window=window if padded else None).to(model.device)

        def read(piece: torch.Tensor) -> str:
            prompt = torch.tensor([[model.bos_id]], device=model.device)
            return model.tokenizer.decode(model.decode(log_mel(piece)[None], prompt, beam=beam)[0])
    if len(wave) < least:
        raise BadAudioError(f"{path} is {len(wave)} samples long at {SAMPLE_RATE} Hz: the model reads at least "
                            f"{least} ({least / SAMPLE_RATE * 1000:.1f} ms, {unit})")
    n = -(-len(wave) // window)
    if n > 1:
        log.warning("%s is longer than the encoder's %.1f s: transcribing it in %d windows", path,
                    window / SAMPLE_RATE, n)
    # n windows of equal length (each at least half of the encoder's): no short remainder at the end
    size = -(-len(wave) // n)
    pieces = [read(wave[start : start + size].to(model.device)) for start in range(0, len(wave), size)]
    return " ".join(p for p in pieces if p)


def main(cfg: DictConfig) -> None:
    """Print ``FILE<tab>transcript`` for each file of ``audio`` (conf/transcribe.yaml)."""
    model = load_model(cfg.ckpt, cfg.device)
    if cfg.beam and isinstance(model, CTCRecognition):
        raise ValueError(f"beam=true: {cfg.ckpt} is a CTC checkpoint, decoded greedily (repeats collapsed, "
                         f"blanks dropped): leave beam= out")
    files = list(cfg.audio) if isinstance(cfg.audio, ListConfig) else [cfg.audio]
    for path in files:
        check_length(str(path), cfg.max_seconds)
    for path in files:
        print(f"{path}\t{transcribe(model, str(path), cfg.beam)}")
