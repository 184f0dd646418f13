"""The README's opening shows the Block's forward and three families side by side: the forward is
quoted from zoo/nn/block.py (each line as it stands there, in order) and every cell of the
side-by-side table says what the family's config builds."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT
from zoo.cli.describe import describe
from zoo.models.presets import build

README = (ROOT / "README.md").read_text()
SECTION = re.search(r"## One Block, three axes\n(.*?)\n## ", README, re.S)


def _code_lines(text: str) -> list[str]:
    """Code lines without blank lines and trailing comments, stripped of their indent."""
    lines = (line.split("  #")[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def test_the_readme_quotes_the_blocks_forward_as_it_is():
    assert SECTION, "README.md has no '## One Block, three axes' section"
    quoted = _code_lines(re.search(r"```python\n(.*?)```", SECTION.group(1), re.S).group(1))
    source = _code_lines((ROOT / "zoo" / "nn" / "block.py").read_text())
    assert len(quoted) >= 10
    at = 0
    for line in quoted:  # each quoted line stands in block.py, after the one before it or a new def
        assert line in source, f"README quotes {line!r}, which zoo/nn/block.py does not hold"
        found = source.index(line, at) if line in source[at:] else source.index(line)
        assert found >= at or line.startswith("def "), f"{line!r} is out of block.py's order"
        at = found + 1


def _table() -> dict[str, dict[str, str]]:
    """{axis: {model: cell}} of the README's side-by-side table."""
    found = re.search(r"<!-- side-by-side -->\n(.*?)\n<!-- /side-by-side -->", README, re.S)
    assert found, "README.md has no <!-- side-by-side --> table"
    rows = found.group(1).splitlines()
    models = [re.sub(r"`model=(\w+)`", r"\1", cell.strip()) for cell in rows[0].strip("|").split("|")[1:]]
    table = {}
    for row in rows[2:]:
        axis, *cells = (cell.strip() for cell in row.strip("|").split("|"))
        table[axis.split(" (")[0]] = dict(zip(models, cells))
    return table


@pytest.mark.parametrize("model", ["gpt", "vit", "whisper"])
def test_each_cell_of_the_side_by_side_table_is_what_the_config_builds(model):
    cfg, net = build(model)
    row = describe(model)  # what the family table says, from the built network
    cell = {axis: cells[model] for axis, cells in _table().items()}
    for name in re.findall(r"\w+Mask", row["mask"]):
        assert f"`{name}`" in cell["mask"], (model, name)
    assert ("cross" in row["mask"]) == ("cross-attention" in cell["mask"]), model
    for name in row["embedder"].split(" / "):
        assert f"`{name}`" in cell["input embedder"], (model, name)
    assert f"`{row['head']}`" in cell["head"], model
    preset = re.match(r"`(\w+)`: (.*)", cell["Block preset"])
    assert f"/block@net.block: {preset[1]}" in (ROOT / "conf" / "model" / f"{model}.yaml").read_text(), model
    assert preset[2].startswith(row["block"]), (model, row["block"])
    for kind in row["positions"].split(" + "):
        assert kind in cell["positions"], (model, kind)
    assert cell["container"].startswith(f"`{type(net).__name__}`"), model
    assert cell["objective"] == f"`{cfg._target_.rsplit('.', 1)[-1]}`", model
