"""Hidden states on request (every container's ``features``) against the references'
``output_hidden_states``, the head never run; and ``zoo embed`` on zoo checkpoints, Hugging Face
folders and sentence-transformers folders the tests write themselves."""

from __future__ import annotations

import importlib.util
import json
import re
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import open_dict
from PIL import Image
from transformers import (BertConfig, BertModel, BertTokenizerFast, GPT2Config, GPT2LMHeadModel, T5Config,
                          T5ForConditionalGeneration, ViTConfig, ViTForImageClassification)

from exactness import assert_matches, randomise
from test_hub_source import hub, put_in_cache  # noqa: F401 (hub is a fixture)
from test_init_from import word_level_tokenizer
from test_tower import _llava
from zoo.cli.commands import call
from zoo.convert import bert, gpt2, t5
from zoo.convert.common import compose_config
from zoo.models.model import Model
from zoo.nn.block import BlockConfig
from zoo.nn.embedders import TokenEmbedder
from zoo.nn.heads import LMHead
from zoo.nn.masks import CausalMask
from zoo.data.pretrained import tokenizer_of
from zoo.train.run import objective


def no_head(net: torch.nn.Module) -> None:
    """Make running ``net``'s head an error: ``features`` must not call it."""
    def refuse(*_):
        raise AssertionError("the head ran")

    net.head.register_forward_pre_hook(refuse)


def tiny_bert_config(vocab_size: int = 97) -> BertConfig:
    return BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                      intermediate_size=48, max_position_embeddings=24, attn_implementation="sdpa")


def padded_ids(vocab: int, pad_from: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (2, 16) and a padding mask (True = real) whose second row ends in pads."""
    ids = torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    real = torch.ones_like(ids, dtype=torch.bool)
    real[1, pad_from:] = False
    return ids, real


@torch.no_grad()
def test_bert_features_are_the_reference_hidden_states_at_every_layer():
    torch.manual_seed(0)
    hf = randomise(BertModel(tiny_bert_config()).eval())
    with pytest.warns(UserWarning, match="no MLM head"):
        net = bert._from_config_and_state(hf.config.to_dict(), hf.state_dict(), "BertModel")
    no_head(net)
    ids, real = padded_ids(97)
    ref = hf(input_ids=ids, attention_mask=real.long(), output_hidden_states=True)
    where = real[:, :, None]  # padded positions' states are meaningless in both
    assert_matches(net.features(ids, real), ref.last_hidden_state, where, what="last hidden state")
    for layer, states in enumerate(ref.hidden_states):
        assert_matches(net.features(ids, real, layer=layer), states, where, what=f"hidden state {layer}")
    assert_matches(net.features(ids, real, layer=-2), ref.hidden_states[-2], where, what="hidden state -2")


@torch.no_grad()
def test_gpt2_features_are_the_reference_hidden_states_and_the_model_is_left_as_it_was():
    torch.manual_seed(0)
    hf = randomise(GPT2LMHeadModel(GPT2Config(vocab_size=97, n_positions=40, n_embd=48, n_layer=3, n_head=4,
                                              attn_implementation="sdpa")).eval())
    net = gpt2.from_transformers(hf).eval()
    x = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(1))
    logits = net(x)
    ref = hf(x, output_hidden_states=True).hidden_states  # the last entry is after GPT-2's final norm
    no_head(net)
    assert_matches(net.features(x), ref[-1], what="last hidden state")
    for layer in range(3):
        assert_matches(net.features(x, layer=layer), ref[layer], what=f"hidden state {layer}")
    net.head._forward_pre_hooks.clear()
    assert torch.equal(net(x), logits)  # every layer and the final norm run again


@torch.no_grad()
def test_t5_features_of_either_tower():
    torch.manual_seed(0)
    hf = T5ForConditionalGeneration(T5Config(vocab_size=60, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                             num_decoder_layers=3, num_heads=4, decoder_start_token_id=0)).eval()
    randomise(hf)
    net = t5.from_transformers(hf)
    no_head(net)
    source, real = padded_ids(60)
    target = torch.randint(0, 60, (2, 7), generator=torch.Generator().manual_seed(2))
    ref = hf(input_ids=source, attention_mask=real.long(), decoder_input_ids=target, output_hidden_states=True)
    where = real[:, :, None]
    assert_matches(net.features(source, real), ref.encoder_last_hidden_state, where, what="encoder output")
    assert_matches(net.features(source, real, layer=1), ref.encoder_hidden_states[1], where, what="encoder layer 1")
    assert_matches(net.features(source, real, target), ref.decoder_hidden_states[-1], what="decoder output")
    assert_matches(net.features(source, real, target, layer=2), ref.decoder_hidden_states[2], what="decoder layer 2")


@torch.no_grad()
def test_llava_features_are_what_its_head_reads():
    net = _llava().eval()
    tokens = torch.tensor([[9] + [3] * net.embedder.n_image_tokens + [5, 6, 7]] * 2)
    images = torch.randn(2, 3, 32, 32)
    seen = {}
    handle = net.head.register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    net(tokens, images=images)
    handle.remove()
    no_head(net)
    assert_matches(net.features(tokens, images=images), seen["x"], what="LLaVA last hidden state")
    inner = net.features(tokens, images=images, layer=1)
    assert inner.shape == seen["x"].shape and not torch.allclose(inner, seen["x"])


def test_a_layer_outside_the_tower_names_its_depth():
    torch.manual_seed(0)
    net = gpt2.from_transformers(GPT2LMHeadModel(GPT2Config(vocab_size=20, n_positions=8, n_embd=16, n_layer=2,
                                                            n_head=2)))
    with pytest.raises(ValueError, match=r"layer=5: the decoder tower has 2 layers; give 0..2"):
        net.features(torch.zeros(1, 4, dtype=torch.long), layer=5)


def settings_of(net: torch.nn.Module) -> dict:
    """Every module's own attributes (its read point, masks, flags), as text."""
    return {name: {k: repr(v) for k, v in vars(m).items() if not k.startswith("_")} for name, m in net.named_modules()}


@torch.no_grad()
def test_two_callers_read_one_model_at_different_layers_at_once():
    """Two threads inside ``features`` at the same time (both past their start before either runs a
    Block), asking for different layers: each gets its own layer, and the model is as it was."""
    torch.manual_seed(0)
    block = BlockConfig(d_model=16, n_heads=2, d_ff=32)
    net = randomise(Model(TokenEmbedder(20, 16, max_len=8), CausalMask(), block, 3, LMHead(16, 20), context=8)).eval()
    ids = torch.randint(0, 20, (2, 6))
    x = net.embedder(ids)
    want = {0: x}
    for i, (layer, context) in enumerate(zip(net.blocks, net.stack.contexts(6, ids.device)), start=1):
        x = want[i] = layer(x, context)
    weights = {k: v.clone() for k, v in net.state_dict().items()}
    settings = settings_of(net)
    barrier, got = threading.Barrier(2, timeout=20), {}

    def meet(*_) -> None:  # each caller waits here, before the embedder, until the other is here too
        barrier.wait()

    handle = net.embedder.register_forward_pre_hook(meet)
    threads = [threading.Thread(target=lambda i=i: got.setdefault(i, net.features(ids, layer=i))) for i in (1, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    handle.remove()
    assert sorted(got) == [1, 3]
    for i in (1, 3):
        assert_matches(got[i], want[i], what=f"layer {i} read beside another caller")
    assert settings_of(net) == settings
    assert all(torch.equal(v, weights[k]) for k, v in net.state_dict().items())
    assert_matches(net.features(ids, layer=2), want[2], what="layer 2 afterwards")
    for i, states in zip((3, 0, 1), net.intermediates(ids, [3, 0, 1])):  # several layers, in the order asked
        assert_matches(states, want[i], what=f"intermediates: layer {i}")


# ---------------------------------------------------------------- zoo embed

WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "and", "slept"]
TEXTS = ["the cat sat on a mat", "a dog ran far away and the cat slept", "cat"]


def embed(tmp_path, *overrides: str) -> list[list[float]]:
    """``zoo embed`` run as the command line composes it; the vectors it wrote."""
    out = tmp_path / "out" / "emb.json"
    call("embed", [*overrides, f"out={out}"])
    return json.loads(out.read_text())["embeddings"]


def texts_override(texts: list[str]) -> str:
    return "text=[" + ",".join(texts) + "]"


def bert_folder(path: Path, seed: int = 0) -> BertModel:
    """A tiny random ``BertModel`` saved with ``save_pretrained`` and its WordPiece ``vocab.txt``."""
    torch.manual_seed(seed)
    hf = randomise(BertModel(tiny_bert_config(vocab_size=len(SPECIALS) + len(WORDS))).eval(), seed=seed)
    hf.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join([*SPECIALS, *WORDS]) + "\n")
    return hf


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def reference_pool(states: torch.Tensor, real: torch.Tensor, mode: str, normalize: bool) -> torch.Tensor:
    """sentence-transformers' Pooling (and Normalize) written out for the test, from its definitions."""
    m = real[:, :, None].float()
    if mode == "cls":
        pooled = states[:, 0]
    elif mode == "mean":
        pooled = (states * m).sum(1) / m.sum(1)
    else:
        pooled = torch.where(m.bool(), states, torch.full_like(states, -1e9)).max(1).values
    return torch.nn.functional.normalize(pooled, dim=-1) if normalize else pooled


def bert_reference(hf: BertModel, folder: Path, texts: list[str], mode: str, normalize: bool) -> torch.Tensor:
    """The embeddings computed directly from the Hugging Face model and tokenizer."""
    tokens = BertTokenizerFast.from_pretrained(folder)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = hf(**tokens).last_hidden_state
    return reference_pool(states, tokens["attention_mask"].bool(), mode, normalize)


def sentence_transformers_folder(root: Path, sub: str, mode: str, normalize: bool) -> BertModel:
    """modules.json (Transformer at ``sub``, Pooling, optionally Normalize) + 1_Pooling/config.json."""
    hf = bert_folder(root / sub if sub else root)
    modules = [{"idx": 0, "name": "0", "path": sub, "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (root / "2_Normalize").mkdir()
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir()
    flags = {f"pooling_mode_{key}": key.split("_")[0] == mode for key in ("cls_token", "mean_tokens", "max_tokens")}
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **flags}))
    (root / sub / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 20, "do_lower_case": False}))
    return hf


@pytest.mark.parametrize("sub, mode, normalize", [("", "mean", True), ("0_Transformer", "cls", False),
                                                  ("0_Transformer", "max", True)])
def test_a_sentence_transformers_folder_is_followed(tmp_path, sub, mode, normalize):
    folder = tmp_path / "st"
    hf = sentence_transformers_folder(folder, sub, mode, normalize)
    got = torch.tensor(embed(tmp_path, f"init_from={folder}", texts_override(TEXTS)))
    ref = bert_reference(hf, folder / sub, TEXTS, mode, normalize)
    assert_matches(got, ref, what=f"{mode} embeddings")
    if normalize:
        assert torch.allclose(got.norm(dim=-1), torch.ones(len(TEXTS)))


def test_a_sentence_transformers_folder_cuts_at_its_max_seq_length(tmp_path):
    folder = tmp_path / "st"
    hf = sentence_transformers_folder(folder, "", "mean", True)
    long = " ".join(WORDS * 3)  # 36 words: cut at 20 tokens, [SEP] kept last
    with pytest.warns(UserWarning, match=r"texts \[0\] are longer than the model's 20 tokens"):
        got = torch.tensor(embed(tmp_path, f"init_from={folder}", texts_override([long])))
    tokens = BertTokenizerFast.from_pretrained(folder)([long], truncation=True, max_length=20, return_tensors="pt")
    with torch.no_grad():
        ref = reference_pool(hf(**tokens).last_hidden_state, tokens["attention_mask"].bool(), "mean", True)
    assert_matches(got, ref, what="cut embeddings")


def test_a_sentence_transformers_repo_from_the_hub_cache(tmp_path, hub):  # noqa: F811 (the fixture)
    hf = sentence_transformers_folder(tmp_path / "st", "0_Transformer", "mean", True)
    put_in_cache(hub, "someone/tiny-st", tmp_path / "st")
    got = torch.tensor(embed(tmp_path, "init_from=hf:someone/tiny-st", texts_override(TEXTS)))
    assert_matches(got, bert_reference(hf, tmp_path / "st" / "0_Transformer", TEXTS, "mean", True),
                   what="embeddings of the cached repo")


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None, reason="sentence-transformers absent")
def test_the_folder_gives_what_sentence_transformers_gives(tmp_path):
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "st"
    sentence_transformers_folder(folder, "0_Transformer", "mean", True)
    ref = torch.from_numpy(SentenceTransformer(str(folder), device="cpu").encode(TEXTS))
    assert_matches(torch.tensor(embed(tmp_path, f"init_from={folder}", texts_override(TEXTS))), ref,
                   what="sentence-transformers embeddings")


def test_a_plain_bert_folder_gives_normalised_means_and_options_override(tmp_path):
    hf = bert_folder(tmp_path / "bert")
    got = torch.tensor(embed(tmp_path, f"init_from={tmp_path / 'bert'}", texts_override(TEXTS)))
    assert_matches(got, bert_reference(hf, tmp_path / "bert", TEXTS, "mean", True), what="default embeddings")
    got = torch.tensor(embed(tmp_path, f"init_from={tmp_path / 'bert'}", texts_override(TEXTS), "pooling=cls",
                             "normalize=false"))
    assert_matches(got, bert_reference(hf, tmp_path / "bert", TEXTS, "cls", False), what="cls embeddings")


def test_a_gpt2_folder_embeds_a_chosen_layer(tmp_path):
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=len(WORDS) + 1, n_positions=24, n_embd=16, n_layer=3, n_head=2)).eval()
    randomise(hf)
    hf.save_pretrained(tmp_path / "gpt")
    word_level_tokenizer(WORDS).save(str(tmp_path / "gpt" / "tokenizer.json"))
    got = torch.tensor(embed(tmp_path, f"init_from={tmp_path / 'gpt'}", texts_override(TEXTS), "layer=1"))
    ids = [[WORDS.index(w) + 1 for w in text.split()] for text in TEXTS]
    width = max(map(len, ids))
    real = torch.tensor([[True] * len(row) + [False] * (width - len(row)) for row in ids])
    x = torch.tensor([row + [0] * (width - len(row)) for row in ids])
    with torch.no_grad():
        states = hf(x, attention_mask=real.long(), output_hidden_states=True).hidden_states[1]
    assert_matches(got, reference_pool(states, real, "mean", True), what="GPT-2 layer-1 embeddings")


def test_a_vit_folder_embeds_images_by_their_cls_vector_or_mean(tmp_path):
    torch.manual_seed(0)
    hf = ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=48, num_labels=3)).eval()
    randomise(hf)
    hf.save_pretrained(tmp_path / "vit")
    pixels = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    files = []
    for i, image in enumerate(pixels):
        files.append(tmp_path / f"{i}.png")
        Image.fromarray(image).save(files[-1])
    images = "image=[" + ",".join(map(str, files)) + "]"
    x = (torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.5  # ViT's default processor
    with torch.no_grad():
        states = hf.vit(x).last_hidden_state
    cls = embed(tmp_path, f"init_from={tmp_path / 'vit'}", images)
    assert_matches(torch.tensor(cls), states[:, 0], what="CLS embeddings")
    mean = embed(tmp_path, f"init_from={tmp_path / 'vit'}", images, "pooling=mean")
    assert_matches(torch.tensor(mean), states[:, 1:].mean(1), what="mean-of-patches embeddings")
    with pytest.raises(ValueError, match="reads images, but text= was given"):
        embed(tmp_path, f"init_from={tmp_path / 'vit'}", "text=[a cat]")
    # a zoo checkpoint of it (model=vit model.init_from=DIR) embeds alike, normalised as its data was
    mean, std = torch.tensor([0.4, 0.5, 0.6]), torch.tensor([0.2, 0.3, 0.25])
    dims = {"num_classes": 3, "image_size": 32, "channels": 3, "class_names": ["a", "b", "c"],
            "pixel_mean": mean.tolist(), "pixel_std": std.tolist()}
    save_checkpoint(objective_of("vit", tmp_path / "vit", dims), "classification", tmp_path / "vit.ckpt")
    x = (torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255 - mean[:, None, None]) / std[:, None, None]
    with torch.no_grad():
        ref = hf.vit(x).last_hidden_state[:, 0]
    assert_matches(torch.tensor(embed(tmp_path, f"ckpt={tmp_path / 'vit.ckpt'}", images)), ref,
                   what="CLS embeddings of the checkpoint")


def objective_of(model: str, folder: Path, dims: dict, tokenizer: dict | None = None):
    """``model=<model> model.init_from=<folder>`` built as train.py builds it, ``dims`` standing in for the data."""
    cfg = compose_config([f"model={model}", f"model.init_from={folder}"])
    with open_dict(cfg):
        cfg.dims = dims
    return objective(cfg, tokenizer)


def save_checkpoint(trained, name: str, path: Path) -> None:
    """What a zoo checkpoint holds of an objective (the entries zoo.objectives.loading.load reads)."""
    torch.save({"zoo_objective": name, "hyper_parameters": dict(trained.hparams), "state_dict": trained.state_dict()},
               path)


def test_a_zoo_bert_checkpoint_embeds_its_texts_in_cls_and_sep(tmp_path):
    hf = bert_folder(tmp_path / "bert")
    tokenizer = tokenizer_of(tmp_path / "bert")
    dims = {"vocab_size": tokenizer.vocab_size, "mask_id": 4, "special_ids": [0, 1, 2, 3, 4]}
    with pytest.warns(UserWarning, match="no MLM head"):
        trained = objective_of("bert", tmp_path / "bert", dims, tokenizer.state())
    save_checkpoint(trained, "mlm", tmp_path / "bert.ckpt")
    got = torch.tensor(embed(tmp_path, f"ckpt={tmp_path / 'bert.ckpt'}", texts_override(TEXTS)))
    assert_matches(got, bert_reference(hf, tmp_path / "bert", TEXTS, "mean", True), what="checkpoint embeddings")


@pytest.mark.parametrize("edit, said", [
    (lambda m: m.insert(2, {"path": "2_Dense", "type": "sentence_transformers.models.Dense"}),
     "module 2 is 'sentence_transformers.models.Dense'; zoo embed follows only"),
    (lambda m: m[1].update(type="my_package.EvilPooling"), "module 1 is 'my_package.EvilPooling'"),
    (lambda m: m[0].update(path="../elsewhere"), "path='../elsewhere' leads outside"),
    (lambda m: m.reverse(), "lists the modules ['Pooling', 'Transformer']"),
])
def test_a_modules_json_naming_other_modules_is_refused_by_name(tmp_path, edit, said):
    folder = tmp_path / "st"
    sentence_transformers_folder(folder, "0_Transformer", "mean", False)
    modules = json.loads((folder / "modules.json").read_text())
    edit(modules)
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match=re.escape(said)):
        embed(tmp_path, f"init_from={folder}", texts_override(TEXTS))


def test_bad_pooling_configs_and_sources_are_named(tmp_path):
    folder = tmp_path / "st"
    sentence_transformers_folder(folder, "", "mean", False)
    pooling = folder / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True}))
    with pytest.raises(ValueError, match="sets 2 of"):
        embed(tmp_path, f"init_from={folder}", texts_override(TEXTS))
    pooling.write_text(json.dumps({"pooling_mode_weightedmean_tokens": True}))
    with pytest.raises(ValueError, match=r"sets \['pooling_mode_weightedmean_tokens'\]"):
        embed(tmp_path, f"init_from={folder}", texts_override(TEXTS))
    pooling.write_text(json.dumps({"pooling_mode_mean_tokens": True, "word_embedding_dimension": 64}))
    with pytest.raises(ValueError, match="word_embedding_dimension=64, the Transformer gives 32"):
        embed(tmp_path, f"init_from={folder}", texts_override(TEXTS))
    (tmp_path / "t5").mkdir()
    (tmp_path / "t5" / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(ValueError, match=r"model_type='t5'.*zoo embed reads \['bert', 'deit', 'dinov2', 'dinov2_with_registers', 'gpt2', 'llama', 'vit'\]"):
        embed(tmp_path, f"init_from={tmp_path / 't5'}", texts_override(TEXTS))
    with pytest.raises(ValueError, match="give exactly one of ckpt= or init_from="):
        embed(tmp_path, f"init_from={folder}", f"ckpt={tmp_path / 'x.ckpt'}", texts_override(TEXTS))
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        embed(tmp_path, f"init_from={tmp_path}", texts_override(TEXTS))
