"""Tokenizers whose state travels inside checkpoints (a plain dict), so that a
checkpoint alone is enough to decode what its model generates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer


class CharTokenizer:
    """One token per character of a fixed alphabet (nanoGPT's character-level Shakespeare).

    ``specials`` (e.g. ``("<pad>", "<s>", "</s>")`` for sequence-to-sequence targets) take
    the first ids, before the characters; ``token_id`` finds them and ``decode`` leaves
    them out.
    """

    def __init__(self, chars: str, specials: tuple[str, ...] | list[str] = ()):
        self.chars, self.specials = chars, tuple(specials)
        self.index = {c: i + len(self.specials) for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str, specials: tuple[str, ...] = ()) -> "CharTokenizer":
        return cls("".join(sorted(set(text))), specials)

    @property
    def vocab_size(self) -> int:
        return len(self.specials) + len(self.chars)

    def token_id(self, token: str) -> int:
        """The id of a special token or a character."""
        if token in self.specials:
            return self.specials.index(token)
        if token in self.index:
            return self.index[token]
        raise KeyError(f"the tokenizer has no {token!r} token (specials: {list(self.specials)})")

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - self.index.keys())
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown!r}")
        return [self.index[c] for c in text]

    def decode(self, ids: list[int]) -> str:
        n = len(self.specials)
        return "".join(self.chars[i - n] for i in ids if i >= n)

    def state(self) -> dict:
        return {"kind": "char", "chars": self.chars, "specials": list(self.specials)}


class HFTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer (BERT's WordPiece, ...); its state is the
    tokenizer's JSON string. ``encode`` adds no special tokens: the data module places them."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    @classmethod
    def train_wordpiece(cls, texts: Iterable[str], vocab_size: int, special_tokens: list[str],
                        lowercase: bool = True) -> "HFTokenizer":
        """BERT's WordPiece (BERT normalizer and pre-tokenizer, ``##`` continuations) learnt
        from ``texts``; ``special_tokens`` get the first ids, in order."""
        from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

        tok = Tokenizer(models.WordPiece(unk_token=special_tokens[1] if len(special_tokens) > 1 else "[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=special_tokens, show_progress=False)
        tok.train_from_iterator(texts, trainer)
        return cls(tok)

    @classmethod
    def from_pretrained_dir(cls, path: str | Path) -> "HFTokenizer":
        """The tokenizer of a Hugging Face checkpoint directory: ``tokenizer.json``, or
        ``vocab.txt`` (WordPiece; lower-cased unless ``tokenizer_config.json`` says otherwise)."""
        path = Path(path)
        if (path / "tokenizer.json").is_file():
            return cls(Tokenizer.from_file(str(path / "tokenizer.json")))
        if (path / "vocab.txt").is_file():
            from tokenizers.implementations import BertWordPieceTokenizer

            config = path / "tokenizer_config.json"
            lowercase = json.loads(config.read_text()).get("do_lower_case", True) if config.is_file() else True
            return cls(BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=lowercase)._tokenizer)
        raise FileNotFoundError(f"{path} has neither tokenizer.json nor vocab.txt")

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def token_id(self, token: str) -> int:
        i = self.tokenizer.token_to_id(token)
        if i is None:
            raise KeyError(f"the tokenizer has no {token!r} token")
        return i

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def state(self) -> dict:
        return {"kind": "hf", "json": self.tokenizer.to_str()}


def tokenizer_from_state(state: dict):
    """Rebuild a tokenizer from what :meth:`state` returned."""
    if state.get("kind") == "char":
        return CharTokenizer(state["chars"], state.get("specials", ()))
    if state.get("kind") == "hf":
        return HFTokenizer(Tokenizer.from_str(state["json"]))
    raise ValueError(f"unknown tokenizer kind {state.get('kind')!r} in checkpoint")
