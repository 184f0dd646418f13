"""Exports that the real clients run from the folder alone (zoo/convert/export.py): for each family
with a pipeline task, a tiny checkpoint built here is exported and the ``transformers`` pipeline,
given nothing but the folder, answers what the zoo's own command answers; the folder holds the
run's own special ids, labels, tokenizer and processor; a non-empty ``out=`` is refused; a
checkpoint whose outputs are not finite is not exported; every family's from-scratch checkpoint
exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import open_dict

from exactness import randomise
from zoo.cli.commands import call
from zoo.convert.common import compose_config
from zoo.convert.export import export
from zoo.data.tokenizers import CharTokenizer, HFTokenizer, WordTokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak, speak.\n"


def checkpoint(path: Path, model: str, dims: dict, *overrides: str, tokenizer=None, **hparams) -> torch.nn.Module:
    """A zoo checkpoint of ``model=<model>`` at ``path``, built as train.py builds it (the data's
    ``dims``, its ``tokenizer``, objective ``hparams`` the data would give, e.g. ``class_names``),
    its weights drawn away from their init so that its outputs are worth comparing. Returns the net."""
    from zoo.registry import name_of
    from zoo.train.run import objective

    cfg = compose_config([f"model={model}", *overrides])
    with open_dict(cfg):
        cfg.dims = dims
        cfg.model.update(hparams)
    built = objective(cfg, tokenizer.state() if tokenizer is not None else None)
    randomise(built.net, gain=2.0)
    torch.save({"zoo_objective": name_of(type(built)), "hyper_parameters": dict(built.hparams),
                "state_dict": built.state_dict()}, path)
    return built.net.eval()


TINY_LM = ["model.net.n_layers=2", "model.net.block.d_model=16", "model.net.block.n_heads=2",
           "model.net.block.d_ff=32", "model.net.context=64"]


def _generated(capsys, ckpt: Path, prompt: str, n: int) -> str:
    """``zoo generate``'s greedy continuation of ``prompt`` (``n`` tokens), as it prints it."""
    capsys.readouterr()
    call("generate", [f"ckpt={ckpt}", f"prompt='{prompt}'", f"max_new_tokens={n}", "temperature=0"])
    return capsys.readouterr().out.split("\n---\n")[0]


@pytest.mark.parametrize("model,overrides", [("gpt", []), ("mistral", ["model.net.block.n_kv_heads=1",
                                                                       "model.net.mask.window=8"])])
def test_a_char_level_language_model_generates_in_the_text_generation_pipeline(tmp_path, capsys, model, overrides):
    """The run's char tokenizer travels as a tokenizers folder; no special id of GPT-2 / Mistral's
    own vocabulary (50256, 1, 2 = "!") is left in the config: a char-level run has none."""
    from transformers import AutoTokenizer, pipeline

    tok = CharTokenizer.from_text(TEXT)
    checkpoint(tmp_path / "lm.ckpt", model, {"vocab_size": tok.vocab_size}, *TINY_LM, *overrides, tokenizer=tok)
    export(tmp_path / "lm.ckpt", tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    generation = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        assert config.get(key) is None and generation.get(key) is None, key
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= set(
        p.name for p in (tmp_path / "out").iterdir())
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert hf_tok(TEXT, add_special_tokens=True).input_ids == tok.encode(TEXT)
    assert hf_tok.model_max_length == 64
    prompt = "Speak, "
    text = pipeline("text-generation", model=str(tmp_path / "out"))(prompt, max_new_tokens=12, do_sample=False)
    assert text[0]["generated_text"] == _generated(capsys, tmp_path / "lm.ckpt", prompt, 12)
