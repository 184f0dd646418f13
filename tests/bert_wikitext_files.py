"""Tiny WikiText files in the official layout, for the BERT tests."""

from __future__ import annotations

import random
from pathlib import Path

WORDS = ("the river town king battle song album species road church team season army ship was is "
         "in of and a to by from first second later north south game film @-@ , . <unk>").split()


def article(rng: random.Random, title: str, paragraphs: int) -> str:
    lines = [" \n", f" = {title} = \n", " \n"]
    for p in range(paragraphs):
        if p == 1:
            lines += [f" = = Section {p} = = \n", " \n"]
        lines.append(" " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60))) + " \n")
    return "".join(lines)


def write_wikitext(root: Path, name: str = "wikitext-2", articles: int = 12) -> Path:
    """``root/name/wiki.{train,valid,test}.tokens`` (``.raw`` for a -raw name), a few articles each."""
    rng = random.Random(0)
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    ext = "raw" if name.endswith("-raw") else "tokens"
    for split, n in (("train", articles), ("valid", 3), ("test", 3)):
        text = "".join(article(rng, f"{split.title()} Article {i}", rng.randint(2, 6)) for i in range(n))
        (folder / f"wiki.{split}.{ext}").write_text(text, encoding="utf-8")
    return folder
