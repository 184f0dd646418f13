"""Audio in: reading a file into a 16 kHz waveform, Whisper's log-mel spectrogram, and the
waveform normalisation the raw-audio encoders read (wav2vec 2.0, HuBERT).

Reading goes through ``soundfile`` (WAV/FLAC without FFmpeg); resampling and the
mel filterbank through ``torchaudio``. The spectrogram is Whisper's exactly
(checked against ``transformers.WhisperFeatureExtractor`` in the tests).

Two input conventions: a run reads each utterance's own frames (``window=None``: no padding, the
encoder masks the batch's padding), or, as Whisper does, every utterance zero-padded to the
encoder's window of samples (``data.pad_audio=true``; ``WhisperFeatureExtractor`` with that
``chunk_length`` computes the same features, so an export's ASR pipeline reads what the run read).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import soundfile
import torch
import torchaudio
from torch import Tensor, nn

SAMPLE_RATE = 16_000  # Whisper's input rate
N_FFT = 400  # 25 ms windows
HOP_LENGTH = 160  # 10 ms hop: 100 frames per second
N_MELS = 80
MIN_SAMPLES = N_FFT // 2 + 1  # the centred spectrogram reflects n_fft / 2 samples at each end


@contextmanager
def one_thread() -> Iterator[None]:
    """Run small tensor ops (one file's resampling or spectrogram) on one thread: on a
    busy CPU, waking a thread pool for each costs far more than the op itself."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class BadAudioError(ValueError):
    """An audio file that cannot be used (unreadable, empty); the message names it."""


def resample(wave: Tensor, from_rate: int, to_rate: int = SAMPLE_RATE) -> Tensor:
    """(..., T) at ``from_rate`` -> (..., T') at ``to_rate`` (band-limited sinc interpolation)."""
    if from_rate == to_rate:
        return wave
    return torchaudio.functional.resample(wave, from_rate, to_rate)


def load_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """A mono float32 waveform (T,) at ``sample_rate``, whatever the file's own rate.

    Multi-channel audio is averaged to mono. An unreadable or empty file, or one whose samples are
    not finite or all one non-zero value (:func:`check_sound`), raises :class:`BadAudioError`
    naming it, so that bad data never reaches the model.
    """
    try:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except Exception as err:  # soundfile raises several types (LibsndfileError, RuntimeError, ...)
        raise BadAudioError(f"cannot read audio file {path}: {err}") from err
    if data.shape[0] == 0:
        raise BadAudioError(f"audio file {path} is empty (0 samples)")
    wave = torch.from_numpy(data).mean(dim=1)
    if not torch.isfinite(wave).all():
        raise BadAudioError(f"audio file {path} contains NaN or infinite samples")
    check_sound(wave, path)
    return resample(wave, rate, sample_rate)


def check_sound(wave: Tensor, path: str | Path) -> None:
    """Refuse (naming ``path``) a file whose samples all hold one non-zero value: no sound, and what
    NaN or infinite samples become in an integer-PCM file (``soundfile.write``'s default for WAV
    stores NaN and -inf as -1.0, +inf as the largest value), where the check of finite samples
    cannot see them. Digital silence (all zeros) is a recording of nothing and passes."""
    value = wave[0].item()
    if value != 0 and bool((wave == value).all()):
        raise BadAudioError(f"audio file {path} holds no sound: all {len(wave)} samples are {value:.6g} (NaN or "
                            f"infinite samples written as integer PCM are stored as full-scale values like this)")


def normalise_wave(wave: Tensor, eps: float = 1e-7) -> Tensor:
    """One utterance (T,) -> zero mean and unit variance, as ``Wav2Vec2FeatureExtractor`` with
    ``do_normalize`` computes it (population variance plus ``eps`` under the root): the input of
    every raw-audio encoder's run and transcription, normalised before any padding is added."""
    return (wave - wave.mean()) / torch.sqrt(wave.var(unbiased=False) + eps)


class LogMel(nn.Module):
    """Waveform (..., T) at 16 kHz -> Whisper's log-mel features (..., 80, T // 160).

    Power spectrogram (Hann window 400, hop 160, centred with reflect padding, last
    frame dropped as Whisper does), Slaney mel filterbank, log10, floor at the
    maximum minus 8 (80 dB of dynamic range, the maximum taken per utterance), then
    ``(x + 4) / 4`` to bring the values to about [-1, 1]. With a ``window`` (samples), the wave
    is first zero-padded at the end to that length (Whisper's convention): (..., 80, window // 160).
    """

    def __init__(self, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, hop_length: int = HOP_LENGTH,
                 n_mels: int = N_MELS, window: int | None = None):
        super().__init__()
        self.hop_length, self.window = hop_length, window
        self.mel = torchaudio.transforms.MelSpectrogram(
            sample_rate=sample_rate, n_fft=n_fft, hop_length=hop_length, n_mels=n_mels, power=2.0,
            norm="slaney", mel_scale="slaney", center=True, pad_mode="reflect",
        )

    def forward(self, wave: Tensor) -> Tensor:
        if self.window is not None:
            if wave.shape[-1] > self.window:
                raise ValueError(f"{wave.shape[-1]} samples do not fit the {self.window}-sample window")
            wave = nn.functional.pad(wave, (0, self.window - wave.shape[-1]))
        elif wave.shape[-1] < MIN_SAMPLES:
            raise BadAudioError(f"{wave.shape[-1]} samples are too few for a log-mel frame (at least {MIN_SAMPLES})")
        spec = self.mel(wave)[..., :-1]
        log_spec = spec.clamp(min=1e-10).log10()
        peak = log_spec.amax(dim=(-2, -1), keepdim=True)
        return (torch.maximum(log_spec, peak - 8.0) + 4.0) / 4.0

    def num_frames(self, num_samples: int) -> int:
        return (self.window or num_samples) // self.hop_length
