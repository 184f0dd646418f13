"""The checks every decoder family passes beyond its own exactness test: cached decoding against
recomputation and transformers' greedy ``generate``, ``model.init_from=DIR`` of a
``save_pretrained`` folder, the export round trip both ways and ``zoo export`` loading in
transformers' Auto class. One copy for the decoders of the shared mapping (Qwen2, Qwen3, OLMo 2,
Phi-3, Gemma 2 / 3, ...: a ``zoo.convert.decoder.Decoder``) and the others (GPT-NeoX), each given as a
:class:`DecoderConverter`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Protocol

import torch

from exactness import assert_matches, randomise
from test_export import resolved_net, saved_checkpoint
from zoo.convert.common import shape_overrides
from zoo.convert.export import FAMILIES, to_hf
from zoo.models.sampling import generate


class DecoderConverter(Protocol):
    """What the checks read of a decoder's converter (a ``zoo.convert.decoder.Decoder`` has it all)."""

    model: str  # its conf/model/<model>.yaml
    hf_class: str  # e.g. "Qwen2ForCausalLM"
    shape: Callable[[dict[str, Any]], dict[str, Any]]  # Hugging Face config -> the zoo net's values
    from_transformers: Callable[[torch.nn.Module], torch.nn.Module]  # a model in memory -> a zoo net


@torch.no_grad()
def check_generation(hf: torch.nn.Module, net: torch.nn.Module, vocab: int, new: int = 10) -> None:
    """A prompt of 11, then single steps through the KV cache: the logits are the full forward's
    and ``hf``'s; greedy decoding of ``new`` tokens with the cache is the one without and
    transformers' ``generate`` (greedy, its own cache, no stop at an end-of-text)."""
    tokens = torch.randint(0, vocab, (2, 21), generator=torch.Generator().manual_seed(2))
    cache = net.new_cache()
    steps = torch.cat([net(tokens[:, :11], cache=cache)] + [net(tokens[:, t:t + 1], cache=cache) for t in range(11, 21)], 1)
    assert_matches(steps, net(tokens), what="cached decoding against recomputation")
    assert_matches(steps, hf(tokens).logits, what="cached decoding against Hugging Face")
    prompt = tokens[:, :7]
    cached = generate(net, prompt, new, temperature=0, use_cache=True)
    assert torch.equal(cached, generate(net, prompt, new, temperature=0, use_cache=False))
    # eos_token_id=None: no stop (a row would be padded after an end-of-text the zoo decodes past)
    theirs = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    assert torch.equal(cached, theirs), f"greedy tokens {cached.tolist()} != transformers' {theirs.tolist()}"


@torch.no_grad()
def check_round_trip(hf: torch.nn.Module, decoder: DecoderConverter) -> torch.nn.Module:
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
def check_zoo_export(tmp_path: Path, capsys, decoder: DecoderConverter, *overrides: str) -> dict:
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
def check_folder(tmp_path: Path, hf: torch.nn.Module, decoder: DecoderConverter):
    """``model.init_from=DIR`` of ``hf``'s ``save_pretrained`` folder, through the shared reader,
    gives ``hf``'s logits. Returns the objective read."""
    from test_init_from import objective_from

    hf.save_pretrained(tmp_path)
    model = objective_from(decoder.model, tmp_path, {"vocab_size": hf.config.vocab_size})
    tokens = torch.randint(0, hf.config.vocab_size, (2, 37))
    assert_matches(model.net.eval()(tokens), hf(tokens).logits, what=f"{decoder.model} logits from a folder")
    return model
