"""``python -m zoo diff A B``: the differences of two training configs, grouped by the axes of
:mod:`zoo.models.axes` (the one table), the two values side by side; a misspelt side is refused
before anything runs."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from zoo.cli import commands
from zoo.cli.diff import ABSENT, compared, side_overrides
from zoo.cli.precheck import Refused, check
from zoo.config import compose_config
from zoo.models.axes import GROUPS


def test_gpt_and_mistral_differ_by_axis_with_both_values():
    grouped = compared(side_overrides("gpt"), side_overrides("mistral"))
    # Mistral is Llama's Block, rotary positions, an untied head and a sliding window over GPT's shape
    # at context 128: each of those lands in its own group, and nothing lands in none.
    assert {"mask", "head", "block", "positions", "container"} <= set(grouped) <= set(GROUPS)
    assert grouped["mask"]["model.net.mask._target_"] == ("zoo.nn.masks.CausalMask", "zoo.nn.masks.LocalMask")
    assert grouped["block"]["model.net.block.norm"] == ("layernorm", "rmsnorm")
    assert grouped["positions"]["model.net.rotary"] == (ABSENT, True)
    assert "embedder" not in grouped  # both embed tokens with TokenEmbedder (positions aside)
    # Every pair shown is what the two composed configs hold there.
    gpt, mistral = compose_config(["model=gpt"]), compose_config(["model=mistral"])
    for keys in grouped.values():
        for key, (a, b) in keys.items():
            assert a != b
            for cfg, shown in ((gpt, a), (mistral, b)):
                held = OmegaConf.select(cfg, key, default=ABSENT, throw_on_resolution_failure=False)
                held = OmegaConf.to_container(held) if OmegaConf.is_config(held) else held
                if shown == ABSENT or not (isinstance(shown, str) and shown.startswith("${")):
                    assert held == shown, key


def test_an_override_list_differs_only_where_it_says():
    grouped = compared(["model=gpt"], side_overrides("gpt model.net.n_layers=2 optim.lr=0.5"))
    assert grouped == {"container": {"model.net.n_layers": (4, 2)}, "training": {"optim.lr": (0.001, 0.5)}}
    assert compared(["model=gpt"], ["model=gpt"]) == {}


def test_the_command_line_prints_the_groups_in_order(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["zoo", "diff", "gpt", "gpt model.net.n_layers=2 optim.lr=0.5"])
    commands.main()
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["key", "gpt", "gpt", "model.net.n_layers=2", "optim.lr=0.5"]
    assert [line for line in out if not line.startswith(" ")] == ["container", "training"]
    assert out[2].split() == ["model.net.n_layers", "4", "2"]


@pytest.mark.parametrize("sides, said", [
    (["a=gtp", "b=mistral"], "a=gtp: model=gtp: no such model (did you mean gpt?)"),
    (["a=gpt", "b='gpt model.net.n_layrs=2'"], "model.net.n_layrs: unknown key (did you mean model.net.n_layers?)"),
])
def test_a_misspelt_side_is_refused_by_the_precheck(sides, said):
    with pytest.raises(Refused, match=said.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        check("diff", "diff", sides)


def test_bare_words_fill_the_positional_keys_quoted_for_hydra():
    diff = commands.COMMANDS["diff"]
    assert commands.positional_to_overrides(diff, ["gpt", "mistral x=1", "hydra.verbose=true"]) == [
        "a='gpt'", "b='mistral x=1'", "hydra.verbose=true"]
