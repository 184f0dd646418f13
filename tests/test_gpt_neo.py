"""The GPT-Neo preset: exact against Hugging Face with global and local layers alternating and
a window that cuts, no logit scaling, rolling-cache decoding; read from a ``save_pretrained``
folder (``model.init_from=DIR``) and exported back by its converter."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from exactness import assert_matches, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from test_export import saved_checkpoint  # noqa: E402
from test_init_from import objective_from  # noqa: E402
from windowed import greedy_decoding_kept_keys  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.export import export  # noqa: E402
from zoo.convert.gpt_neo import from_transformers, layer_pattern  # noqa: E402
from zoo.nn.masks import CausalMask, LocalMask  # noqa: E402

WINDOW = 8


def tiny_gpt_neo(attention_types=(("global", "local"), 2)):
    torch.manual_seed(0)
    kinds, repeat = attention_types
    cfg = transformers.GPTNeoConfig(
        vocab_size=97, hidden_size=64, num_layers=len(kinds) * repeat, num_heads=4, max_position_embeddings=48,
        window_size=WINDOW, attention_types=[[list(kinds), repeat]], bos_token_id=0, eos_token_id=0,
        attn_implementation="eager",
    )
    return randomise(transformers.GPTNeoForCausalLM(cfg).eval())


@pytest.mark.parametrize("length", [37, 5])  # not a multiple of the window; shorter than one
@pytest.mark.parametrize("attention_types", [(("global", "local"), 2), (("local", "local", "global"), 1)])
def test_gpt_neo_logits_match_transformers_with_a_window_that_cuts(attention_types, length):
    hf = tiny_gpt_neo(attention_types)
    net = from_transformers(hf).eval()
    kinds = {"global": CausalMask(), "local": LocalMask(WINDOW)}
    assert net.stack.layer_masks == [kinds[k] for k in hf.config.attention_layers]
    assert net.stack.blocks[0].attn.scale == 1.0
    tokens, real = padded_tokens(97, length)  # one row right-padded, one left-padded
    # fp32 only: GPT-Neo's eager attention casts queries and keys to float32 whatever the dtype
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert_matches(ours, ref, real[..., None], what="GPT-Neo logits")


def test_the_window_cuts_in_the_reference_too():
    hf = tiny_gpt_neo()
    tokens = torch.randint(0, 97, (1, 40))
    with torch.no_grad():
        windowed = hf(tokens).logits
        for block in hf.transformer.h:  # the same weights with every layer global
            block.attn.attention.bias = torch.tril(torch.ones_like(block.attn.attention.bias))
        causal = hf(tokens).logits
    assert torch.equal(windowed[:, :WINDOW], causal[:, :WINDOW])
    assert (windowed[:, WINDOW:] - causal[:, WINDOW:]).abs().max() > 1e-3


def test_the_layer_pattern_is_the_shortest_that_tiles():
    assert layer_pattern(["global", "local"] * 3) == ["global", "local"]
    assert layer_pattern(["local"] * 4) == ["local"]
    assert layer_pattern(["global", "local", "local"]) == ["global", "local", "local"]


def test_gpt_neo_greedy_decoding_of_4x_the_window_equals_full_recomputation():
    net = from_transformers(tiny_gpt_neo()).eval()
    lengths = greedy_decoding_kept_keys(net, 97, WINDOW)
    assert lengths == [5 + 4 * WINDOW, WINDOW - 1] * 2  # global layers keep all, local ones the window


def test_gpt_neo_preset_alternates_global_and_local_without_logit_scaling():
    net = compose_config(["model=gpt_neo"]).model.net
    assert [m._target_ for m in net.mask.masks] == ["zoo.nn.masks.CausalMask", "zoo.nn.masks.LocalMask"]
    assert net.mask.masks[1].window < net.context and net.block.attn_scale == 1.0
    assert net.tie_embeddings and net.embedder.positions == "learned"
    big = compose_config(["model=gpt_neo_125m"]).model.net
    assert (big.n_layers, big.block.d_model, big.mask.masks[1].window) == (12, 768, 256)



@torch.no_grad()
def test_gpt_neo_folder_gives_the_hf_logits_and_exports_back_by_its_converter(tmp_path):
    """A pattern (local, local, global) and a window (8) other than the preset's come from config.json."""
    hf = tiny_gpt_neo((("local", "local", "global"), 1))
    hf.save_pretrained(tmp_path / "hf")
    model = saved_checkpoint(tmp_path / "neo.ckpt", "gpt_neo", {"vocab_size": 97}, f"model.init_from={tmp_path / 'hf'}")
    net = model.hparams.net
    assert (net["n_layers"], net["context"], net["block"]["d_model"]) == (3, 48, 64)
    assert [m.get("window") for m in net["mask"]["masks"]] == [WINDOW, WINDOW, None]
    tokens = torch.randint(0, 97, (2, 37))  # not a multiple of the window
    ref = hf(tokens).logits
    assert_matches(model.net(tokens), ref, what="GPT-Neo logits from model.init_from")
    assert export(tmp_path / "neo.ckpt", tmp_path / "out") == ("GPTNeoForCausalLM", [])  # no hf_class= needed
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert_matches(back(tokens).logits, ref, what="GPT-Neo logits, HF -> zoo -> HF")


def test_gpt_neo_folder_the_zoo_cannot_express_or_another_vocabulary_is_refused_by_name(tmp_path):
    hf = tiny_gpt_neo()
    hf.save_pretrained(tmp_path / "neo")
    with pytest.raises(ValueError, match="tokenizer has 50 tokens but .*vocab_size=97"):
        objective_from("gpt_neo", tmp_path / "neo", {"vocab_size": 50})
    hf.config.activation_function = "relu"
    hf.save_pretrained(tmp_path / "relu")
    with pytest.raises(ValueError, match="activation_function='relu' is not supported"):
        objective_from("gpt_neo", tmp_path / "relu", {"vocab_size": 97})
