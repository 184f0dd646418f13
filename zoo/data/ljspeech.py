"""LJSpeech 1.1: one speaker reading non-fiction, 13,100 clips (22.05 kHz in the official release).

``${data_dir}/LJSpeech-1.1/{metadata.csv,wavs/*.wav}`` (torchaudio ``LJSPEECH`` layout,
downloaded by it when missing); transcripts are metadata.csv's normalised column (numbers
spelled out). No official split: a seeded ``val_fraction`` / ``test_fraction`` is held out.
"""

from __future__ import annotations

import csv
from typing import Sequence

import torchaudio

from zoo.data.speech import Example, SpeechDataModule, fetch, file_example, random_split

URL = torchaudio.datasets.ljspeech._RELEASE_CONFIGS["release1"]["url"]


class LJSpeech(SpeechDataModule):
    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, val_fraction: float = 0.05,
                 test_fraction: float = 0.05, seed: int = 1337, download: bool = True, **kwargs):
        super().__init__(data_dir, cache_dir, batch_size, **kwargs)
        self.val_fraction, self.test_fraction, self.seed, self.download = val_fraction, test_fraction, seed, download
        self.root = self.data_dir / "LJSpeech-1.1"

    def prepare_data(self) -> None:
        if not (self.root / "metadata.csv").exists() and self.download:
            fetch(lambda: torchaudio.datasets.LJSPEECH(str(self.data_dir), download=True), URL, self.root)

    def make_splits(self) -> dict[str, Sequence[Example]]:
        metadata = self.root / "metadata.csv"
        if not metadata.exists():
            raise FileNotFoundError(f"{metadata} is missing: run prepare_data() or put LJSpeech-1.1/ there")
        examples = []
        with open(metadata, encoding="utf-8", newline="") as f:
            for n, row in enumerate(csv.reader(f, delimiter="|", quoting=csv.QUOTE_NONE), start=1):
                if len(row) != 3:
                    raise ValueError(f"{metadata}, line {n}: expected id|transcript|normalised transcript")
                examples.append(file_example(self.root / "wavs" / f"{row[0]}.wav", self.normalise(row[2])))
        return random_split(examples, self.val_fraction, self.test_fraction, self.seed)
