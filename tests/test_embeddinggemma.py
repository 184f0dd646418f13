"""EmbeddingGemma (``Gemma3TextModel`` with ``use_bidirectional_attention``): exact against Hugging
Face's hidden states (the global layers unmasked, the sliding ones a window on both sides, padding
both sides, odd lengths), read from a sentence-transformers folder (``model.init_from=DIR``) and
giving ``SentenceTransformer(folder).encode``, exported back (round trip and ``zoo export``), and
trained from the CLI on STS-B-like pairs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from conftest import run_train  # noqa: E402
from exactness import assert_matches, randomise  # noqa: E402
from test_task_embed import SENTENCES, SMALL, embed_objective, word_piece, write_stsb, zoo_embeddings  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.config import compose_config  # noqa: E402
from decoder_family import resolved_net  # noqa: E402
from zoo.convert.common import shape_overrides  # noqa: E402
from zoo.convert.embeddinggemma import EMBEDDINGGEMMA, from_transformers  # noqa: E402
from zoo.convert.export import export, to_hf  # noqa: E402
from zoo.nn.masks import LocalMask, NoMask  # noqa: E402
from zoo.registry import name_of  # noqa: E402

WINDOW, HEAD_DIM, SCALAR = 8, 24, 20  # the saved sliding_window (Gemma3TextConfig keeps 8 // 2 + 1 = 5)
# two layers (a sliding one of window 8, a global one) on test_task_embed's SMALL net (32 wide, context 32)
PATTERN = ["model.net.mask.masks=[{_target_:zoo.nn.masks.LocalMask,window:8,causal:false},{_target_:zoo.nn.masks.NoMask}]",
           "model.net.rotary_base=[10000.0,1000000.0]"]


def tiny_embeddinggemma(**config) -> torch.nn.Module:
    """3 layers (sliding, global, sliding), 4 heads of 24 in 64 wide, attention scaled by 20 ** -0.5,
    bidirectional; every parameter drawn away from its init."""
    torch.manual_seed(0)
    cfg = transformers.Gemma3TextConfig(
        vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=HEAD_DIM, max_position_embeddings=48, rms_norm_eps=1e-6,
        sliding_window=WINDOW, query_pre_attn_scalar=SCALAR, use_bidirectional_attention=True,
        attn_implementation="eager", layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1e6}}, **config)
    return randomise(transformers.Gemma3TextModel(cfg).eval())


@pytest.mark.parametrize("length", [37, 5])  # past the window on both sides; shorter than it
def test_embeddinggemma_hidden_states_match_transformers(length):
    hf = tiny_embeddinggemma()
    assert hf.config.sliding_window == WINDOW // 2 + 1  # transformers' own halving, which the zoo undoes
    net = from_transformers(hf).eval()
    local = LocalMask(WINDOW, causal=False)
    assert net.stack.layer_masks == [local, NoMask(), local]
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).last_hidden_state
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what="EmbeddingGemma hidden states")
    if length > WINDOW:  # the causal Gemma 3 of the same weights: the mask must matter
        causal = transformers.Gemma3TextModel(transformers.Gemma3TextConfig(
            **hf.config.to_dict() | {"use_bidirectional_attention": False})).eval()
        causal.load_state_dict(hf.state_dict())
        with torch.no_grad():
            assert (causal(tokens, attention_mask=real.long()).last_hidden_state - ref)[real].abs().max() > 1e-3


def test_embeddinggemma_preset_is_gemma3_with_its_causal_masks_taken_away():
    gemma3, ours = (compose_config([f"model={m}"]).model for m in ("gemma3", "embeddinggemma"))
    assert ours._target_ == "zoo.objectives.embedding.Embedding" and ours.net.head._target_ == "torch.nn.Identity"
    assert [(m._target_, m.get("causal")) for m in ours.net.mask.masks] == \
        [("zoo.nn.masks.LocalMask", False)] * 5 + [("zoo.nn.masks.NoMask", None)]
    assert ours.net.block == gemma3.net.block and ours.net.rotary_base == gemma3.net.rotary_base
    big = compose_config(["model=embeddinggemma_300m"]).model.net
    assert (big.n_layers, big.block.d_model, big.block.n_heads, big.block.n_kv_heads, big.block.head_dim,
            big.block.d_ff, big.context, big.mask.masks[0].window) == (24, 768, 3, 1, 256, 1152, 2048, 512)


@torch.no_grad()
def test_embeddinggemma_round_trips_through_the_export():
    """HF -> zoo -> HF: the same weights and config (bidirectional, the saved window, the layers'
    types); a zoo net drawn away from its init exports to its own hidden states."""
    hf = tiny_embeddinggemma()
    net_cfg = resolved_net("embeddinggemma", shape_overrides(EMBEDDINGGEMMA.shape(hf.config.to_dict())),
                           {"vocab_size": 97})
    back, untouched = to_hf(from_transformers(hf).eval(), net_cfg, "Gemma3TextModel")
    assert untouched == [] and back.config.use_bidirectional_attention
    assert (back.config.sliding_window, back.config.layer_types) == (hf.config.sliding_window, hf.config.layer_types)
    assert back.config.rope_parameters == hf.config.rope_parameters
    assert all(torch.equal(back.state_dict()[k], v) for k, v in hf.state_dict().items())
    drawn = randomise(from_transformers(hf), seed=3).eval()
    out, _ = to_hf(drawn, net_cfg, "Gemma3TextModel")
    tokens = torch.randint(0, 97, (2, 41))
    assert_matches(out(tokens).last_hidden_state, drawn(tokens), what="zoo -> Gemma3TextModel hidden states")


@pytest.mark.parametrize("config, refusal", [
    ({"use_bidirectional_attention": False}, "use_bidirectional_attention is not true"),
    ({"sliding_window": 0}, "sliding_window=0"),
    ({"layer_types": ["sliding_attention", "chunked_attention", "full_attention"]}, "layer_types="),
])
def test_configs_that_are_not_embeddinggemma_are_refused(config, refusal):
    with pytest.raises(ValueError, match=refusal):
        EMBEDDINGGEMMA.shape(tiny_embeddinggemma().config.to_dict() | config)


def exported_checkpoint(tmp_path: Path, *extra: str):
    """A small task=embed EmbeddingGemma (a sliding layer, then a global one) drawn away from its init,
    saved as a checkpoint and exported by ``zoo export``: (the objective, its tokenizer, the folder)."""
    tokenizer = word_piece()
    built = embed_objective("embeddinggemma", tokenizer, *PATTERN, *extra)
    ckpt = tmp_path / "run.ckpt"
    torch.save({"zoo_objective": name_of(type(built)), "hyper_parameters": dict(built.hparams),
                "state_dict": built.state_dict()}, ckpt)
    hf_class, untouched = export(ckpt, tmp_path / "st")
    assert (hf_class, untouched) == ("Gemma3TextModel", [])
    return built, tokenizer, tmp_path / "st"


@pytest.mark.parametrize("extra", [[], ["model.pooling=mean", "model.normalize=true"]])
def test_export_is_a_sentence_transformers_folder_giving_the_zoos_embeddings(tmp_path, extra):
    """zoo export of a task=embed EmbeddingGemma: a sentence-transformers folder around a bidirectional
    Gemma3TextModel whose SentenceTransformer(folder).encode gives the zoo's embeddings (padding:
    sentences of several lengths in one batch, longer than the window)."""
    st = pytest.importorskip("sentence_transformers")
    built, tokenizer, folder = exported_checkpoint(tmp_path, *extra)
    config = json.loads((folder / "config.json").read_text())
    assert (config["architectures"], config["use_bidirectional_attention"], config["sliding_window"],
            config["layer_types"]) == (["Gemma3TextModel"], True, 8, ["sliding_attention", "full_attention"])
    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((folder / "modules.json").read_text())]
    assert modules == ["Transformer", "Pooling"] + ["Normalize"] * bool(extra)
    long = SENTENCES + [" ".join(SENTENCES)]  # 30 tokens: past the window of 8 on both sides
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(long, convert_to_tensor=True)
    assert_matches(zoo_embeddings(built, tokenizer, long), theirs, what="EmbeddingGemma export's embeddings")


def test_init_from_a_sentence_transformers_folder_gives_its_embeddings(tmp_path):
    """model=embeddinggemma model.init_from= the sentence-transformers folder of a bidirectional
    Gemma3TextModel (pooling mean, Normalize): the objective's embeddings are
    SentenceTransformer(folder).encode's, its pooling the folder's."""
    st = pytest.importorskip("sentence_transformers")
    from omegaconf import open_dict

    from zoo.data.pretrained import tokenizer_of
    from zoo.train.run import objective

    _, _, folder = exported_checkpoint(tmp_path, "model.normalize=true")
    tokenizer = tokenizer_of(folder)
    cfg = compose_config(["model=embeddinggemma", f"model.init_from={folder}"])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": tokenizer.vocab_size, "pad_id": 0}
    read = objective(cfg, tokenizer.state()).eval()
    assert (read.pooling.mode, read.pooling.normalize) == ("mean", True)
    assert read.net.stack.layer_masks == [LocalMask(WINDOW, causal=False), NoMask()]
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    assert_matches(zoo_embeddings(read, tokenizer, SENTENCES), theirs, what="embeddings of the folder")


@pytest.mark.slow
def test_embeddinggemma_card_command_trains_on_stsb_pairs(tmp_path):
    """The card command, python train.py model=embeddinggemma task=embed data=stsb: 10 steps of the
    cosine loss (STS-B's scores) on its pairs; the checkpoint exports as a sentence-transformers folder."""
    import csv

    write_stsb(tmp_path / "data" / "downstream" / "stsb")
    run = tmp_path / "run"
    run_train(run, tmp_path / "data", "model=embeddinggemma", "task=embed", "data=stsb", "quick=true",
              "trainer.max_steps=10", "data.batch_size=16", "data.vocab_size=100", "trainer.log_every_n_steps=1",
              *SMALL, *PATTERN)
    losses = [float(r["train/loss"]) for r in csv.DictReader(open(run / "metrics.csv")) if r.get("train/loss")]
    assert len(losses) == 10 and all(l == l for l in losses), losses
    hf_class, _ = export(run / "checkpoints" / "last.ckpt", tmp_path / "st")
    assert hf_class == "Gemma3TextModel" and (tmp_path / "st" / "modules.json").is_file()
