"""docs/design.md's generated tables: the Block's knobs (``zoo.nn.knobs``) and the container
arguments (``zoo.models.arguments``), each between ``<!-- NAME -->`` and ``<!-- /NAME -->``.

    python tools/design_tables.py           # exit 1, naming the table, when the page differs
    python tools/design_tables.py --write   # rewrite the tables in place

tests/test_knobs_described.py fails when the page and the data differ.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's zoo, not an installed one

from zoo.models.arguments import argument_table  # noqa: E402
from zoo.nn.knobs import knob_table  # noqa: E402

DESIGN = ROOT / "docs" / "design.md"
TABLES = {"knob-table": knob_table, "container-arguments": argument_table}


def section(text: str, marker: str) -> re.Match | None:
    """The generated part of a page: the text between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    return re.search(rf"<!-- {marker} -->\n(.*?)\n<!-- /{marker} -->", text, re.S)


def stale(text: str) -> list[str]:
    """The tables of :data:`TABLES` that ``text`` lacks or holds differently from their data."""
    return [m for m, table in TABLES.items() if (found := section(text, m)) is None or found.group(1) != table()]


def written(text: str) -> str:
    """``text`` with every table of :data:`TABLES` rewritten from its data (each section must exist)."""
    for marker, table in TABLES.items():
        found = section(text, marker)
        if found is None:
            raise SystemExit(f"{DESIGN}: no <!-- {marker} --> ... <!-- /{marker} --> section to write the table into")
        text = text[:found.start(1)] + table() + text[found.end(1):]
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables in docs/design.md")
    args = parser.parse_args(argv)
    text = DESIGN.read_text()
    if args.write:
        DESIGN.write_text(written(text))
        print(f"wrote {', '.join(TABLES)} into {DESIGN}")
        return 0
    differ = stale(text)
    print(f"{DESIGN}: stale tables {differ}: python tools/design_tables.py --write" if differ else "up to date")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
