"""What a data module takes from the source a run starts from (``model.init_from``): its tokenizer,
so that token ids mean what they meant to the pretrained network."""

from __future__ import annotations

from pathlib import Path

from zoo.checkpoint import stored_tokenizer
from zoo.convert.hub import resolve
from zoo.data.tokenizers import CharTokenizer, HFTokenizer, WordTokenizer
from zoo.models.sentence_transformers import transformer_dir


def tokenizer_of(path: str | Path) -> CharTokenizer | HFTokenizer | WordTokenizer:
    """The tokenizer a run starting from ``path`` must use: a zoo checkpoint's own, or a
    Hugging Face checkpoint directory's (``tokenizer.json`` or ``vocab.txt``; a sentence-transformers
    folder's Transformer's), local or ``hf:<repo>``."""
    path = resolve(path)
    if Path(path).is_dir():
        return HFTokenizer.from_pretrained_dir(transformer_dir(path))
    return stored_tokenizer(path)
