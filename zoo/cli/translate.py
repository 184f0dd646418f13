"""Translate sentences with a trained sequence-to-sequence checkpoint:

    python -m zoo translate ckpt=outputs/train/<run>/checkpoints/last.ckpt text="Ein Hund rennt im Schnee."
    python -m zoo translate ckpt=... text="..." beam=false          # greedy instead of beam search
    python -m zoo translate ckpt=... text="..." prefix="translate German to English: "   # T5

The checkpoint holds the network's config and the tokenizer, so nothing else is needed.
"""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from zoo.objectives.loading import load
from zoo.objectives.seq2seq import Seq2Seq


def translate(ckpt: str, texts: list[str], beam: bool = True, prefix: str = "") -> list[str]:
    for text in texts:
        if not text.strip():
            raise ValueError(f"text={text!r} is empty: zoo translate needs a source sentence of at least one word")
    model: Seq2Seq = load(ckpt, accepts=("seq2seq",), command="zoo translate")
    with torch.no_grad():
        return model.translate([prefix + t for t in texts], beam=beam)


def main(cfg: DictConfig) -> None:
    """Print the translation of ``text`` (conf/translate.yaml)."""
    print(translate(cfg.ckpt, [str(cfg.text)], cfg.beam, cfg.prefix)[0])
