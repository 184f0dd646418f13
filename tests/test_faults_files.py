"""Hostile and broken files (issue 27, the folder part): a Hugging Face folder read by
``model.init_from=DIR`` / ``zoo embed`` holds exactly the weights its config describes, as finite
floats, from files inside the folder, and every broken file is refused naming the file and the key;
a net too big for the machine is refused before anything is allocated; a file that is no
checkpoint says so. The folders are tiny random GPT-2 and BERT models the tests write."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from hydra.errors import InstantiationException
from omegaconf import open_dict
from safetensors.torch import load_file, save_file

from test_embed import bert_folder, embed, save_checkpoint, sentence_transformers_folder, texts_override
from test_init_from import objective_from, tiny_gpt2
from zoo.convert.common import compose_config
from zoo.convert.hub import resolve
from zoo.models.size import LIMIT_ENV
from zoo.objectives.loading import load
from zoo.checkpoint import read
from zoo.data.pretrained import tokenizer_of
from zoo.train.run import objective

DIMS = {"vocab_size": 50}


def built(model: str, *overrides: str):
    """``model=<model>`` with ``overrides`` built as train.py does (Hydra's wrapper taken off the error)."""
    cfg = compose_config([f"model={model}", *overrides])
    with open_dict(cfg):
        cfg.dims = DIMS
    try:
        return objective(cfg)
    except InstantiationException as err:
        raise err.__cause__ from None


def gpt2_folder(path: Path) -> Path:
    """A tiny random GPT-2 (2 layers, 50 tokens) saved with ``save_pretrained``."""
    tiny_gpt2(path)
    return path


def edit_config(folder: Path, **values) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | values))


def edit_weights(folder: Path, edit) -> None:
    file = folder / "model.safetensors"
    state = load_file(str(file))
    edit(state)
    save_file(state, str(file))


# ---------------------------------------------------------------- every tensor used, every parameter filled

@pytest.mark.parametrize("layers", [0, 1])
def test_a_config_using_fewer_layers_than_the_weights_hold_is_refused_naming_both(tmp_path, layers):
    folder = gpt2_folder(tmp_path / "hf")
    edit_config(folder, n_layer=layers)
    with pytest.raises(ValueError, match=rf"model.safetensors: \d+ tensors .*does not use \(.*h\.{layers}\.attn\.c_attn\."
                                         rf"bias.*config.json says n_layer={layers}"):
        objective_from("gpt", folder, DIMS)


def test_an_embed_folder_whose_config_uses_fewer_layers_is_refused(tmp_path):
    bert_folder(tmp_path / "hf")  # 3 layers
    edit_config(tmp_path / "hf", num_hidden_layers=1)
    with pytest.raises(ValueError, match=r"does not use \(encoder\.layer\.1\..*num_hidden_layers=1"):
        embed(tmp_path, f"init_from={tmp_path / 'hf'}", texts_override(["a cat"]))


def test_an_extra_tensor_is_refused_by_name(tmp_path):
    folder = gpt2_folder(tmp_path / "hf")
    edit_weights(folder, lambda state: state.update({"smuggled.weight": torch.ones(3)}))
    with pytest.raises(ValueError, match=r"model.safetensors: 1 tensors .*\(smuggled.weight\)"):
        objective_from("gpt", folder, DIMS)


def test_a_missing_weight_is_named_with_its_file(tmp_path):
    folder = gpt2_folder(tmp_path / "hf")
    edit_weights(folder, lambda state: state.pop("transformer.h.1.mlp.c_fc.weight"))
    with pytest.raises(ValueError, match=r"model.safetensors: no tensor 'h.1.mlp.c_fc.weight'.*n_layer=2"):
        objective_from("gpt", folder, DIMS)


# ---------------------------------------------------------------- float, finite

def test_an_integer_embedding_table_is_refused_naming_tensor_and_file(tmp_path):
    folder = gpt2_folder(tmp_path / "hf")
    edit_weights(folder, lambda state: state.update({"transformer.wte.weight": torch.ones(50, 16, dtype=torch.int64)}))
    with pytest.raises(ValueError, match=r"model.safetensors: tensor 'transformer.wte.weight' holds torch.int64 values"):
        objective_from("gpt", folder, DIMS)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_naming_tensor_and_file(tmp_path, bad):
    folder = gpt2_folder(tmp_path / "hf")

    def poison(state):
        state["transformer.h.0.ln_1.weight"][3] = bad

    edit_weights(folder, poison)
    with pytest.raises(ValueError, match=r"model.safetensors: tensor 'transformer.h.0.ln_1.weight' holds 1 NaN or infinite"):
        objective_from("gpt", folder, DIMS)


def test_embed_refuses_nan_weights_and_writes_nothing(tmp_path):
    bert_folder(tmp_path / "hf")
    edit_weights(tmp_path / "hf", lambda state: state["embeddings.word_embeddings.weight"].fill_(float("nan")))
    with pytest.raises(ValueError, match="word_embeddings.weight' holds .* NaN"):
        embed(tmp_path, f"init_from={tmp_path / 'hf'}", texts_override(["a cat"]))
    assert not (tmp_path / "out" / "emb.json").exists()


# ---------------------------------------------------------------- the size, before allocating

@pytest.mark.parametrize("key, value, named", [
    ("n_layer", 10**6, "n_layer=1000000"), ("n_inner", 10**9, "block.d_ff=1000000000")])
def test_a_folder_config_too_big_for_the_machine_is_refused_quickly_naming_the_key(tmp_path, key, value, named):
    folder = gpt2_folder(tmp_path / "hf")
    edit_config(folder, **{key: value})
    start = time.monotonic()
    with pytest.raises(ValueError) as err:
        objective_from("gpt", folder, DIMS)
    assert time.monotonic() - start < 10
    assert named in str(err.value), str(err.value)


@pytest.mark.parametrize("override, named", [
    ("model.net.n_layers=1000000", "n_layers=1000000"),
    ("model.net.embedder.vocab_size=1000000000000", "embedder.vocab_size=1000000000000"),
    ("model.net.block.d_ff=10000000", "block.d_ff=10000000")])
def test_a_model_config_too_big_is_refused_naming_the_key(override, named):
    start = time.monotonic()
    with pytest.raises(ValueError, match=rf"model.net: the network would hold .* GB of parameters.*{named}"
                                         rf".*{LIMIT_ENV}"):
        built("gpt", override)
    assert time.monotonic() - start < 10


def test_a_checkpoint_whose_stored_config_is_too_big_is_refused_and_the_limit_is_an_override(tmp_path, monkeypatch):
    trained = built("gpt")  # 128 wide: a million layers are ~800 GB
    hparams = dict(trained.hparams)
    hparams["net"] = hparams["net"] | {"n_layers": 10**6}
    torch.save({"zoo_objective": "lm", "hyper_parameters": hparams, "state_dict": trained.state_dict()},
               tmp_path / "huge.ckpt")
    with pytest.raises(ValueError, match=r"huge.ckpt \(its stored model.net\): .*n_layers=1000000"):
        load(tmp_path / "huge.ckpt")
    save_checkpoint(trained, "lm", tmp_path / "small.ckpt")
    load(tmp_path / "small.ckpt")  # fits the machine
    monkeypatch.setenv(LIMIT_ENV, "1000")  # a stated limit below its ~1 MB
    with pytest.raises(ValueError, match=rf"more than 0.0 GB \({LIMIT_ENV}\)"):
        load(tmp_path / "small.ckpt")


# ---------------------------------------------------------------- files inside the folder

@pytest.mark.parametrize("shard", ["../outside.safetensors", "ABSOLUTE"])
def test_a_weight_map_naming_a_shard_outside_the_folder_is_refused(tmp_path, shard):
    folder = gpt2_folder(tmp_path / "hf")
    (folder / "model.safetensors").rename(tmp_path / "outside.safetensors")
    shard = str(tmp_path / "outside.safetensors") if shard == "ABSOLUTE" else shard
    names = load_file(str(tmp_path / "outside.safetensors"))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {n: shard for n in names}}))
    with pytest.raises(ValueError, match=r"model.safetensors.index.json weight_map: path=.*outside.safetensors.* "
                                         r"leads outside"):
        objective_from("gpt", folder, DIMS)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_symlink_out_of_the_folder_is_refused(tmp_path, name):
    folder = gpt2_folder(tmp_path / "hf")
    (folder / name).rename(tmp_path / name)
    (folder / name).symlink_to(tmp_path / name)
    with pytest.raises(ValueError, match=rf"{name}: path='{name}' leads outside"):
        objective_from("gpt", folder, DIMS)


def test_a_hub_snapshot_whose_files_link_into_its_blobs_is_read(tmp_path):
    repo = tmp_path / "models--someone--tiny"
    snapshot = gpt2_folder(repo / "snapshots" / "abc")
    (repo / "blobs").mkdir()
    for file in list(snapshot.iterdir()):
        file.rename(repo / "blobs" / file.name)
        file.symlink_to(Path("../../blobs") / file.name)
    objective_from("gpt", snapshot, DIMS)


@pytest.mark.parametrize("index, said", [
    ("[1, 2]", r"weight_map must map tensor names to shard files"),
    ('{"weight_map": {"wte.weight": 3}}', r"weight_map must map tensor names to shard files"),
    ("{not json", r"could not be read as JSON")])
def test_a_malformed_weight_map_is_named(tmp_path, index, said):
    folder = gpt2_folder(tmp_path / "hf")
    (folder / "model.safetensors.index.json").write_text(index)
    with pytest.raises(ValueError, match=rf"model.safetensors.index.json.*{said}"):
        objective_from("gpt", folder, DIMS)


@pytest.mark.parametrize("damage", ["truncated", "garbage header"])
def test_a_broken_safetensors_file_is_named(tmp_path, damage):
    folder = gpt2_folder(tmp_path / "hf")
    file = folder / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\xff" * 8 + data[8:])
    with pytest.raises(ValueError, match=rf"{file} is not a safetensors file that can be read"):
        objective_from("gpt", folder, DIMS)


# ---------------------------------------------------------------- config.json

@pytest.mark.parametrize("text, said", [
    ("[1, 2]", r"config.json: expected a JSON object, got a list"),
    ("{broken", r"config.json could not be read as JSON")])
def test_a_malformed_config_is_named(tmp_path, text, said):
    folder = gpt2_folder(tmp_path / "hf")
    (folder / "config.json").write_text(text)
    with pytest.raises(ValueError, match=said):
        objective_from("gpt", folder, DIMS)


@pytest.mark.parametrize("key, value", [("n_embd", -16), ("n_head", "2"), ("n_layer", 1.5)])
def test_a_size_that_is_not_a_whole_number_is_named(tmp_path, key, value):
    folder = gpt2_folder(tmp_path / "hf")
    edit_config(folder, **{key: value})
    with pytest.raises(ValueError, match=rf"config.json: {key}={value!r} is not a size"):
        objective_from("gpt", folder, DIMS)


def test_a_missing_size_is_named_with_the_file(tmp_path):
    bert_folder(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    del config["hidden_size"]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"hf/config.json has no hidden_size"):
        embed(tmp_path, f"init_from={tmp_path / 'hf'}", texts_override(["a cat"]))


# ---------------------------------------------------------------- tokenizers, sentence-transformers

@pytest.mark.parametrize("file, text", [("tokenizer.json", ""), ("tokenizer.json", "{bad"), ("vocab.txt", "")])
def test_an_empty_or_malformed_tokenizer_is_named(tmp_path, file, text):
    (tmp_path / "vocab.txt").unlink(missing_ok=True)
    (tmp_path / file).write_text(text)
    with pytest.raises(ValueError, match=rf"{file} is not a"):
        tokenizer_of(tmp_path)


def test_embed_refuses_a_tokenizer_smaller_than_the_embedding_table(tmp_path):
    bert_folder(tmp_path / "hf")
    vocab = (tmp_path / "hf" / "vocab.txt").read_text().split("\n")
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(vocab[:-3]) + "\n")
    size = json.loads((tmp_path / "hf" / "config.json").read_text())["vocab_size"]
    with pytest.raises(ValueError, match=rf"has {size - 2} tokens but its config.json has vocab_size={size}"):
        embed(tmp_path, f"init_from={tmp_path / 'hf'}", texts_override(["a cat"]))


@pytest.mark.parametrize("value", [-1, 0, "128"])
def test_a_bad_max_seq_length_is_named(tmp_path, value):
    sentence_transformers_folder(tmp_path / "st", "0_Transformer", "mean", True)
    (tmp_path / "st" / "0_Transformer" / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": value}))
    with pytest.raises(ValueError, match=rf"sentence_bert_config.json: max_seq_length={value!r} is not a positive"):
        embed(tmp_path, f"init_from={tmp_path / 'st'}", texts_override(["a cat"]))


# ---------------------------------------------------------------- sources

def test_a_hub_revision_with_dot_dot_is_refused_by_name():
    with pytest.raises(ValueError, match=r"revision '\.\./\.\./etc' is not a branch, tag or commit"):
        resolve("hf:someone/tiny@../../etc")


def test_a_timm_name_with_a_system_file_is_named(tmp_path):
    pytest.importorskip("timm")
    with pytest.raises(ValueError, match=r"timm:test_vit@/etc/passwd: /etc/passwd is not a weights file"):
        resolve("timm:test_vit@/etc/passwd")
    (tmp_path / "w.bin").write_text("not weights")
    with pytest.raises(ValueError, match=r"timm could not read .*w.bin as weights"):
        resolve(f"timm:test_vit@{tmp_path / 'w.bin'}")


def test_a_timm_model_offline_names_it_and_how_to_fetch_it(tmp_path, monkeypatch):
    pytest.importorskip("timm")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match=r"timm:vit_tiny_patch16_224: .*not in the Hub cache.*"
                                                r"timm.create_model\('vit_tiny_patch16_224', pretrained=True\).*"
                                                r"timm:vit_tiny_patch16_224@<weights file>"):
        resolve("timm:vit_tiny_patch16_224")


# ---------------------------------------------------------------- checkpoints

@pytest.mark.parametrize("content, said", [(b"", "an empty file"), (b"step,loss\n1,2\n", "a file of 14 bytes torch.save did not write")])
def test_a_file_that_is_no_checkpoint_says_so(tmp_path, content, said):
    (tmp_path / "x.ckpt").write_bytes(content)
    with pytest.raises(RuntimeError, match=rf"not a checkpoint: .*x.ckpt \({said}"):
        read(tmp_path / "x.ckpt")


def test_a_bad_tokenizer_state_names_the_part(tmp_path):
    trained = objective_from("gpt", gpt2_folder(tmp_path / "hf"), DIMS)
    hparams = dict(trained.hparams) | {"tokenizer": {"kind": "hf", "json": "{not a tokenizer"}}
    torch.save({"zoo_objective": "lm", "hyper_parameters": hparams, "state_dict": trained.state_dict()},
               tmp_path / "bad.ckpt")
    with pytest.raises(ValueError, match=r"bad.ckpt: hyper_parameters.tokenizer is not a tokenizer the zoo can rebuild"):
        tokenizer_of(tmp_path / "bad.ckpt")
    assert os.path.getsize(tmp_path / "bad.ckpt") > 0


def test_a_weight_of_another_shape_than_the_config_says_names_its_file(tmp_path):
    folder = gpt2_folder(tmp_path / "hf")
    edit_config(folder, n_inner=32)  # the weights' feed-forward is 4 x 16 = 64 wide
    with pytest.raises(ValueError, match=r"fc_in.weight: checkpoint has shape \(64, 16\) \(from .*model.safetensors: "
                                         r"tensor 'transformer.h.0.mlp.c_fc.weight'\), model has \(32, 16\)"):
        objective_from("gpt", folder, DIMS)
