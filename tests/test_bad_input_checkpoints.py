"""Checkpoints are untrusted data: nothing a file names is run, in every command that reads one;
real checkpoints (current and former objective names) still load; the inference commands
refuse settings that make no sense (issue 13)."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import hydra
import pytest
import torch
from omegaconf import open_dict

from conftest import ROOT, TINY_GPT, run_train, write_shakespeare
from zoo.cli.commands import call
from zoo.convert.common import compose_config
from zoo.models.presets import DIMS
from zoo.objectives.loading import check_resumable, load
from zoo.checkpoint import check_names, net_state
from zoo.data.pretrained import tokenizer_of
from zoo.train.run import objective
from zoo.registry import (ALLOWED_CONVERTERS, ALLOWED_TARGETS, FORMER_NAMES, OBJECTIVES, family_modules, name_of,
                          objective_class)

OPEN = {"_target_": "builtins.open", "file": "pwned", "mode": "w"}


@pytest.fixture(scope="module")
def gpt_ckpt(tmp_path_factory) -> Path:
    """A real checkpoint: a tiny GPT trained 2 steps by train.py."""
    root = tmp_path_factory.mktemp("gpt")
    run_train(root / "run", write_shakespeare(root / "data"), *TINY_GPT, "trainer.max_steps=2",
              "trainer.val_check_interval=2", "test=false", "model.sample_tokens=0")
    return root / "run" / "checkpoints" / "last.ckpt"


def objective_of(model: str, *overrides: str):
    """A freshly built objective of ``model=`` (tiny shapes; the describe table's stand-in dims)."""
    cfg = compose_config([f"model={model}", "model.net.block.d_model=32", "model.net.block.n_heads=2",
                          "model.net.block.d_ff=64", *overrides])
    with open_dict(cfg):  # (and what an image dataset tells a classifier)
        cfg.dims = {**DIMS, "class_names": [str(i) for i in range(DIMS["num_classes"])], "pixel_mean": [0.5] * 3,
                    "pixel_std": [0.5] * 3}
    return objective(cfg)


def save_objective(objective, path: Path) -> Path:
    """What a Lightning checkpoint of ``objective`` holds for the readers, its name from the objective's own hook."""
    ckpt = {"hyper_parameters": dict(objective.hparams), "state_dict": objective.state_dict()}
    objective.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return path


def hostile(gpt_ckpt: Path, root: Path) -> dict[str, tuple[dict, str]]:
    """Checkpoints that pass ``weights_only=True`` and name code to run: kind -> (dict, the value the refusal names)."""
    real = torch.load(gpt_ckpt, weights_only=True)

    def edited(edit) -> dict:
        ckpt = copy.deepcopy(real)
        edit(ckpt["hyper_parameters"])
        return ckpt

    (root / "secret.txt").write_text("secret")
    (root / "loot").mkdir(exist_ok=True)
    return {
        "popen": ({"zoo_objective": "subprocess.Popen", "hyper_parameters": {"args": ["touch", "pwned"]},
                   "state_dict": {}}, "subprocess.Popen"),
        "library class as objective": ({**real, "zoo_objective": "torch.nn.Linear"}, "torch.nn.Linear"),
        "touch as net": (edited(lambda h: h.update(net={"_target_": "pathlib.Path.touch", "_args_": ["pwned"]})),
                         "pathlib.Path.touch"),
        "open in the embedder": (edited(lambda h: h["net"]["embedder"].update(extra=OPEN)), "builtins.open"),
        "open deep in a list": (edited(lambda h: h["net"]["block"].update(x=[1, {"y": [{"z": OPEN}]}])),
                                "builtins.open"),
        "open as span corruption": (edited(lambda h: h.update(span_corruption=OPEN)), "builtins.open"),
        "target not a string": (edited(lambda h: h["net"]["head"].update(_target_=["builtins.open"])),
                                "['builtins.open']"),
        "interpolation": (edited(lambda h: h["net"]["head"].update(bias="${oc.env:HOME}")), "${oc.env:HOME}"),
        "copy as converter": (edited(lambda h: h.update(net=str(root / "secret.txt"), init_from=str(root / "loot"),
                                                        converter="shutil.copy")), "shutil.copy"),
        "download as converter": (edited(lambda h: h.update(converter="zoo.data.download.ensure_file")),
                                  "zoo.data.download.ensure_file"),
    }


def _readers(tmp_path: Path, gpt_ckpt: Path) -> dict:
    """Every way the zoo reads a checkpoint, as a function of its path."""
    from zoo.inference.answering import Answerer
    from zoo.objectives.classification import Classification
    from zoo.cli.transcribe import load_model
    from zoo.cli.translate import translate

    hparams = torch.load(gpt_ckpt, weights_only=True)["hyper_parameters"]
    model = load(gpt_ckpt)
    return {
        "load (zoo generate)": load,
        "zoo translate": lambda p: translate(str(p), ["Ein Hund."]),
        "zoo transcribe": lambda p: load_model(str(p)),
        "zoo answer": Answerer,
        "zoo attention-maps": lambda p: call("attention-maps", [f"ckpt={p}", "text=hi", f"out={tmp_path / 'att'}"]),
        "model.init_from": lambda p: objective_class("lm")(**{**hparams, "init_from": str(p)}),
        "ckpt_path resume": lambda p: check_resumable(p, model),
        "tokenizer_of (data.tokenizer_from)": tokenizer_of,
        "net_state (vision_init / lm_init)": net_state,
        "load_from_checkpoint": lambda p: Classification.load_from_checkpoint(p, weights_only=True),
    }


READERS = ["load (zoo generate)", "zoo translate", "zoo transcribe", "zoo answer", "zoo attention-maps",
           "model.init_from", "ckpt_path resume", "tokenizer_of (data.tokenizer_from)",
           "net_state (vision_init / lm_init)", "load_from_checkpoint"]
KINDS = ["popen", "library class as objective", "touch as net", "open in the embedder", "open deep in a list",
         "open as span corruption", "target not a string", "interpolation", "copy as converter",
         "download as converter"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_reader_refuses_a_hostile_checkpoint_and_runs_nothing(kind, tmp_path, gpt_ckpt, monkeypatch):
    ckpt, named = hostile(gpt_ckpt, tmp_path)[kind]
    path = tmp_path / "p.ckpt"
    torch.save(ckpt, path)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    readers = _readers(tmp_path, gpt_ckpt)
    assert sorted(readers) == sorted(READERS)
    for reader in READERS:
        with pytest.raises(ValueError, match=re.escape(named)):
            readers[reader](path)
    assert list(work.iterdir()) == [], "a file appeared"
    assert list((tmp_path / "loot").iterdir()) == [] and not (tmp_path / "att").exists()


def _env() -> dict[str, str]:
    # the worktree's zoo, whatever the current directory
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")


@pytest.mark.parametrize("kind", ["popen", "touch as net"])
def test_commands_refuse_a_hostile_checkpoint_as_subprocesses(kind, tmp_path, gpt_ckpt):
    ckpt, named = hostile(gpt_ckpt, tmp_path)[kind]
    torch.save(ckpt, tmp_path / "p.ckpt")
    work = tmp_path / "cwd"
    work.mkdir()
    for cmd in ([str(ROOT / "generate.py"), f"ckpt={tmp_path / 'p.ckpt'}"],
                ["-m", "zoo", "attention-maps", f"ckpt={tmp_path / 'p.ckpt'}", "text=hi"]):
        out = subprocess.run([sys.executable, *cmd], cwd=work, env=_env(), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode != 0 and named in out.stderr, out.stderr[-2000:]
        assert list(work.iterdir()) == [], f"{cmd} left {list(work.iterdir())}"


def test_read_only_commands_write_only_their_output_and_keep_the_cwd(tmp_path, gpt_ckpt, monkeypatch, capsys):
    """Hydra runs a checkpoint-reading command with no run directory, .hydra/ or log file."""
    from zoo.cli.commands import main

    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    for argv in (["generate", f"ckpt={gpt_ckpt}", "max_new_tokens=2", "prompt=CITIZEN"],
                 ["attention-maps", f"ckpt={gpt_ckpt}", "text=hi", f"out={tmp_path / 'att'}"]):
        monkeypatch.setattr(sys, "argv", ["zoo", *argv])
        main()
        assert Path.cwd() == work
    assert capsys.readouterr().out.startswith("CITIZEN")
    assert list(work.iterdir()) == [] and (tmp_path / "att" / "self_layer00.png").is_file()


@pytest.mark.slow  # a train.py start-up: ~20 s
def test_train_refuses_to_resume_from_a_hostile_checkpoint(tmp_path, gpt_ckpt):
    ckpt, named = hostile(gpt_ckpt, tmp_path)["popen"]
    torch.save(ckpt, tmp_path / "p.ckpt")
    work = tmp_path / "cwd"
    work.mkdir()
    env = dict(_env(), ZOO_DATA_DIR=str(gpt_ckpt.parents[2] / "data"), ZOO_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={tmp_path / 'run'}", *TINY_GPT,
                          "trainer.max_steps=4", f"ckpt_path={tmp_path / 'p.ckpt'}"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and named in out.stderr, out.stderr[-2000:]
    assert list(work.iterdir()) == []
    assert not list((tmp_path / "run").glob("**/*.ckpt"))


def test_a_real_checkpoint_loads_and_stores_the_short_name(gpt_ckpt):
    raw = torch.load(gpt_ckpt, weights_only=True)
    assert raw["zoo_objective"] == "lm"
    objective = load(gpt_ckpt, accepts=("lm",), command="this test")
    assert type(objective).__name__ == "NextTokenLM" and not objective.training
    for name, value in objective.state_dict().items():
        assert torch.equal(value, raw["state_dict"][name]), name
    check_resumable(gpt_ckpt, objective)  # the same run's config: resumable


def test_a_checkpoint_with_the_former_dotted_objective_name_loads(gpt_ckpt, tmp_path):
    raw = torch.load(gpt_ckpt, weights_only=True)
    raw["zoo_objective"] = "zoo.objectives.lm.NextTokenLM"  # what checkpoints stored before the short names
    torch.save(raw, tmp_path / "old.ckpt")
    objective = load(tmp_path / "old.ckpt", accepts=("lm",), command="this test")
    assert type(objective).__name__ == "NextTokenLM"
    for name, value in objective.state_dict().items():
        assert torch.equal(value, raw["state_dict"][name]), name


def test_an_unknown_objective_names_the_value_and_the_known_names(gpt_ckpt, tmp_path):
    raw = torch.load(gpt_ckpt, weights_only=True)
    raw["zoo_objective"] = "zoo.objectives.lm.NextTokenLMv2"
    torch.save(raw, tmp_path / "x.ckpt")
    known = re.escape(str(sorted(OBJECTIVES)))  # every short name, in order
    with pytest.raises(ValueError, match=rf"'zoo.objectives.lm.NextTokenLMv2': a zoo checkpoint names one of {known}"):
        load(tmp_path / "x.ckpt")


def test_the_registry_covers_every_objective_and_resolves():
    """(What every preset and study value stores: tests/test_checkpoint_reload.py.)"""
    for name, path in OBJECTIVES.items():
        assert name_of(objective_class(name)) == name and FORMER_NAMES[path] == name
    for target in ALLOWED_TARGETS | ALLOWED_CONVERTERS:
        assert callable(hydra.utils.get_object(target)), target


# What checkpoints have stored as model.converter: these must keep reading (literal on purpose, as FORMER_NAMES)
STORED_CONVERTERS = {f"zoo.convert.{name}.pretrained" for name in (
    "bert", "big_bird", "gpt2", "gpt_neo", "llama", "llava", "mistral", "modernbert", "t5", "videomae", "vit",
    "vitdet", "vivit", "whisper", "yolos")}


def test_every_converter_a_checkpoint_stored_is_still_allowed():
    assert STORED_CONVERTERS <= ALLOWED_CONVERTERS


@pytest.mark.parametrize("converter", [
    "zoo.convert.hub.resolve",  # the zoo's own, but no family's hook (it downloads)
    "zoo.convert.common.pretrained",  # a module of zoo/convert that is not a family
    "zoo.convert.export.export", "zoo.convert.llama.from_transformers", "zoo.convert.llama.LLAMA.pretrained",
    "zoo.convert.llama", "zoo.convert..pretrained", "os.system.pretrained"])
def test_a_converter_other_than_a_family_hook_is_refused_before_any_import(converter, tmp_path):
    ckpt = {"hyper_parameters": {"converter": converter, "net": {}}}
    before = set(sys.modules)
    with pytest.raises(ValueError, match=rf"converter={re.escape(repr(converter))} is not a function a zoo"):
        check_names(ckpt, tmp_path / "x.ckpt")
    assert set(sys.modules) == before


def test_family_modules_are_read_not_imported(tmp_path):
    """The family modules are found by their source (a top-level FAMILY), so what a checkpoint may
    name as its converter is known before anything is imported: a module's code never runs."""
    (tmp_path / "fam.py").write_text(f"open({str(tmp_path / 'pwned')!r}, 'w')\nFAMILY = object()\n"
                                     f"def pretrained(net_cfg, path): ...\n")
    (tmp_path / "annotated.py").write_text("FAMILY: object = None\n")
    (tmp_path / "helper.py").write_text("def pretrained(net_cfg, path): ...\nclass X:\n    FAMILY = 1\n")
    (tmp_path / "said.py").write_text('"""FAMILY = Family(...) in a docstring is no declaration."""\n')
    assert family_modules(tmp_path) == ("annotated", "fam")
    assert not (tmp_path / "pwned").exists() and "fam" not in sys.modules
    assert set(family_modules()) >= {"llama", "mistral", "gpt2"} and "common" not in family_modules()


def test_resuming_from_another_family_says_what_the_checkpoint_holds(gpt_ckpt, tmp_path):
    bert = objective_of("bert", "model.net.n_layers=1")
    with pytest.raises(ValueError, match=r"holds a lm checkpoint \(NextTokenLM, Model\(embedder=TokenEmbedder, "
                                         r"head=LMHead, mask=CausalMask\)\), but this run trains mlm \(MaskedLM, "
                                         r"Model\(embedder=TokenEmbedder, head=MLMHead, mask=NoMask\)\)"):
        check_resumable(gpt_ckpt, bert)
    check_resumable(save_objective(bert, tmp_path / "bert.ckpt"), bert)  # its own checkpoint fits
    llama = objective_of("llama", "model.net.n_layers=2", "model.net.block.n_kv_heads=1")
    with pytest.raises(ValueError, match=r"lm Model\(.*\) of other sizes than configured: \d+ weights it lacks "
                                         r"\(e\.g\. .*\d+ of another shape \(e\.g\. net\.\S+: \(\d+, 32\) in the "
                                         r"checkpoint, \(32000, 32\) configured"):
        check_resumable(gpt_ckpt, llama)


@pytest.mark.parametrize(("setting", "message"), [
    ("temperature=-1", r"temperature=-1 is negative: use 0 \(greedy\) or a positive value"),
    ("top_k=0", r"top_k=0 keeps no token: use an integer >= 1"),
    ("top_p=0", r"top_p=0 is outside \(0, 1\]"),
    ("top_p=1.5", r"top_p=1.5 is outside \(0, 1\]"),
    ("prompt=''", r"prompt='' holds no token"),
])
def test_generate_refuses_settings_that_make_no_sense(setting, message, gpt_ckpt, capsys):
    given = [f"ckpt={gpt_ckpt}", "max_new_tokens=3"]
    with pytest.raises(ValueError, match=message):
        call("generate", [*given, setting])
    assert capsys.readouterr().out == ""
    # the edges of the ranges are fine: greedy, one candidate, the whole distribution
    call("generate", [*given, "temperature=0", "top_k=1", "top_p=1.0", "prompt=CITIZEN"])
    assert capsys.readouterr().out.startswith("CITIZEN")


def test_generate_and_translate_refuse_a_model_that_cannot_do_it(tmp_path):
    from zoo.cli.translate import translate

    mlm = save_objective(objective_of("bert", "model.net.n_layers=1"), tmp_path / "bert.ckpt")
    vit = save_objective(objective_of("vit", "model.net.n_layers=1"), tmp_path / "vit.ckpt")
    for ckpt, held in ((mlm, r"mlm checkpoint \(MaskedLM\)"), (vit, r"classification checkpoint \(Classification\)")):
        with pytest.raises(ValueError, match=f"is a {held}: zoo generate needs lm or vlm"):
            call("generate", [f"ckpt={ckpt}"])
        with pytest.raises(ValueError, match=f"is a {held}: zoo translate needs seq2seq"):
            translate(str(ckpt), ["Ein Hund."])
    out = subprocess.run([sys.executable, str(ROOT / "generate.py"), f"ckpt={mlm}"], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "bert.ckpt is a mlm checkpoint (MaskedLM): zoo generate needs lm or vlm" in out.stderr


def test_translate_refuses_an_empty_source(tmp_path):
    with pytest.raises(ValueError, match=r"text='' is empty: zoo translate needs a source sentence"):
        call("translate", [f"ckpt={tmp_path / 'never-read.ckpt'}", "text="])
    with pytest.raises(ValueError, match=r"text='  ' is empty"):
        call("translate", [f"ckpt={tmp_path / 'never-read.ckpt'}", "text='  '"])


def test_a_per_layer_mask_checkpoint_loads(tmp_path):
    """PerLayer is on the allow-list: a checkpoint with a per-layer mask pattern reads back."""
    masks = "[{_target_:zoo.nn.masks.CausalMask},{_target_:zoo.nn.masks.PrefixLMMask}]"
    objective = objective_of("gpt", "model.net.mask._target_=zoo.nn.masks.PerLayer", f"+model.net.mask.masks={masks}",
                             "model.net.n_layers=2")
    loaded = load(save_objective(objective, tmp_path / "per_layer.ckpt"), accepts=("lm",), command="this test")
    assert [type(m).__name__ for m in loaded.net.stack.layer_masks] == ["CausalMask", "PrefixLMMask"]


@pytest.mark.parametrize(("model", "former", "inputs"), [
    ("gpt", "zoo.model.Model", lambda: (torch.randint(0, DIMS["vocab_size"], (2, 6)),)),
    ("transformer", "zoo.encoder_decoder.EncoderDecoder",
     lambda: (torch.randint(0, DIMS["vocab_size"], (2, 7)), torch.randint(0, DIMS["vocab_size"], (2, 5)))),
])
def test_a_checkpoint_written_before_the_move_loads_with_the_same_logits(model, former, inputs, tmp_path):
    """Before zoo/ was grouped into packages, a stored net config named its container by the
    module of the time (zoo.model.Model): registry.FORMER_TARGETS reads it as today's class."""
    layers = ["model.net.n_layers=1"] if model == "gpt" else ["model.net.n_encoder_layers=1",
                                                              "model.net.n_decoder_layers=1"]
    objective = objective_of(model, *layers).eval()
    path = save_objective(objective, tmp_path / "old.ckpt")
    raw = torch.load(path, weights_only=True)
    raw["hyper_parameters"]["net"]["_target_"] = former
    torch.save(raw, path)
    loaded = load(path)
    assert type(loaded.net) is type(objective.net) and loaded.hparams.net["_target_"] != former
    x = inputs()
    with torch.no_grad():
        assert torch.equal(loaded.net(*x), objective.net(*x))


def test_an_unknown_former_module_path_is_refused_naming_it(tmp_path):
    path = save_objective(objective_of("gpt", "model.net.n_layers=1"), tmp_path / "old.ckpt")
    raw = torch.load(path, weights_only=True)
    raw["hyper_parameters"]["net"]["_target_"] = "zoo.old_model.Model"  # no module of the zoo was ever called that
    torch.save(raw, path)
    with pytest.raises(ValueError, match=r"hyper_parameters\.net\._target_='zoo\.old_model\.Model' is not a class a "
                                         r"zoo checkpoint may build"):
        load(path)
