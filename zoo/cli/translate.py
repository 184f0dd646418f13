"""Translate sentences with a trained sequence-to-sequence checkpoint:

    python -m zoo.cli.translate ckpt=outputs/train/<run>/checkpoints/last.ckpt text="Ein Hund rennt im Schnee."
    python -m zoo.cli.translate ckpt=... text="..." beam=false          # greedy instead of beam search
    python -m zoo.cli.translate ckpt=... text="..." prefix="translate German to English: "   # T5

The checkpoint holds the network's config and the tokenizer, so nothing else is needed.
"""

from __future__ import annotations

import sys

import torch

from zoo.train.checkpoint import load
from zoo.objectives.seq2seq import Seq2Seq


def translate(ckpt: str, texts: list[str], beam: bool = True, prefix: str = "") -> list[str]:
    for text in texts:
        if not text.strip():
            raise ValueError(f"text={text!r} is empty: zoo.cli.translate needs a source sentence of at least one word")
    model: Seq2Seq = load(ckpt, accepts=("seq2seq",), command="zoo.cli.translate")
    with torch.no_grad():
        return model.translate([prefix + t for t in texts], beam=beam)


def main(argv: list[str]) -> None:
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    if "ckpt" not in args or "text" not in args:
        raise SystemExit("usage: python -m zoo.cli.translate ckpt=PATH text=SENTENCE [beam=true|false] [prefix=TEXT]")
    beam = args.get("beam", "true").lower() not in ("false", "0", "no")
    print(translate(args["ckpt"], [args["text"]], beam, args.get("prefix", ""))[0])


if __name__ == "__main__":
    main(sys.argv[1:])
