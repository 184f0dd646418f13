"""Whatever the shipped configs build, its checkpoint reads back: every model preset and every
study value (the classes a checkpoint may name are those conf/ names, zoo.registry.config_targets),
with compile on or off (a checkpoint's keys are the net's alone, never ``_orig_mod.``).

Each checkpoint is built as train.py builds the objective (zoo.train.run.objective), written as its
checkpoint callback writes one (Trainer.save_checkpoint, NamedCheckpointIO) and read back as every
command reads one (zoo.objectives.loading.load) and as a resume does (check_resumable, then
Lightning's strict load_state_dict). By default: the compile case, ALiBi's, and the reader's check
of what every preset and study value stores (composed, nothing built). Slow: every preset read back
(a CPU preset at tiny sizes with its weights, sampled where it generates and exported; a paper size
on the meta device), every study value likewise, and four runs trained, resumed, sampled and
exported by train.py and ``python -m zoo`` themselves (ALiBi, compile=true resumed eagerly, BERT, ViT)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import hydra
import lightning as L
import pytest
import torch
import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from conftest import ROOT, TINY_GPT, run_train, write_shakespeare
from zoo.checkpoint import check_names
from zoo.cli.commands import call
from zoo.cli.generate import GENERATORS
from zoo.cli.study import run_overrides
from zoo.config import CONF_DIR, compose_config
from zoo.convert.export import ZOO_FORMAT, export, read_zoo
from zoo.data.tokenizers import CharTokenizer
from zoo.models.presets import DIMS as STAND_IN, model_names
from zoo.objectives.loading import check_resumable, load
from zoo.registry import ALLOWED_TARGETS, OBJECTIVES, STORED_TARGETS, config_targets, name_of
from zoo.train.checkpoint_io import NamedCheckpointIO
from zoo.train.run import objective

STUDIES = {path.stem: OmegaConf.load(path) for path in sorted((CONF_DIR / "study").glob("*.yaml"))}
STUDY_VALUES = [(name, value) for name, study in STUDIES.items() for value in study["values"]]
CPU_SIZE = 20_000_000  # parameters: the CPU presets hold a few million (README), the paper sizes more
TOKENIZER = CharTokenizer.from_text("".join(chr(c) for c in range(32, 127)) + "\n")  # what text runs decode with
# What a data module would tell every model: describe's stand-ins, the tokenizer's vocabulary, and
# what image data adds.
CLASSES = [f"class{i}" for i in range(STAND_IN["num_classes"])]
DIMS = {**STAND_IN, "vocab_size": TOKENIZER.vocab_size, "class_names": CLASSES, "pixel_mean": [0.5] * 3,
        "pixel_std": [0.5] * 3, "max_objects": 6, "class_prompts": [f"a photo of a {name}." for name in CLASSES]}


@pytest.fixture(scope="module")
def trainer() -> L.Trainer:
    """A Trainer that writes checkpoints as train.py's does (its checkpoint IO), for any objective connected."""
    return L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, plugins=[NamedCheckpointIO()])


def configured(overrides: list[str]) -> DictConfig:
    """The composed training config, :data:`DIMS` standing in for what the data would tell the model."""
    cfg = compose_config([*overrides, "paths.output_dir=unused"])
    with open_dict(cfg):
        cfg.dims = DIMS
    return cfg


def saved(built: L.LightningModule, path: Path, trainer: L.Trainer) -> Path:
    """``built``'s checkpoint at ``path``, written as the checkpoint callback writes one."""
    trainer.strategy.connect(built)
    trainer.save_checkpoint(path)
    return path


def round_trip(cfg: DictConfig, path: Path, trainer: L.Trainer, device: str = "cpu") -> L.LightningModule:
    """Build ``cfg``'s objective (on ``device``), save it, read it back as every command and a resume
    do; every weight comes back under its name and in its shape (and value, off the meta device)."""
    with torch.device(device):
        built = objective(cfg, TOKENIZER.state())
        saved(built, path, trainer)
        loaded = load(path, device)
        check_resumable(path, built)
        built.load_state_dict(torch.load(path, map_location=device, weights_only=True)["state_dict"])
    assert type(loaded) is type(built) and name_of(type(loaded)) in OBJECTIVES
    mine, theirs = built.state_dict(), loaded.state_dict()
    assert mine.keys() == theirs.keys() and all(k.startswith("net.") for k in mine)
    for key, value in mine.items():
        assert value.shape == theirs[key].shape, key
        assert device == "meta" or torch.equal(value, theirs[key]), key
    return loaded


def study_config(study: str, value: str, *extra: str) -> DictConfig:
    """One study value's training config: its runs' overrides (zoo compare's), and ``extra``."""
    return configured([*run_overrides(STUDIES[study], value), *extra])


# --- compile: the keys are the net's ---------------------------------------------------------------

def test_a_checkpoint_s_keys_do_not_depend_on_compile(tmp_path, trainer):
    tiny = ["model=gpt", "model.net.n_layers=1", "model.net.context=16", "model.net.block.d_model=32",
            "model.net.block.n_heads=2"]
    eager, compiled = (objective(configured([*tiny, f"compile={on}"]), TOKENIZER.state()) for on in ("false", "true"))
    paths = {name: saved(model, tmp_path / f"{name}.ckpt", trainer) for name, model in
             (("eager", eager), ("compiled", compiled))}
    stored = {name: torch.load(path, weights_only=True)["state_dict"] for name, path in paths.items()}
    assert stored["eager"].keys() == stored["compiled"].keys() == {f"net.{k}" for k in eager.net.state_dict()}
    # a checkpoint written before: the net a second time, under the compiled wrapper's names
    old = {**stored["compiled"], **{f"forward_net._orig_mod.{k[4:]}": v for k, v in stored["compiled"].items()}}
    torch.save({**torch.load(paths["compiled"], weights_only=True), "state_dict": old}, tmp_path / "old.ckpt")
    for path in (*paths.values(), tmp_path / "old.ckpt"):  # resumed with compile on or off
        weights = torch.load(path, weights_only=True)["state_dict"]
        for model in (eager, compiled):
            check_resumable(path, model)
            model.load_state_dict(weights)
            assert all(torch.equal(v, weights[f"net.{k}"]) for k, v in model.net.state_dict().items())
        assert load(path).hparams.compile == (path != paths["eager"])


# --- every preset, every study value -----------------------------------------------------------------

def samples_and_exports(path: Path, out: Path, capsys) -> None:
    """Sample from the checkpoint where its objective generates, and export it: written, or refused
    by the export's own check of what the transformers class can express (never by the reader)."""
    if name_of(type(load(path))) in GENERATORS:
        call("generate", [f"ckpt={path}", "max_new_tokens=3", "prompt=AB"])
        assert capsys.readouterr().out.startswith("AB")
    try:
        export(path, out)
    except ValueError as refused:  # what the class cannot express: the zoo's format holds it
        assert "may build" not in str(refused) and "\n" not in str(refused), refused
        assert export(path, out, hf_class=ZOO_FORMAT)[0] is None
    assert any(out.iterdir())


def check_stored(cfg: DictConfig, where: str) -> None:
    """The reader's check (zoo.checkpoint.check_names) of what a checkpoint of ``cfg`` stores: its
    model's resolved config, its objective aside (stored by short name)."""
    stored = {k: v for k, v in OmegaConf.to_container(cfg.model, resolve=True).items() if k != "_target_"}
    check_names({"zoo_objective": name_of(hydra.utils.get_class(cfg.model._target_)), "hyper_parameters": stored},
                Path(where))


@pytest.mark.parametrize("model", model_names())
def test_every_preset_names_only_what_a_checkpoint_may(model):
    check_stored(configured([f"model={model}"]), f"model={model}")


@pytest.mark.parametrize(("study", "value"), STUDY_VALUES)
def test_every_study_value_names_only_what_a_checkpoint_may(study, value):
    check_stored(study_config(study, value), f"study={study} value={value}")


@pytest.mark.slow
@pytest.mark.parametrize("model", model_names())
def test_every_preset_s_checkpoint_reads_back(model, tmp_path, trainer, capsys, monkeypatch):
    """A CPU preset with its weights (at the tiny sizes of the model x data table's training runs,
    else at its own), sampled and exported; a paper size on the meta device, at its size."""
    from test_model_data_table import MODELS as TINY  # (composes every config when imported)

    path = tmp_path / "m.ckpt"
    if model not in TINY:
        with monkeypatch.context() as guard:  # the size guard: nothing is allocated on the meta device
            for module in ("zoo.objectives.base", "zoo.objectives.loading"):
                guard.setattr(f"{module}.check_size", lambda *args: None)
            shapes = round_trip(configured([f"model={model}"]), path, trainer, "meta")
        if sum(p.numel() for p in shapes.parameters()) > CPU_SIZE:
            return
    round_trip(configured([f"model={model}", *TINY.get(model, [])]), path, trainer)
    samples_and_exports(path, tmp_path / "out", capsys)


def test_a_checkpoint_of_the_positions_study_s_alibi_samples(tmp_path, trainer, capsys):
    """ALiBi is a study value's (no preset names it): its checkpoints were refused by every reader."""
    path = tmp_path / "alibi.ckpt"
    loaded = round_trip(study_config("positions_shakespeare_cpu", "alibi", "model.net.n_layers=1"), path, trainer)
    assert type(loaded.net.bias).__name__ == "ALiBi"
    call("generate", [f"ckpt={path}", "max_new_tokens=4", "prompt=AB"])
    assert capsys.readouterr().out.startswith("AB")


@pytest.mark.parametrize("value", ["local", "local_global", "strided"])
def test_a_gpt_whose_mask_gpt2_does_not_express_is_refused_by_it_and_written_in_the_zoo_format(
        value, tmp_path, trainer):
    """The masks study's windows (64 keys) and strides were exported as GPT2LMHeadModel, the mask
    dropped: the export's check ran on 16 tokens, inside every window. It runs on the context."""
    path = tmp_path / "masked.ckpt"
    net = round_trip(study_config("masks_shakespeare_cpu", value, "model.net.n_layers=2"), path, trainer).net
    with pytest.raises(ValueError, match=f"GPT2LMHeadModel does not express .*hf_class={ZOO_FORMAT}"):
        export(path, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    assert export(path, tmp_path / "zoo", hf_class=ZOO_FORMAT)[0] is None
    x = torch.randint(0, TOKENIZER.vocab_size, (2, net.context))
    torch.testing.assert_close(read_zoo(tmp_path / "zoo")(x), net.eval()(x), rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize(("study", "value"), STUDY_VALUES)
def test_every_study_value_s_checkpoint_samples_and_exports(study, value, tmp_path, trainer, capsys):
    round_trip(study_config(study, value), tmp_path / "v.ckpt", trainer)
    samples_and_exports(tmp_path / "v.ckpt", tmp_path / "out", capsys)


# --- what the allow-list is derived from --------------------------------------------------------------

def _configured_targets(node) -> set[str]:
    if isinstance(node, dict):
        return ({node["_target_"]} if "_target_" in node else set()).union(*map(_configured_targets, node.values()))
    if isinstance(node, list):
        return set().union(*map(_configured_targets, node))
    return set()


def test_the_allow_list_is_what_the_configs_name_and_nothing_that_runs_a_run():
    derived = config_targets()
    assert "zoo.nn.alibi.ALiBi" in derived and "zoo.nn.block.BlockConfig" in derived
    for target in ALLOWED_TARGETS:
        assert callable(hydra.utils.get_object(target)), target
    # the objectives are named by short name; trainers, loggers, callbacks and data modules are never stored
    for group in ("trainer", "logger", "callbacks", "data"):
        named = _configured_targets([yaml.safe_load(path.read_text()) for path in (CONF_DIR / group).glob("*.yaml")])
        assert named and not named & ALLOWED_TARGETS, (group, named & ALLOWED_TARGETS)
    assert not set(OBJECTIVES.values()) & ALLOWED_TARGETS
    assert STORED_TARGETS <= ALLOWED_TARGETS


def test_a_class_a_config_names_is_allowed_by_that_alone(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "block").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "study").mkdir()
    (tmp_path / "model" / "m.yaml").write_text("defaults:\n  - /block@net.block: b\n_target_: zoo.objectives.lm.NextTokenLM\n"
                                               "net:\n  _target_: pkg.Net\n")
    (tmp_path / "block" / "b.yaml").write_text("_target_: pkg.Block\n")
    (tmp_path / "data" / "d.yaml").write_text("_target_: pkg.Data\n")
    (tmp_path / "study" / "s.yaml").write_text("base: [model=m, data.x=1]\nvalues:\n  a: ['++model.net.bias={_target_:pkg.Bias,n:4}']\n"
                                               "  b: ['data.y={_target_:pkg.Other}']\n")
    assert config_targets(tmp_path) == {"pkg.Net", "pkg.Block", "pkg.Bias"}


def test_what_a_converter_writes_into_a_net_config_is_allowed():
    """The converters reshape a net config (a folder's masks): each class they name is one a config names."""
    named = {node.value for path in (ROOT / "zoo" / "convert").glob("*.py")
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) and node.value.startswith("zoo.nn.") and node.value.count(".") == 3
             and node.value.rsplit(".", 1)[1][:1].isupper()}
    assert named and named <= ALLOWED_TARGETS, named - ALLOWED_TARGETS


# --- trained by train.py, resumed, sampled and exported by the commands ------------------------------

def _images(data: Path) -> None:
    from test_vit_data import make_image_folder
    make_image_folder(data, {"train": 4, "test": 2})


def _wikitext(data: Path) -> None:
    from bert_wikitext_files import write_wikitext
    write_wikitext(data)


QUICK = ["trainer.log_every_n_steps=1", "optim.warmup_steps=1", "test=false", "data.batch_size=4"]
# name -> (writes the data, the run's overrides): ALiBi (the positions study's value), a compiled
# run (resumed eagerly), BERT and ViT
RUNS = {
    "gpt_alibi": (write_shakespeare, [*TINY_GPT, "model.sample_tokens=0", "model.net.embedder.positions=none",
                                      "++model.net.bias={_target_:zoo.nn.alibi.ALiBi,n_heads:2}"]),
    "gpt_compiled": (write_shakespeare, [*TINY_GPT, "model.sample_tokens=0", "compile=true"]),
    "bert": (_wikitext, ["model=bert", "data=wikitext", "data.vocab_size=120", "model.net.n_layers=2",
                         "model.net.context=32", "model.net.block.d_model=32", "model.net.block.n_heads=2"]),
    "vit": (_images, ["model=vit", "data=cifar10", "data.val_size=8", "model.net.n_layers=1",
                      "model.net.block.d_model=32", "model.net.block.n_heads=2"]),
}


def _command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m zoo ARGS`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "zoo", *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"))


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_trained_checkpoint_resumes_samples_and_exports(run, tmp_path):
    write, overrides = RUNS[run]
    data, folder = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    write(data)
    run_train(folder, data, *QUICK, *overrides, "trainer.max_steps=1", timeout=600)
    last = folder / "checkpoints" / "last.ckpt"
    assert not any("_orig_mod" in key for key in torch.load(last, weights_only=True)["state_dict"])
    resumed = [*overrides, "compile=false"] if run == "gpt_compiled" else overrides  # the other setting
    run_train(folder, data, *QUICK, *resumed, "trainer.max_steps=2", f"ckpt_path={last}", timeout=600)
    assert torch.load(last, weights_only=True)["global_step"] == 2
    if run.startswith("gpt"):
        sampled = _command("generate", f"ckpt={last}", "max_new_tokens=4", "prompt=CITIZEN", cwd=tmp_path)
        assert sampled.returncode == 0 and sampled.stdout.startswith("CITIZEN"), sampled.stderr[-3000:]
    exported = _command("export", f"ckpt={last}", f"out={tmp_path / 'out'}", cwd=tmp_path)
    if run == "gpt_alibi":  # GPT-2 has no ALiBi: the export's own check refuses it, the reader does not
        assert exported.returncode != 0 and "GPT2LMHeadModel" in exported.stderr, exported.stderr[-3000:]
        assert "may build" not in exported.stderr
    else:
        assert exported.returncode == 0 and (tmp_path / "out" / "model.safetensors").is_file(), exported.stderr[-3000:]
