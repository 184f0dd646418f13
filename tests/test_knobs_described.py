"""The knobs describe themselves (issue 45): every field of ``BlockConfig`` and every argument of
a container carries what it is as data (zoo.nn.knobs, zoo.models.arguments), and describe's Block
column, docs/design.md's knob table and the axes of ``zoo diff`` are generated from it."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from dataclasses import dataclass, fields

import pytest
from omegaconf import OmegaConf

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import design_tables  # noqa: E402
from zoo.models.arguments import ARGUMENTS, NET  # noqa: E402
from zoo.models.axes import AXES, axis_of  # noqa: E402
from zoo.nn.attention import MultiHeadAttention  # noqa: E402
from zoo.nn.block import Block, BlockConfig  # noqa: E402
from zoo.nn.knobs import BLOCK_ARGUMENTS, KNOBS, PARTS, Knob, knob_words  # noqa: E402
from zoo.train.compat import configs  # noqa: E402


def undescribed(config: type, knobs: dict[str, Knob]) -> list[str]:
    """The fields of the dataclass ``config`` that have no entry in ``knobs``, and the entries no field has."""
    names = [f.name for f in fields(config)]
    return [f"{n}: no description" for n in names if n not in knobs] + \
        [f"{n}: describes no field" for n in knobs if n not in names]


def test_every_block_config_field_is_described():
    assert not undescribed(BlockConfig, KNOBS)


def test_a_field_without_a_description_is_found():
    """The check above would fail on a new knob added to the Block without its entry."""

    @dataclass
    class Grown(BlockConfig):
        sandwich: bool = False

    assert undescribed(Grown, KNOBS) == ["sandwich: no description"]


@pytest.mark.parametrize("knobs", [KNOBS, BLOCK_ARGUMENTS], ids=["fields", "arguments"])
def test_each_description_is_whole(knobs):
    """A part of the Block, describe's words, and a row of the table (its own, or one it shares)."""
    for name, knob in knobs.items():
        assert knob.part in PARTS and knob.label, name
        if knob.row is None:
            assert knob.values and knob.why, f"{name}: no values or why for docs/design.md's table"
        else:
            assert knobs[knob.row].row is None, f"{name} shares {knob.row}'s row, which is no row of its own"


def test_the_block_arguments_are_described():
    """``Block(cfg, ...)``'s own arguments (per-layer data a stack gives) are the table's last rows."""
    assert [p for p in inspect.signature(Block).parameters if p != "cfg"] == list(BLOCK_ARGUMENTS)


def test_design_md_holds_the_generated_tables():
    """The knob table and the container arguments' table are the data's (tools/design_tables.py)."""
    text = (ROOT / "docs" / "design.md").read_text()
    assert not design_tables.stale(text), "docs/design.md's tables are stale: python tools/design_tables.py --write"
    knobs = design_tables.section(text, "knob-table").group(1)
    assert all(f"`{name}`" in knobs for name in [*KNOBS, *BLOCK_ARGUMENTS])
    assert design_tables.stale(text.replace("`layer_scale`", "`layer_gain`")) == ["knob-table"]


def test_knob_words_show_every_knob_away_from_its_default():
    """A flag in its label's words, a value in its format, defaults left out but the norm and activation."""
    cfg = BlockConfig(d_model=64, n_heads=4, prenorm=False, layer_scale=0.1, bias_k=False, parallel=False,
                      norm_eps=1e-12)
    assert knob_words(cfg) == ["layernorm", "eps 1e-12", "post-LN", "layer scale 0.1", "no key bias", "gelu",
                               "64 wide", "4 heads"]
    assert knob_words(BlockConfig(parallel=True), ("feed-forward",)) == ["gelu", "parallel"]


@pytest.fixture(scope="module")
def preset_blocks() -> dict[str, BlockConfig]:
    """Every model preset's Block config, composed and resolved (not built)."""
    return {name: BlockConfig(**{k: v for k, v in OmegaConf.to_container(cfg.net.block, resolve=True).items()
                                 if k != "_target_"})
            for name, cfg in configs("model").items() if "block" in cfg.net}


def _readme_block_column() -> dict[str, str]:
    """The README family table's Block column by preset (test_describe holds it to the generated table)."""
    found = re.search(r"<!-- family-table -->\n(.*?)\n<!-- /family-table -->", (ROOT / "README.md").read_text(), re.S)
    rows = [[c.strip() for c in row.strip("|").split("|")] for row in found.group(1).splitlines()]
    column = rows[0].index("block")
    return {row[0]: row[column] for row in rows[2:]}


def test_the_family_table_shows_every_knob_each_preset_turns(preset_blocks):
    """Every knob a preset sets away from its default (its size aside: the parameter column) is in
    its row of the family table: BEiT's layer scale, Pythia's parallel Block, ..."""
    shown = _readme_block_column()
    assert set(preset_blocks) <= set(shown)
    missing = []
    for model, block in preset_blocks.items():
        for f in fields(block):
            value, knob = getattr(block, f.name), KNOBS[f.name]
            if knob.part != "shape" and value != f.default and knob.words(value) not in shown[model].split(", "):
                missing.append(f"{model}: {f.name}={value}")
    assert not missing, missing
    assert "layer scale 0.1" in shown["beit"].split(", ") and "parallel" in shown["pythia"].split(", ")


def test_describe_card_lists_a_presets_knobs():
    from zoo.cli.describe import card

    beit = card("beit")
    assert re.search(r"^  layer_scale +0\.1 +norm: layer scale 0\.1$", beit, re.M), beit
    assert re.search(r"^block +.*layer scale 0\.1", beit, re.M)
    assert re.search(r"^  parallel +True +feed-forward: parallel$", card("pythia"), re.M)


@pytest.mark.slow  # a process per preset (~20 s)
@pytest.mark.parametrize("model, shown", [("beit", "layer scale 0.1"), ("pythia", "parallel")])
def test_the_describe_command_shows_one_presets_knobs(model, shown):
    done = subprocess.run([sys.executable, "-m", "zoo", "describe", f"model={model}"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"model                      {model}" in done.stdout and shown in done.stdout


def _containers() -> set[type]:
    """Every container a model preset names (``net._target_`` of conf/model/*.yaml)."""
    import importlib

    found = set()
    for path in (ROOT / "conf" / "model").glob("*.yaml"):
        target = OmegaConf.select(OmegaConf.load(path), "net._target_")
        if target:
            module, name = target.rsplit(".", 1)
            found.add(getattr(importlib.import_module(module), name))
    return found


def _arguments(container: type) -> set[str]:
    """A container's arguments, those of the classes it hands ``*args, **kwargs`` to included."""
    names = set()
    for cls in container.__mro__:
        if "__init__" in vars(cls) and cls.__module__.startswith("zoo."):
            parameters = inspect.signature(cls.__init__).parameters.values()
            names |= {p.name for p in parameters
                      if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
            if not any(p.kind == p.VAR_KEYWORD for p in parameters):
                break
    return names


def test_every_container_argument_has_an_axis():
    containers = _containers()
    assert {c.__name__ for c in containers} >= {"Model", "EncoderDecoder", "Staged", "TwoTower"}
    taken = set().union(*(_arguments(c) for c in containers))
    assert not taken - set(ARGUMENTS), f"container arguments without an entry in zoo/models/arguments.py: " \
                                       f"{taken - set(ARGUMENTS)}"
    assert not set(ARGUMENTS) - taken, f"entries no container takes: {set(ARGUMENTS) - taken}"
    assert all(a.axis in (*AXES, NET) and a.about for a in ARGUMENTS.values())


def test_axes_come_from_the_arguments():
    """Each argument's axis is the one ``zoo diff`` groups it under: the encoder-decoder's masks too."""
    for name, argument in ARGUMENTS.items():
        if argument.axis != NET:
            assert axis_of(f"{name}.x") in (argument.axis, "positions"), name
    assert axis_of("encoder_mask._target_") == axis_of("decoder_mask") == "mask"
    assert axis_of("vision.encoder_mask") == "mask"


def test_multi_head_attention_takes_keywords_only():
    """Thirteen settings, several booleans in a row: none may be given by position."""
    assert all(p.kind == p.KEYWORD_ONLY for name, p in inspect.signature(MultiHeadAttention).parameters.items())
    with pytest.raises(TypeError):
        MultiHeadAttention(16, 4)
    assert MultiHeadAttention(d_model=16, n_heads=4, n_kv_heads=2).n_kv_heads == 2
