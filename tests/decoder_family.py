"""The checks every decoder family of the shared mapping (zoo.convert.decoder.Decoder) passes
beyond its own exactness test: the export round trip both ways and ``zoo export`` loading in
transformers' Auto class, reading a ``save_pretrained`` folder, and cached and greedy decoding.
One copy for Qwen2, Qwen3, OLMo 2, Gemma 2 / 3 and the decoders to come."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from exactness import assert_matches, randomise
from test_export import resolved_net, saved_checkpoint
from zoo.convert.common import shape_overrides
from zoo.convert.decoder import Decoder
from zoo.convert.export import FAMILIES, to_hf


@torch.no_grad()
def check_round_trip(hf: torch.nn.Module, decoder: Decoder) -> torch.nn.Module:
    """HF -> zoo -> HF gives ``hf``'s logits and zoo -> HF -> zoo the same weights; a zoo net drawn
    away from its init exports to its own logits. Returns the Hugging Face model written back."""
    net_cfg = resolved_net(decoder.model, shape_overrides(decoder.shape(hf.config.to_dict())),
                           {"vocab_size": hf.config.vocab_size})
    zoo = decoder.from_transformers(hf).eval()
    x = FAMILIES[decoder.hf_class].example(net_cfg)
    back, untouched = to_hf(zoo, net_cfg, decoder.hf_class)
    assert untouched == []
    assert_matches(back(x).logits, hf(x).logits, what=f"{decoder.hf_class}: HF -> zoo -> HF logits")
    again = decoder.from_transformers(back).state_dict()
    assert all(torch.equal(again[k], v) for k, v in zoo.state_dict().items()), "zoo -> HF -> zoo weights"
    drawn = randomise(decoder.from_transformers(hf), seed=3).eval()
    out, _ = to_hf(drawn, net_cfg, decoder.hf_class)
    assert_matches(out(x).logits, drawn(x), what=f"{decoder.hf_class}: zoo -> HF logits")
    return back


@torch.no_grad()
def check_zoo_export(tmp_path: Path, capsys, decoder: Decoder, *overrides: str) -> dict:
    """``zoo export`` of a small randomised checkpoint of ``decoder.model`` (with ``overrides``) writes
    a folder of its class that AutoModelForCausalLM loads to the checkpoint's logits. Returns its config.json."""
    from transformers import AutoModelForCausalLM

    from zoo.cli.commands import call

    model = saved_checkpoint(tmp_path / "m.ckpt", decoder.model, {"vocab_size": 50}, "model.net.n_layers=2",
                             "model.net.block.d_model=32", "model.net.block.d_ff=64", "model.net.context=24", *overrides)
    call("export", [f"ckpt={tmp_path / 'm.ckpt'}", f"out={tmp_path / 'out'}"])
    assert f"({decoder.hf_class})" in capsys.readouterr().out
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == [decoder.hf_class]
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    tokens = torch.randint(0, 50, (2, 19))
    assert_matches(hf(tokens).logits, model.net(tokens), what=f"exported {decoder.model} checkpoint's logits")
    return config


@torch.no_grad()
def check_folder(tmp_path: Path, hf: torch.nn.Module, decoder: Decoder):
    """``model.init_from=DIR`` of ``hf``'s ``save_pretrained`` folder, through the shared reader,
    gives ``hf``'s logits. Returns the objective read."""
    from test_init_from import objective_from

    hf.save_pretrained(tmp_path)
    model = objective_from(decoder.model, tmp_path, {"vocab_size": hf.config.vocab_size})
    tokens = torch.randint(0, hf.config.vocab_size, (2, 37))
    assert_matches(model.net.eval()(tokens), hf(tokens).logits, what=f"{decoder.model} logits from a folder")
    return model


@torch.no_grad()
def check_decoding(hf: torch.nn.Module, net: torch.nn.Module, prompt: int = 5, new: int = 14):
    """Decoding with the KV cache, a prefix then one token at a time past the longest window (a
    windowed layer's cache rolls), gives the full forward's logits; greedy decoding (``zoo generate``'s
    ``temperature=0``) gives Hugging Face ``generate``'s tokens, cache and all."""
    from zoo.models.sampling import generate

    tokens = torch.randint(0, hf.config.vocab_size, (2, prompt + new), generator=torch.Generator().manual_seed(3))
    full = net(tokens)
    cache = net.new_cache()
    steps = [net(tokens[:, :prompt], cache=cache)] + [net(tokens[:, t:t + 1], cache=cache)
                                                      for t in range(prompt, tokens.shape[1])]
    assert_matches(torch.cat(steps, dim=1), full, what="cached decoding")
    start = tokens[:, :prompt]
    theirs = hf.generate(start, attention_mask=torch.ones_like(start), max_new_tokens=new, do_sample=False)
    assert theirs.shape == (2, prompt + new), "generate stopped early: give the tiny config eos_token_id=None"
    assert torch.equal(generate(net, start, new, temperature=0), theirs)
