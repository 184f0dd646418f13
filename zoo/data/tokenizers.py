"""Tokenizers whose state travels inside checkpoints (a plain dict), so that a
checkpoint alone is enough to decode what its model generates."""

from __future__ import annotations


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


def tokenizer_from_state(state: dict):
    """Rebuild a tokenizer from what :meth:`state` returned."""
    if state.get("kind") == "char":
        return CharTokenizer(state["chars"])
    raise ValueError(f"unknown tokenizer kind {state.get('kind')!r} in checkpoint")
