"""Speech Commands v0.02: one-second clips of 35 command words, 16 kHz, official split.

``${data_dir}/SpeechCommands/speech_commands_v0.02/<word>/<speaker>_nohash_<n>.wav`` with
``validation_list.txt`` / ``testing_list.txt`` (torchaudio ``SPEECHCOMMANDS`` layout,
downloaded by it when missing). The transcript is the word (``_background_noise_`` is left out).
"""

from __future__ import annotations

from typing import Sequence

import torchaudio

from zoo.data.speech import Example, SpeechDataModule, fetch, file_example

URL = "http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz"
SUBSETS = {"train": "training", "val": "validation", "test": "testing"}


class SpeechCommands(SpeechDataModule):
    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, download: bool = True, **kwargs):
        super().__init__(data_dir, cache_dir, batch_size, **kwargs)
        self.download = download
        self.root = self.data_dir / "SpeechCommands"
        self.folder = self.root / "speech_commands_v0.02"

    def prepare_data(self) -> None:
        if not self.folder.is_dir() and self.download:
            fetch(lambda: torchaudio.datasets.SPEECHCOMMANDS(str(self.data_dir), download=True), URL, self.folder)

    def make_splits(self) -> dict[str, Sequence[Example]]:
        if not self.folder.is_dir():
            raise FileNotFoundError(f"{self.folder} is missing: run prepare_data() or put Speech Commands there")
        splits = {}
        for split, subset in SUBSETS.items():
            ds = torchaudio.datasets.SPEECHCOMMANDS(str(self.data_dir), subset=subset)
            examples = []
            for n in range(len(ds)):
                relative, _, label, *_ = ds.get_metadata(n)
                examples.append(file_example(self.root / relative, self.normalise(label)))
            splits[split] = examples
        return splits
