"""Flickr8k image captioning: ``${data_dir}/flickr8k/{Images/*.jpg, captions.txt}``.

``captions.txt`` is the common ``image,caption`` layout (a header line, then one line
per caption, five per image). Images are split 80/10/10 into train/val/test by a hash
of their file name (stable whatever the seed or the number of images present).
Training has one example per caption; val/test one per image with all its captions
as references, for corpus BLEU-4.
"""

from __future__ import annotations

import hashlib
from functools import partial
from pathlib import Path

from zoo.data.image_text import CAPTIONS, Example, ImageTextData
from zoo.data.images import load_image
from zoo.data.tokenizers import WordTokenizer

SOURCE = "https://www.kaggle.com/datasets/adityajn105/flickr8k"


def split_of(image_name: str) -> str:
    bucket = int(hashlib.sha1(image_name.encode()).hexdigest(), 16) % 10
    return "test" if bucket == 0 else "val" if bucket == 1 else "train"


def read_captions(path: Path) -> dict[str, list[str]]:
    """captions.txt -> {image file name: [captions]}, failing with the line that is malformed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip().lower() != "image,caption":
        raise ValueError(f"{path} should start with the header 'image,caption'")
    captions: dict[str, list[str]] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        name, sep, caption = line.partition(",")  # captions may hold commas; names do not
        if not sep or not caption.strip():
            raise ValueError(f"{path}:{number}: expected 'image,caption', got {line!r}")
        captions.setdefault(name.strip(), []).append(caption.strip())
    return captions


class Flickr8k(ImageTextData):
    """Args (besides :class:`ImageTextData`'s): ``min_count``: words seen fewer times in
    the training captions become ``<unk>``."""

    metric = "bleu"
    yields = CAPTIONS  # LLaVA items, or (image, caption) pairs for CLIP / SigLIP

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, image_size: int, resize: bool = True,
                 min_count: int = 2, tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, image_size, resize, tokenizer_from, num_workers)
        self.root = self.data_dir / "flickr8k"
        self.min_count = min_count

    def prepare_data(self) -> None:
        """Flickr8k needs an account to download: point at a copy or fail with where to get it."""
        for needed in (self.root / "captions.txt", self.root / "Images"):
            if not needed.exists():
                raise FileNotFoundError(
                    f"{needed} is missing. Download Flickr8k ({SOURCE}: Images/ and captions.txt) into "
                    f"{self.root}, or point ZOO_DATA_DIR / paths.data_dir at a folder that holds flickr8k/.")

    def setup(self, stage: str | None = None) -> None:
        if self.examples:
            return
        self.prepare_data()
        captions = read_captions(self.root / "captions.txt")
        by_split: dict[str, list[tuple[str, list[str]]]] = {"train": [], "val": [], "test": []}
        for name in sorted(captions):
            by_split[split_of(name)].append((name, captions[name]))
        self.tokenizer = WordTokenizer.from_texts(
            (c for _, caps in by_split["train"] for c in caps), min_count=self.min_count)

        def example(name: str, answers: list[str]) -> Example:
            return Example(partial(load_image, self.root / "Images" / name), self.prompt, answers)

        self.examples = {
            "train": [example(name, [c]) for name, caps in by_split["train"] for c in caps],
            "val": [example(name, caps) for name, caps in by_split["val"]],
            "test": [example(name, caps) for name, caps in by_split["test"]],
        }
        self._set_tokenizer_and_dims()
