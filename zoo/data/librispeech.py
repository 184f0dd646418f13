"""LibriSpeech: read English audiobooks, 16 kHz FLAC, with official subsets.

``${data_dir}/LibriSpeech/<subset>/<speaker>/<chapter>/<speaker>-<chapter>-<utt>.flac`` and
``<speaker>-<chapter>.trans.txt`` (torchaudio ``LIBRISPEECH`` layout, each subset downloaded
by it from OpenSLR when missing). Which subsets train, validate and test is configurable.
"""

from __future__ import annotations

from typing import Sequence

import torchaudio

from zoo.data.speech import Example, SpeechDataModule, fetch, file_example

BASE_URL = "http://www.openslr.org/resources/12/"


class LibriSpeech(SpeechDataModule):
    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, train_subsets=("train-clean-100",),
                 val_subsets=("dev-clean",), test_subsets=("test-clean",), download: bool = True, **kwargs):
        super().__init__(data_dir, cache_dir, batch_size, **kwargs)
        self.subsets = {"train": list(train_subsets), "val": list(val_subsets), "test": list(test_subsets)}
        self.download = download
        self.root = self.data_dir / "LibriSpeech"

    def _dataset(self, subset: str, download: bool = False):
        return torchaudio.datasets.LIBRISPEECH(str(self.data_dir), url=subset, download=download)

    def prepare_data(self) -> None:
        for subset in sorted({s for subsets in self.subsets.values() for s in subsets}):
            if not (self.root / subset).is_dir() and self.download:
                fetch(lambda: self._dataset(subset, download=True), f"{BASE_URL}{subset}.tar.gz", self.root / subset)

    def make_splits(self) -> dict[str, Sequence[Example]]:
        splits = {}
        for split, subsets in self.subsets.items():
            examples = []
            for subset in subsets:
                if not (self.root / subset).is_dir():
                    raise FileNotFoundError(f"{self.root / subset} is missing: run prepare_data() or put the "
                                            f"LibriSpeech subset there")
                ds = self._dataset(subset)
                for n in range(len(ds)):
                    relative, _, transcript, *_ = ds.get_metadata(n)
                    examples.append(file_example(self.root / relative, self.normalise(transcript)))
            splits[split] = examples
        return splits
