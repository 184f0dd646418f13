"""What the vision-language data sets share: (image, prompt, answer) examples turned
into LLaVA training items or (image, caption) pairs for contrastive training, and the data
module that batches them.

An item is the prompt (with its one ``<image>`` placeholder) followed by the answer
and ``<eos>``, shifted by one for next-token prediction; targets are -100 on the
prompt so the loss covers the answer only. The placeholder is expanded into the
vision tower's number of image tokens by the objective, which knows the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Dataset

from zoo.data.base import ZooDataModule
from zoo.data.batches import IGNORE, ImageCaptions, ImageText
from zoo.data.images import to_tensor
from zoo.data.tokenizers import HFTokenizer, WordTokenizer

# What a checkpoint's own tokenizer (a Hugging Face LLaVA folder's) calls the tokens the items
# place, first match wins: the image placeholder, the end of an answer (Llama 2's, GPT-2's,
# Llama 3's) and padding (never a target: an end of text serves where there is no pad token).
END = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>")
ROLES = {"image": ("<image>",), "eos": END, "pad": ("<pad>", "[PAD]", *END)}


@dataclass
class Example:
    """One image with a prompt and its reference answers (the first is the training target)."""

    image: Callable[[], Image.Image]  # loads or draws the image when the item is built
    prompt: str
    answers: list[str]
    kind: str = ""  # e.g. the question type, for per-kind metrics


class ImageTextItems(Dataset):
    """Examples -> dicts of tensors: images (3, S, S), tokens / targets (L,), prefix_len, example_ids."""

    def __init__(self, examples, tokenizer: WordTokenizer | HFTokenizer, image_size: int, resize: bool = True):
        self.examples, self.tokenizer = examples, tokenizer
        self.image_size, self.resize = image_size, resize

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        ex = self.examples[i]
        prompt = self.tokenizer.encode(ex.prompt)
        seq = prompt + self.tokenizer.encode(ex.answers[0]) + [self.tokenizer.eos_id]
        targets = [t if j + 1 >= len(prompt) else -100 for j, t in enumerate(seq[1:])]
        return {
            "images": to_tensor(ex.image(), self.image_size, self.resize),
            "tokens": torch.tensor(seq[:-1]),
            "targets": torch.tensor(targets),
            "prefix_len": torch.tensor(len(prompt)),
            "example_ids": torch.tensor(i),
        }


def collate(items: list[dict[str, Tensor]], pad_id: int = 0) -> ImageText:
    """Stack items into :class:`ImageText`, right-padding tokens (``pad_id``) and targets (-100) to the longest."""
    width = max(len(it["tokens"]) for it in items)

    def pad(key: str, value: int) -> Tensor:
        return torch.stack([torch.cat([it[key], it[key].new_full((width - len(it[key]),), value)]) for it in items])

    stacked = {k: torch.stack([it[k] for it in items]) for k in ("images", "prefix_len", "example_ids")}
    return ImageText(tokens=pad("tokens", pad_id), targets=pad("targets", IGNORE), **stacked)


class CaptionItems(Dataset):
    """Examples -> (image, caption) pairs for contrastive training: images (3, S, S), tokens (L,)
    (the first answer, then ``<eos>``), labels () (the example's ``kind`` as an index into
    ``classes``, -1 where it is none of them)."""

    def __init__(self, examples, tokenizer: WordTokenizer | HFTokenizer, image_size: int, resize: bool,
                 classes: list[str]):
        self.examples, self.tokenizer = examples, tokenizer
        self.image_size, self.resize = image_size, resize
        self.classes = {name: i for i, name in enumerate(classes)}

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        ex = self.examples[i]
        return {"images": to_tensor(ex.image(), self.image_size, self.resize),
                "tokens": torch.tensor(self.tokenizer.encode(ex.answers[0]) + [self.tokenizer.eos_id]),
                "labels": torch.tensor(self.classes.get(ex.kind, -1))}


def collate_captions(items: list[dict[str, Tensor]], pad_id: int = 0) -> ImageCaptions:
    """Stack (image, caption) items into :class:`ImageCaptions`, right-padding the captions with ``pad_id``."""
    width = max(len(it["tokens"]) for it in items)
    tokens = torch.full((len(items), width), pad_id, dtype=torch.long)
    padding = torch.zeros(len(items), width, dtype=torch.bool)
    for row, it in enumerate(items):
        tokens[row, : len(it["tokens"])], padding[row, : len(it["tokens"])] = it["tokens"], True
    return ImageCaptions(torch.stack([it["images"] for it in items]), tokens, padding,
                         torch.stack([it["labels"] for it in items]))


CAPTIONS = (ImageText, ImageCaptions)  # what a data set of captions yields


class ImageTextData(ZooDataModule):
    """Base data module for (image, prompt, answer) data sets.

    Subclasses fill ``self.examples[split]`` (lists of :class:`Example`) and
    ``self.tokenizer`` (the data's own vocabulary) in ``setup``, then call
    :meth:`_set_tokenizer_and_dims`. Batches are :class:`ImageText` (see :func:`collate`); a data
    set of captions also yields, for a contrastive objective, :class:`ImageCaptions` (the image and
    its first answer: :func:`collate_captions`; ``yields = CAPTIONS``). A data set whose
    examples are classes (their ``kind``) names them in ``class_names`` and their captions in
    ``class_prompts`` (zero-shot classification).

    Args:
        image_size: side of the square images the vision tower takes.
        resize: resize images of another size (else fail with both sizes).
        tokenizer_from: fine-tuning: the checkpoint the run starts from (a zoo ``.ckpt`` or a
            Hugging Face LLaVA folder); its tokenizer replaces the data's vocabulary, so the ids
            mean what the weights learnt (its tokens for the roles are found by name: :data:`ROLES`).
    """

    yields = (ImageText,)
    prompt = "<image>"  # the prompt template; ``{question}`` is filled in where there is one
    metric = "exact_match"  # or "bleu" (captions)

    def __init__(self, data_dir: str, cache_dir: str, batch_size: int, image_size: int, resize: bool = True,
                 tokenizer_from: str | None = None, num_workers: int = 0):
        super().__init__(data_dir, cache_dir, batch_size, num_workers, tokenizer_from)
        self.image_size, self.resize = image_size, resize
        self.examples: dict[str, list[Example]] = {}
        self.class_names: list[str] = []  # a data set of classes sets them (and their captions) in setup
        self.class_prompts: list[str] = []

    def _set_tokenizer_and_dims(self) -> None:
        """The checkpoint's tokenizer where there is one (``tokenizer_from``), then what the
        model config reads: the vocabulary, the ``<image>`` id, the prompt template (kept in
        checkpoints for ``zoo.cli.answer``) and how answers are scored.

        A checkpoint's Hugging Face tokenizer has its tokens for the roles found by name; a word
        vocabulary must know every word of the data's own (``self.tokenizer`` when called): a
        checkpoint's words are fixed, and the ones it lacks would all read as ``<unk>``."""
        own = self.tokenizer
        self.tokenizer = self.tokenizer_or(lambda: own)
        if isinstance(self.tokenizer, HFTokenizer):
            self.tokenizer = self.tokenizer.with_roles(**{role: self.role_token(names, role)
                                                          for role, names in ROLES.items()})
        elif not isinstance(self.tokenizer, WordTokenizer):
            raise ValueError(f"the tokenizer of {self.tokenizer_from} is a {type(self.tokenizer).__name__}: image-"
                             "text data reads a word vocabulary or a Hugging Face tokenizer")
        elif missing := sorted(set(own.words) - set(self.tokenizer.words)):
            raise ValueError(f"the tokenizer of {self.tokenizer_from} lacks {len(missing)} word(s) of "
                             f"{type(self).__name__}'s vocabulary ({missing[:10]}): they would all read as <unk>")
        self.dims = {"vocab_size": self.tokenizer.vocab_size, "image_token_id": self.tokenizer.image_id,
                     "eos_id": self.tokenizer.eos_id, "prompt": self.prompt, "metric": self.metric,
                     "class_names": self.class_names, "class_prompts": self.class_prompts}

    def dataset(self, split: str) -> ImageTextItems | CaptionItems:
        if self.batch_type is ImageCaptions:
            return CaptionItems(self.examples[split], self.tokenizer, self.image_size, self.resize, self.class_names)
        return ImageTextItems(self.examples[split], self.tokenizer, self.image_size, self.resize)

    def collate_fn(self):
        return partial(collate_captions if self.batch_type is ImageCaptions else collate, pad_id=self.tokenizer.pad_id)
