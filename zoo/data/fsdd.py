"""Free Spoken Digit Dataset (FSDD) as a sequence-recognition task: utterances of 1..N
digits spoken by one speaker, transcribed as digit words ("three seven one").

``${data_dir}/fsdd/recordings/{digit}_{speaker}_{take}.wav`` (the official repository's
layout: 6 speakers x 10 digits x 50 takes, 8 kHz), downloaded from the official
repository when missing. Official split: takes 0-4 are the test set, takes 5-49
training; takes ``5 .. 5 + val_takes - 1`` are held out of training for validation.
"""

from __future__ import annotations

import logging
import random
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from zoo.data.audio import SAMPLE_RATE, BadAudioError, load_audio, one_thread
from zoo.data.download import ensure_file
from zoo.data.speech import Example, SpeechDataModule

log = logging.getLogger(__name__)

VERSION = "1.0.10"
URL = f"https://github.com/Jakobovski/free-spoken-digit-dataset/archive/refs/tags/v{VERSION}.tar.gz"
WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
N_TEST_TAKES = 5  # takes 0-4: the official test set
FILE_NAME = re.compile(r"^(\d)_([A-Za-z]+)_(\d+)\.wav$")


@dataclass
class Recording:
    digit: int
    wave: Tensor  # (T,) at 16 kHz


def download(root: Path) -> None:
    """Fetch the official repository's release archive and unpack its recordings/ into ``root``."""
    try:
        archive = ensure_file(root / f"free-spoken-digit-dataset-{VERSION}.tar.gz", URL)
    except RuntimeError as err:
        raise RuntimeError(f"{err} Or put the repository's recordings/*.wav files in {root / 'recordings'}.") from err
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/recordings/" in m.name and m.name.endswith(".wav")]
        tar.extractall(root / "extract", members=members, filter="data")
    shutil.move(str(next((root / "extract").glob("*/recordings"))), root / "recordings")
    shutil.rmtree(root / "extract")


def read_recordings(folder: Path, skip_bad_files: bool) -> dict[str, dict[int, list[Recording]]]:
    """{speaker: {take: [recordings]}}, every file resampled to 16 kHz."""
    out: dict[str, dict[int, list[Recording]]] = {}
    for path in sorted(folder.glob("*.wav")):
        match = FILE_NAME.match(path.name)
        if match is None:
            log.warning("ignoring %s: not named {digit}_{speaker}_{take}.wav", path)
            continue
        try:
            with one_thread():
                wave = load_audio(path)
        except BadAudioError as err:
            if not skip_bad_files:
                raise
            log.warning("skipping %s (data.skip_bad_files=true)", err)
            continue
        digit, speaker, take = int(match[1]), match[2], int(match[3])
        out.setdefault(speaker, {}).setdefault(take, []).append(Recording(digit, wave))
    return out


class DigitSequences(Sequence[Example]):
    """Utterances made of 1..``max_digits`` recordings of one speaker, joined by silences
    of ``gap`` seconds (uniform in the range) and framed by up to ``gap[1]`` of silence.

    ``random_items=n``: item i is drawn afresh from (seed, i) alone (training: endless
    variety, the same batches when a run resumes); the ``bucket`` consecutive items
    i // bucket share one digit count, so that a batch of them pads little. Otherwise
    (``passes=k``): k passes over the recordings, each using every recording exactly
    once, cut into groups of random sizes (evaluation: every test recording is heard).
    """

    def __init__(self, recordings: dict[str, list[Recording]], max_digits: int, seed: int,
                 gap: tuple[float, float] = (0.05, 0.3), random_items: int | None = None, passes: int = 1,
                 gain: tuple[float, float] | None = None, bucket: int = 1):
        if max_digits < 1:
            raise ValueError(f"data.max_digits={max_digits}: must be at least 1")
        self.recordings = {s: r for s, r in recordings.items() if r}
        self.speakers = sorted(self.recordings)
        self.max_digits, self.seed, self.gap, self.gain = max_digits, seed, gap, gain
        self.random_items, self.bucket = random_items, bucket
        self.groups: list[tuple[str, list[int]]] = []
        if random_items is None:
            rng = random.Random(f"{seed}-groups")
            for _ in range(passes):
                for speaker in self.speakers:
                    order = list(range(len(self.recordings[speaker])))
                    rng.shuffle(order)
                    while order:
                        n = rng.randint(1, max_digits)
                        self.groups.append((speaker, order[:n]))
                        order = order[n:]

    def __len__(self) -> int:
        return self.random_items if self.random_items is not None else len(self.groups)

    def __getitem__(self, i: int) -> Example:
        if not 0 <= i < len(self):
            raise IndexError(i)
        rng = random.Random(f"{self.seed}-{i}")
        if self.random_items is not None:
            speaker = rng.choice(self.speakers)
            pool = self.recordings[speaker]
            n = random.Random(f"{self.seed}-bucket-{i // self.bucket}").randint(1, self.max_digits)
            group = [rng.randrange(len(pool)) for _ in range(n)]
        else:
            speaker, group = self.groups[i]
        chosen = [self.recordings[speaker][j] for j in group]
        gains = [rng.uniform(*self.gain) if self.gain else 1.0 for _ in chosen]
        silences = [rng.uniform(0.0, self.gap[1])] + [rng.uniform(*self.gap) for _ in chosen[1:]] + \
                   [rng.uniform(0.0, self.gap[1])]

        def load() -> Tensor:
            parts = [torch.zeros(int(silences[0] * SAMPLE_RATE))]
            for rec, g, s in zip(chosen, gains, silences[1:]):
                parts += [rec.wave * g, torch.zeros(int(s * SAMPLE_RATE))]
            return torch.cat(parts)

        text = " ".join(WORDS[r.digit] for r in chosen)
        return Example(load, text, f"fsdd {speaker} digits {text!r}")


class FSDD(SpeechDataModule):
    """Spoken digit sequences from FSDD (see the module docstring).

    Args (besides :class:`SpeechDataModule`'s):
        max_digits: the longest digit sequence in one utterance (1 = isolated digits).
        train_batches: training utterances = train_batches x batch_size (the whole run).
        val_takes: takes 5 .. 5 + val_takes - 1 are validation, the rest of 5-49 training.
        val_passes, test_passes: passes over the val / test recordings (each pass uses
            every recording once).
        gap: silence between two digits, seconds (min, max).
        gain: training only: each digit's loudness is scaled by a factor in this range.
        seed: makes the utterances (and so the test set) reproducible.
    """

    shuffle = False  # in order: consecutive training items form the length buckets (and are random already)

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, train_batches: int, max_digits: int = 4,
                 val_takes: int = 5, val_passes: int = 1, test_passes: int = 3,
                 gap: tuple[float, float] = (0.05, 0.3), gain: tuple[float, float] | None = (0.5, 1.5),
                 seed: int = 1337, download: bool = True, **kwargs):
        super().__init__(data_dir, cache_dir, batch_size, **kwargs)
        self.train_batches, self.max_digits, self.val_takes = train_batches, max_digits, val_takes
        self.val_passes, self.test_passes = val_passes, test_passes
        self.gap, self.gain, self.seed, self.download = tuple(gap), gain and tuple(gain), seed, download
        self.root = self.data_dir / "fsdd"

    def prepare_data(self) -> None:
        if not (self.root / "recordings").is_dir():
            if not self.download:
                raise FileNotFoundError(f"{self.root / 'recordings'} is missing (data.download=false)")
            download(self.root)

    def make_splits(self) -> dict[str, Sequence[Example]]:
        folder = self.root / "recordings"
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} is missing: run prepare_data() or put FSDD's recordings/ there")
        by_speaker = read_recordings(folder, self.skip_bad_files)

        def takes(lo: int, hi: int) -> dict[str, list[Recording]]:
            return {s: [r for t, rs in sorted(by_take.items()) if lo <= t < hi for r in rs]
                    for s, by_take in by_speaker.items()}

        first_train = N_TEST_TAKES + self.val_takes
        common = {"max_digits": self.max_digits, "gap": self.gap}
        return {
            "train": DigitSequences(takes(first_train, 10**9), seed=self.seed, gain=self.gain,
                                    random_items=self.train_batches * self.batch_size, bucket=self.batch_size,
                                    **common),
            "val": DigitSequences(takes(N_TEST_TAKES, first_train), seed=self.seed + 1, passes=self.val_passes,
                                  **common),
            "test": DigitSequences(takes(0, N_TEST_TAKES), seed=self.seed + 2, passes=self.test_passes, **common),
        }

    def tokenizer_texts(self) -> list[str]:
        return [" ".join(WORDS)]  # every transcript is made of these words
