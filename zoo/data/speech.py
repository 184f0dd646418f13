"""What every speech-recognition data module shares: (waveform, transcript) examples ->
the model's input + token ids, padded into the batch kind the model reads: Whisper's log-mel
features with start / end tokens (:class:`AudioText`, with SpecAugment), or the normalised raw
waveform with CTC targets (:class:`WaveText`: wav2vec 2.0, HuBERT); the transcript tokenizer,
and the handling of bad or too-long audio.

A subclass says where its examples come from (:meth:`SpeechDataModule.make_splits`);
everything after the waveform is here, so that every corpus is cut the same way.
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import torch
import torchaudio
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

from zoo.data.audio import N_MELS, SAMPLE_RATE, BadAudioError, LogMel, load_audio, normalise_wave
from zoo.data.base import ZooDataModule
from zoo.data.batches import IGNORE, AudioText, WaveText
from zoo.data.tokenizers import CharTokenizer, HFTokenizer, train_bpe
from zoo.nn.embedders import AudioEmbedder

log = logging.getLogger(__name__)

SPECIALS = ("<pad>", "<s>", "</s>")
BPE_SPECIALS = (*SPECIALS, "<unk>")  # the BPE model needs an unknown token
# A checkpoint's tokenizer (data.tokenizer_from) names them its own way: the zoo's, then Whisper's.
# Whisper pads with its end of text (padding is never a target, so the two cannot be confused).
START, END = ("<s>", "<|startoftranscript|>"), ("</s>", "<|endoftext|>")
PAD = ("<pad>", *END)


@dataclass
class Example:
    """One utterance: ``load()`` gives its 16 kHz waveform (T,); ``name`` names it in errors."""

    load: Callable[[], Tensor]
    text: str
    name: str


def file_example(path: Path, text: str) -> Example:
    """An utterance stored in one audio file (read with soundfile, resampled to 16 kHz)."""
    return Example(lambda: load_audio(path), text, str(path))


def random_split(examples: list[Example], val_fraction: float, test_fraction: float,
                 seed: int) -> dict[str, list[Example]]:
    """Train / val / test parts of a corpus that has no official split (seeded, so reproducible): a
    positive fraction holds out at least one example (a fraction 0: none, the split comes from elsewhere)."""
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    n_val, n_test = (max(1, round(f * len(order))) if f > 0 else 0 for f in (val_fraction, test_fraction))
    pick = lambda idx: [examples[i] for i in sorted(idx)]  # noqa: E731
    return {"val": pick(order[:n_val]), "test": pick(order[n_val : n_val + n_test]),
            "train": pick(order[n_val + n_test :])}


def fetch(make_dataset: Callable[[], object], url: str, where: Path) -> None:
    """Download a corpus through its torchaudio dataset class; offline, fail naming the URL and the folder."""
    try:
        make_dataset()
    except Exception as err:
        raise RuntimeError(f"could not download {url} ({err}). Without a network, put the dataset in its "
                           f"official layout at {where} (or point ZOO_DATA_DIR / paths.data_dir at a folder "
                           f"that holds it).") from err


class SpecAugment(nn.Module):
    """SpecAugment's masking (Park et al. 2019) on log-mel features (80, F): ``n_freq_masks``
    bands of up to ``freq_mask`` mel bins and ``n_time_masks`` spans of up to ``time_mask``
    frames are set to 0 (about the mean of Whisper's scaled features)."""

    def __init__(self, freq_mask: int = 15, time_mask: int = 20, n_freq_masks: int = 2, n_time_masks: int = 2):
        super().__init__()
        self.masks = nn.ModuleList(
            [torchaudio.transforms.FrequencyMasking(freq_mask) for _ in range(n_freq_masks)]
            + [torchaudio.transforms.TimeMasking(time_mask) for _ in range(n_time_masks)]
        )

    def forward(self, features: Tensor) -> Tensor:
        for mask in self.masks:
            features = mask(features, mask_value=0.0)
        return features


class SpeechExamples(Dataset):
    """Item i -> (the model's input, token ids, transcript), or None for a bad file when
    ``skip_bad_files`` (the collate drops it, after a logged warning).

    ``inputs`` makes the model's input of the 16 kHz waveform (T,): by default the log-mel of the
    utterance's own frames (80, F); the data module passes Whisper's padded window and SpecAugment,
    or the normalised waveform (T,) of a raw-audio encoder. Audio longer than ``max_samples`` is
    cropped with a warning (``long_audio="crop"``) or refused (``"error"``), so it never overflows
    the encoder's positions.
    """

    def __init__(self, examples: Sequence[Example], tokenizer, max_samples: int, long_audio: str = "crop",
                 skip_bad_files: bool = False, inputs: Callable[[Tensor], Tensor] | None = None):
        if long_audio not in ("crop", "error"):
            raise ValueError(f"data.long_audio={long_audio!r}: expected 'crop' or 'error'")
        self.examples, self.tokenizer, self.max_samples = examples, tokenizer, max_samples
        self.long_audio, self.skip_bad_files = long_audio, skip_bad_files
        self.inputs = inputs or LogMel()

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor, str] | None:
        example = self.examples[i]
        try:
            wave = example.load()
        except BadAudioError as err:
            if not self.skip_bad_files:
                raise
            log.warning("skipping %s (data.skip_bad_files=true)", err)
            return None
        if len(wave) > self.max_samples:
            seconds = f"{len(wave) / SAMPLE_RATE:.1f} s"
            if self.long_audio == "error":
                raise BadAudioError(f"{example.name} is {seconds} long, longer than data.max_seconds "
                                    f"({self.max_samples / SAMPLE_RATE:.1f} s)")
            log.warning("%s is %s long: cropped to data.max_seconds=%.1f", example.name, seconds,
                        self.max_samples / SAMPLE_RATE)
            wave = wave[: self.max_samples]
        return self.inputs(wave), torch.tensor(self.tokenizer.encode(example.text), dtype=torch.long), example.text


def collate(items: list[tuple[Tensor, Tensor, str] | None], bos_id: int, eos_id: int, pad_id: int) -> AudioText:
    """Pad a list of examples into an :class:`AudioText` batch:

    source (B, 80, F) log-mel, padded with each utterance's silence level; source_padding
    (B, S) True at real encoder positions (S = the audio embedder's output length);
    target_in (B, T) = <s> + ids, target_out (B, T) = ids + </s> (IGNORE at padding);
    references: the transcripts.
    """
    items = [item for item in items if item is not None]
    if not items:
        raise BadAudioError("every audio file of this batch was bad and skipped")
    features, ids, texts = zip(*items)
    frames = torch.tensor([f.shape[-1] for f in features])
    width = int(frames.max())
    source = torch.stack([nn.functional.pad(f, (0, width - f.shape[-1]), value=float(f.min())) for f in features])
    source_padding = AudioEmbedder.output_padding(torch.arange(width)[None, :] < frames[:, None])
    bos, eos = torch.tensor([bos_id]), torch.tensor([eos_id])
    target_in = pad_sequence([torch.cat([bos, t]) for t in ids], batch_first=True, padding_value=pad_id)
    target_out = pad_sequence([torch.cat([t, eos]) for t in ids], batch_first=True, padding_value=IGNORE)
    return AudioText(source, source_padding, target_in, target_out, list(texts))


def collate_waves(items: list[tuple[Tensor, Tensor, str] | None]) -> WaveText:
    """Pad a list of examples into a :class:`WaveText` batch: waves (B, T) normalised samples,
    zero-padded; wave_padding (B, T) True at real samples; labels (B, S) the transcripts' ids,
    IGNORE at padding (CTC's targets: no start or end token); references: the transcripts."""
    items = [item for item in items if item is not None]
    if not items:
        raise BadAudioError("every audio file of this batch was bad and skipped")
    waves, ids, texts = zip(*items)
    lengths = torch.tensor([len(w) for w in waves])
    wave_padding = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]
    return WaveText(pad_sequence(list(waves), batch_first=True), wave_padding,
                    pad_sequence(list(ids), batch_first=True, padding_value=IGNORE), list(texts))


class SpeechDataModule(ZooDataModule):
    """Base of the speech-recognition data modules: :class:`AudioText` batches (log-mel features,
    Whisper) or :class:`WaveText` batches (normalised raw audio and CTC targets, wav2vec 2.0), as
    the model reads (:meth:`serve`).

    Args (besides :class:`ZooDataModule`'s):
        tokenizer: ``char`` (one token per character of the transcripts) or ``bpe`` (a BPE
            of ``bpe_vocab_size`` trained on the training transcripts, cached under
            ``cache_dir``); both travel inside checkpoints.
        max_seconds: the longest audio kept; longer audio is handled as ``long_audio`` says
            (``crop`` with a warning, or ``error``). Whisper's encoder holds 30 s.
        pad_audio: zero-pad every utterance to ``max_seconds`` before its log-mel, as Whisper
            does (then ``max_seconds`` must be the encoder's window; the model checks it): an
            export's ASR pipeline (``WhisperFeatureExtractor``) then reads what the run read.
        skip_bad_files: skip unreadable / empty files with a logged warning instead of
            stopping with an error that names the file.
        spec_augment: SpecAugment settings for the training split's log-mel features (None = off).
        lowercase: lower-case the transcripts (LibriSpeech and LJSpeech are upper / mixed case).
        tokenizer_from: fine-tuning: the checkpoint the run starts from (a zoo ``.ckpt`` or a
            Hugging Face Whisper folder); its tokenizer replaces ``tokenizer``, so the ids mean
            what the weights learnt. Its start / end / pad tokens are found by name (:data:`START`,
            :data:`END`, :data:`PAD`). Whisper's language and task tokens are not placed: a fine-tuned
            model learns transcripts as start, text, end.
    """

    yields = (AudioText, WaveText)

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, tokenizer: str = "char",
                 bpe_vocab_size: int = 256, max_seconds: float = 30.0, long_audio: str = "crop",
                 pad_audio: bool = False,
                 skip_bad_files: bool = False, spec_augment: dict | None = None, lowercase: bool = True,
                 tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        if tokenizer not in ("char", "bpe"):
            raise ValueError(f"data.tokenizer={tokenizer!r}: expected 'char' or 'bpe'")
        self.tokenizer_kind, self.bpe_vocab_size = tokenizer, bpe_vocab_size
        self.max_samples = int(max_seconds * SAMPLE_RATE)
        self.long_audio, self.skip_bad_files, self.lowercase = long_audio, skip_bad_files, lowercase
        self.pad_audio = pad_audio
        self.spec_augment = spec_augment
        self.splits: dict[str, Sequence[Example]] = {}

    # --- what a corpus provides -------------------------------------------------------
    def make_splits(self) -> dict[str, Sequence[Example]]:
        """{"train": ..., "val": ..., "test": ...} examples of this corpus."""
        raise NotImplementedError

    def tokenizer_texts(self) -> list[str]:
        """The transcripts the tokenizer is built from (by default: every training example's)."""
        return [e.text for e in self.splits["train"]]

    # --- shared ---------------------------------------------------------------------------
    def normalise(self, text: str) -> str:
        text = " ".join(text.split())
        return text.lower() if self.lowercase else text

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        if self.batch_type is WaveText and (self.pad_audio or self.spec_augment):
            raise ValueError("data.pad_audio and data.spec_augment act on log-mel features, but this model reads "
                             "raw audio (WaveText): set data.pad_audio=false data.spec_augment=null")
        self.splits = self.make_splits()
        empty = [name for name, examples in self.splits.items() if len(examples) == 0]
        if empty:
            raise ValueError(f"{type(self).__name__}: no examples in split(s) {empty} under {self.data_dir}")
        self.tokenizer = self.tokenizer_or(self._own_tokenizer)
        # The own tokenizers hold SPECIALS, the first names of each role.
        pad, bos, eos = (self.tokenizer.token_id(self.role_token(names, role))
                         for names, role in ((PAD, "padding"), (START, "start-of-transcript"), (END, "end-of-text")))
        self.dims = {"vocab_size": self.tokenizer.vocab_size, "n_mels": N_MELS, "pad_id": pad, "bos_id": bos,
                     "eos_id": eos, "audio_window": self.max_samples if self.pad_audio else None}

    def _own_tokenizer(self) -> CharTokenizer | HFTokenizer:
        """The transcript tokenizer built from this corpus as ``tokenizer`` says."""
        texts = self.tokenizer_texts()
        if self.tokenizer_kind == "char":  # the alphabet of every split, so that no character is unknown
            alphabet = "".join(texts) + "".join(e.text for examples in self.splits.values() for e in examples)
            return CharTokenizer.from_text(alphabet, specials=SPECIALS)
        digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:12]
        cache = self.cache_dir / "speech" / f"{type(self).__name__.lower()}-bpe{self.bpe_vocab_size}-{digest}.json"
        return train_bpe(texts, self.bpe_vocab_size, cache, BPE_SPECIALS)

    def dataset(self, split: str) -> SpeechExamples:
        if self.batch_type is WaveText:
            inputs = normalise_wave
        else:
            inputs = LogMel(window=self.max_samples if self.pad_audio else None)
            if split == "train" and self.spec_augment:
                inputs = nn.Sequential(inputs, SpecAugment(**self.spec_augment))
        return SpeechExamples(self.splits[split], self.tokenizer, self.max_samples, self.long_audio,
                              self.skip_bad_files, inputs)

    def collate_fn(self) -> Callable:
        if self.batch_type is WaveText:
            return collate_waves
        return partial(collate, bos_id=self.dims["bos_id"], eos_id=self.dims["eos_id"], pad_id=self.dims["pad_id"])
