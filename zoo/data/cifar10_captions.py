"""CIFAR-10 as captions, "a photo of a {class}", for stage-1 alignment of a projector.

Reads the ImageFolder layout ``${data_dir}/cifar10/{train,test}/<class>/*.jpg`` (what
``data=cifar10`` puts there). Every 10th training image (in sorted order) is held out
for validation. The exact-match accuracy of a caption is the classification accuracy; the class
names and their captions are given to a contrastive model for zero-shot classification.
"""

from __future__ import annotations

from collections import Counter
from functools import partial

from zoo.data.image_text import CAPTIONS, Example, ImageTextData
from zoo.data.images import load_image
from zoo.data.tokenizers import WordTokenizer


def caption(name: str) -> str:
    name = name.replace("_", " ")
    return f"a photo of {'an' if name[0] in 'aeiou' else 'a'} {name}"


def interleaved(examples: list[Example]) -> list[Example]:
    """The examples one class after the other in turn (the first of each class, then the second, ...).
    Validation and test are read in order: listed class by class, a batch of 64 would hold one class,
    whose captions are all the same (a contrastive loss at chance, retrieval by ties only), and a
    run's first validation batches would see the first class alone."""
    rank = Counter()
    keyed = []
    for ex in examples:
        keyed.append((rank[ex.kind], ex.kind))
        rank[ex.kind] += 1
    return [ex for _, ex in sorted(zip(keyed, examples), key=lambda pair: pair[0])]


class Cifar10Captions(ImageTextData):
    yields = CAPTIONS  # LLaVA items, or (image, caption) pairs for CLIP / SigLIP

    def setup(self, stage: str | None = None) -> None:
        if self.examples:
            return
        root = self.data_dir / "cifar10"
        splits = {}
        for split in ("train", "test"):
            folder = root / split
            classes = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
            if not classes:
                raise FileNotFoundError(f"{folder} has no <class>/*.jpg folders: run `python train.py model=vit "
                                        f"data=cifar10` once (it downloads CIFAR-10) or put the ImageFolder layout there")
            splits[split] = [Example(partial(load_image, path), self.prompt, [caption(c)], c)
                             for c in classes for path in sorted((folder / c).glob("*.jpg"))]
        self.tokenizer = WordTokenizer.from_texts(ex.answers[0] for ex in splits["test"])
        self.class_names = sorted({ex.kind for ex in splits["test"]})
        self.class_prompts = [caption(name) for name in self.class_names]
        train = splits["train"]
        self.examples = {"train": [ex for i, ex in enumerate(train) if i % 10],
                         "val": interleaved(train[::10]), "test": interleaved(splits["test"])}
        self._set_tokenizer_and_dims()

    def prepare_data(self) -> None:
        """The images come from data=cifar10's download (see setup's error)."""
