"""Tokenizers whose state travels inside checkpoints (a plain dict), so that a
checkpoint alone is enough to decode what its model generates."""

from __future__ import annotations


class CharTokenizer:
    """One token per character of a fixed alphabet (nanoGPT's character-level Shakespeare).

    ``specials`` (e.g. ``("<pad>", "<s>", "</s>")`` for sequence-to-sequence targets) take
    the first ids, before the characters; ``pad_id`` / ``bos_id`` / ``eos_id`` name them
    and ``decode`` leaves them out.
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

    def special_id(self, token: str) -> int:
        if token not in self.specials:
            raise ValueError(f"the tokenizer has no special token {token!r} (it has {list(self.specials)})")
        return self.specials.index(token)

    pad_id = property(lambda self: self.special_id("<pad>"))
    bos_id = property(lambda self: self.special_id("<s>"))
    eos_id = property(lambda self: self.special_id("</s>"))

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
    """A Hugging Face ``tokenizers`` tokenizer (BPE, unigram, ...), with its pad / bos /
    eos ids; its state is the tokenizer's own JSON, so a checkpoint carries it whole."""

    def __init__(self, tokenizer, pad: str = "<pad>", bos: str = "<s>", eos: str = "</s>"):
        self.tokenizer = tokenizer
        self.specials = {"pad": pad, "bos": bos, "eos": eos}
        ids = {name: tokenizer.token_to_id(token) for name, token in self.specials.items()}
        missing = [token for name, token in self.specials.items() if ids[name] is None]
        if missing:
            raise ValueError(f"the tokenizer has no special tokens {missing}")
        self.pad_id, self.bos_id, self.eos_id = ids["pad"], ids["bos"], ids["eos"]

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def state(self) -> dict:
        return {"kind": "hf", "json": self.tokenizer.to_str(), **self.specials}


def hf_tokenizer_from_state(state: dict) -> HFTokenizer:
    """:class:`HFTokenizer` from its :meth:`HFTokenizer.state`."""
    from tokenizers import Tokenizer

    return HFTokenizer(Tokenizer.from_str(state["json"]), state["pad"], state["bos"], state["eos"])


def tokenizer_from_state(state: dict):
    """Rebuild a tokenizer from what :meth:`state` returned."""
    if state.get("kind") == "char":
        return CharTokenizer(state["chars"], state.get("specials", ()))
    if state.get("kind") == "hf":
        return hf_tokenizer_from_state(state)
    raise ValueError(f"unknown tokenizer kind {state.get('kind')!r} in checkpoint")
