"""The configs: every model preset, data config, experiment and search composes and resolves, in
one interpolation style, and the data reads the model only through ``model.inputs``.

The style: inside a group's own tree a value refers to its neighbours relatively
(``${..block.d_model}``, ``${...context}``: as many dots as levels up), so that a file means the
same wherever it is composed (conf/vision/*.yaml under ``model.net.embedder.vision``, conf/block/*
under ``net.block``, presets over their base file). Absolute keys only cross groups, to the few
top-level ones in ALLOWED_ROOTS; nothing names ``model.`` but conf/train.yaml's one link
``inputs: ${model.inputs}``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from conftest import ROOT, write_shakespeare
from test_bad_input_data import MODEL_OF
from zoo.cli.describe import DIMS, model_names
from zoo.convert.common import compose_config
from zoo.nn.parts import with_dims
from zoo.train.run import build

CONF = ROOT / "conf"
# What a data module would tell every model (describe's stand-ins, and what image data adds).
STAND_IN = {**DIMS, "class_names": ["a", "b"], "pixel_mean": [0.5] * 3, "pixel_std": [0.5] * 3, "max_objects": 6}
# The top-level keys a config may name absolutely: what train.yaml holds for every group to read.
ALLOWED_ROOTS = {"compile", "dims", "inputs", "optim", "seed", "trainer", "paths", "task_name"}
ALLOWED_ROOTS |= {"task"}  # a family's defaults list picks its head by the task= group's choice (conf/task/)
# ${key...} or ${oc.select:key,...}: the node key an interpolation names (resolvers such as
# ${multiply:a,b} name none themselves; their arguments are interpolations of their own).
KEY = re.compile(r"\$\{(?:oc\.select:)?([\w.]+)(?=[},])")


def _names(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def resolved(*overrides: str, part: str | None = None) -> DictConfig:
    """The composed training config (or its ``part``), ``dims`` standing in for the data, every value resolved."""
    cfg = compose_config([*overrides, "paths.output_dir=unused"])
    with open_dict(cfg):
        cfg.dims = STAND_IN
    return OmegaConf.create(OmegaConf.to_container(cfg[part] if part else cfg, resolve=True))


def _widths(node, block_width: int | None = None, path: str = "") -> dict[str, tuple[int, int | None]]:
    """{path: (d_model, the d_model of the nearest enclosing Block preset)} for every ``d_model``
    below ``node`` that is not a Block's own."""
    found = {}
    if isinstance(node, DictConfig):
        if "block" in node:
            block_width = node.block.d_model
        for key, value in node.items():
            if key == "d_model":
                found[path] = (value, block_width)
            elif key != "block":
                found |= _widths(value, block_width, f"{path}.{key}")
    return found


@pytest.mark.parametrize("model", model_names())
def test_every_model_preset_resolves_and_its_parts_follow_its_block(model):
    """The width a container hands its embedder and head (zoo.nn.parts) follows the preset and an
    override, in every tower (LLaVA's vision tower keeps its own Block's width)."""
    for width in (None, 48):
        # (the model alone: the default data reads a context, which not every model has)
        cfg = resolved(f"model={model}", *([f"model.net.block.d_model={width}"] if width else []), part="model")
        widths = _widths(OmegaConf.create(with_dims(OmegaConf.to_container(cfg.net))))
        assert widths, "no embedder or head reads the Block's width"
        for path, (value, block_width) in widths.items():
            assert value == block_width, f"model={model}: net{path}.d_model={value}, its Block's is {block_width}"
        assert width is None or cfg.net.block.d_model == width
        assert cfg.optim.lr and cfg.init_from is None and cfg.compile is False  # conf/objective/base.yaml


def test_a_model_config_states_the_width_and_dropout_once_in_the_block():
    """Embedders and heads are partials the container builds at its width and dropout: no config
    restates them, except LLaVA's text embedder (inside the multimodal embedder, which Hydra builds
    before the language tower: ``${...block.d_model}``)."""
    restated = re.compile(r"^\s*(d_model|dropout|in_features):\s*\$\{\.+(?:[\w.]+\.)?block\.(d_model|dropout)\}", re.M)
    found = {str(p.relative_to(CONF)): restated.findall(p.read_text()) for p in CONF.rglob("*.yaml")}
    assert {name: hits for name, hits in found.items() if hits} == {
        "model/llava.yaml": [("d_model", "d_model"), ("dropout", "dropout")],
    }


@pytest.mark.parametrize("data", _names("data"))
def test_every_data_config_resolves_with_a_model_that_reads_it(data):
    cfg = resolved(f"model={MODEL_OF[data]}", f"data={data}")
    assert cfg.data._target_.startswith("zoo.data.")
    assert cfg.inputs == cfg.model.inputs


@pytest.mark.parametrize("group", ["experiment", "hparams_search"])
def test_every_experiment_and_search_resolves(group):
    for name in _names(group):
        cfg = resolved(f"{group}={name}")
        assert cfg.inputs == cfg.model.inputs, name


def test_a_search_samples_the_lr_the_min_lr_follows():
    cfg = resolved("hparams_search=gpt_optuna", "optim.lr=2e-3")
    assert cfg.optim.min_lr == pytest.approx(2e-4)


@pytest.mark.parametrize(("overrides", "key", "expected"), [
    (["experiment=gpt_shakespeare_char_cpu", "model.net.context=48"], "block_size", 48),
    (["model=llama", "model.net.context=40"], "block_size", 40),
    (["model=gpt", "model.net.context=32", "data.block_size=16"], "block_size", 16),  # the data's own word wins
    (["model=transformer", "data=multi30k", "model.net.context=40"], "max_len", 40),
    (["model=t5", "data=multi30k", "model.net.context=24"], "max_len", 24),
    (["model=llava", "data=shapes_vqa", "model.net.embedder.vision.image_size=48"], "image_size", 48),
    (["model=llava_timm", "data=flickr8k", "model.net.embedder.vision.image_size=64"], "image_size", 64),
    (["model=llava", "data=cifar10_captions"], "image_size", 32),
    (["model=bert", "data=wikitext", "model.init_from=some/dir"], "tokenizer_from", "some/dir"),
    (["model=gpt", "model.init_from=run.ckpt"], "tokenizer_from", "run.ckpt"),
])
def test_the_data_follows_what_the_model_tells_it(overrides, key, expected):
    assert resolved(*overrides).data[key] == expected


def test_the_data_module_train_builds_takes_the_experiments_context(tmp_path):
    cfg = compose_config(["experiment=gpt_shakespeare_char_cpu", "model.net.context=24", "model.net.n_layers=1",
                          "model.net.block.d_model=32", "model.net.block.n_heads=2", "data.check=false",
                          f"paths.data_dir={write_shakespeare(tmp_path / 'data')}", f"paths.cache_dir={tmp_path}"])
    datamodule, model = build(cfg)
    assert datamodule.block_size == 24 == model.net.embedder.max_len


def test_data_that_reads_what_the_model_does_not_give_is_refused_naming_both():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["model=gpt", "~model.inputs.context"], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # as under train.py: the messages name the user's choices
    try:
        with pytest.raises(ValueError) as refused:
            build(cfg)
    finally:
        HydraConfig.instance().cfg = None
    assert str(refused.value) == ("data=tinyshakespeare needs ['context'] from the model, but model=gpt provides "
                                  "only ['tokenizer_from']: pick a matching pair")


def _interpolations(path: Path) -> list[tuple[str, str]]:
    """(line, key) for every node key a conf file's interpolations name, comments left out."""
    found = []
    for line in path.read_text().splitlines():
        text = line.split(" #")[0]
        found += [(line.strip(), key) for key in KEY.findall(text)]
    return found


@pytest.mark.parametrize("path", sorted(p.relative_to(CONF) for p in CONF.rglob("*.yaml")
                                        if p.parts[len(CONF.parts)] != "hydra"), ids=str)
def test_every_conf_file_uses_one_interpolation_style(path):
    """Relative inside a group, absolute only across groups; conf/hydra/ keeps Hydra's own idiom."""
    group = path.parts[0] if len(path.parts) > 1 else None
    for line, key in _interpolations(CONF / path):
        if key.startswith(".") or (path == Path("train.yaml") and line == "inputs: ${model.inputs}"):
            continue
        root = key.split(".")[0]
        assert root in ALLOWED_ROOTS, f"conf/{path}: {line!r} names {key} absolutely: refer to it relatively"
        assert root != group, f"conf/{path}: {line!r} names its own group's {key}: refer to it relatively"
