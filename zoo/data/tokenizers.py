"""Tokenizers whose state travels inside checkpoints (a plain dict), so that a
checkpoint alone is enough to decode what its model generates."""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable


class CharTokenizer:
    """One token per character of a fixed alphabet (nanoGPT's character-level Shakespeare)."""

    def __init__(self, chars: str):
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - self.index.keys())
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown!r}")
        return [self.index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def state(self) -> dict:
        return {"kind": "char", "chars": self.chars}


class WordTokenizer:
    """One token per word or punctuation mark; ``<name>`` special tokens stay whole.

    The specials come first with fixed ids (``<pad>`` 0, ``<unk>`` 1, ``<eos>`` 2,
    ``<image>`` 3); words outside the vocabulary become ``<unk>``. Decoding joins
    words with spaces (captions and short answers need no more).
    """

    SPECIALS = ("<pad>", "<unk>", "<eos>", "<image>")
    PATTERN = re.compile(r"<\w+>|\w+|[^\w\s]")

    def __init__(self, words: list[str]):
        if tuple(words[: len(self.SPECIALS)]) != self.SPECIALS:
            raise ValueError(f"a word vocabulary must start with {self.SPECIALS}")
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.pad_id, self.unk_id, self.eos_id, self.image_id = range(len(self.SPECIALS))

    @classmethod
    def split(cls, text: str) -> list[str]:
        return cls.PATTERN.findall(text.lower())

    @classmethod
    def from_texts(cls, texts: Iterable[str], min_count: int = 1) -> "WordTokenizer":
        """The vocabulary of ``texts``: words seen at least ``min_count`` times, most frequent first."""
        counts = Counter(w for t in texts for w in cls.split(t))
        words = sorted((w for w, n in counts.items() if n >= min_count and w not in cls.SPECIALS),
                       key=lambda w: (-counts[w], w))
        return cls([*cls.SPECIALS, *words])

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        return [self.index.get(w, self.unk_id) for w in self.split(text)]

    def decode(self, ids: list[int]) -> str:
        """Words up to the first ``<eos>``, padding left out."""
        out = []
        for i in ids:
            if i == self.eos_id:
                break
            if i != self.pad_id:
                out.append(self.words[i])
        return " ".join(out)

    def state(self) -> dict:
        return {"kind": "word", "words": self.words}


def tokenizer_from_state(state: dict):
    """Rebuild a tokenizer from what :meth:`state` returned."""
    if state.get("kind") == "char":
        return CharTokenizer(state["chars"])
    if state.get("kind") == "word":
        return WordTokenizer(state["words"])
    raise ValueError(f"unknown tokenizer kind {state.get('kind')!r} in checkpoint")
