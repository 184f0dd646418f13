"""OpenSLR YESNO: 60 recordings of one man saying eight Hebrew "yes" / "no" words, 8 kHz.

``${data_dir}/yesno/waves_yesno/{0|1}_..._{0|1}.wav`` (torchaudio ``YESNO`` layout, downloaded
by it when missing); the file name is the transcript (1 = yes, 0 = no). The corpus has
no official split: a seeded ``val_fraction`` / ``test_fraction`` of the files is held out.
"""

from __future__ import annotations

from typing import Sequence

import torchaudio

from zoo.data.speech import Example, SpeechDataModule, fetch, file_example, random_split

URL = torchaudio.datasets.yesno._RELEASE_CONFIGS["release1"]["url"]


class YesNo(SpeechDataModule):
    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, val_fraction: float = 0.15,
                 test_fraction: float = 0.25, seed: int = 1337, download: bool = True, **kwargs):
        super().__init__(data_dir, cache_dir, batch_size, **kwargs)
        self.val_fraction, self.test_fraction, self.seed, self.download = val_fraction, test_fraction, seed, download
        self.root = self.data_dir / "yesno"

    def prepare_data(self) -> None:
        if not (self.root / "waves_yesno").is_dir() and self.download:
            fetch(lambda: torchaudio.datasets.YESNO(str(self.root), download=True), URL, self.root / "waves_yesno")

    def make_splits(self) -> dict[str, Sequence[Example]]:
        folder = self.root / "waves_yesno"
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder} is missing: run prepare_data() or put YESNO's waves_yesno/ there")
        examples = []
        for path in sorted(folder.glob("*.wav")):
            labels = path.stem.split("_")
            if not labels or any(label not in ("0", "1") for label in labels):
                raise ValueError(f"{path}: a YESNO file name is its labels, 0 (no) and 1 (yes) joined by '_'")
            examples.append(file_example(path, " ".join("yes" if label == "1" else "no" for label in labels)))
        return random_split(examples, self.val_fraction, self.test_fraction, self.seed)
