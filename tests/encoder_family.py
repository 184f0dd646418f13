"""The checks every BERT-like masked-LM family (RoBERTa, XLM-R, DistilBERT) passes beyond its own
exactness test: ``model.init_from=DIR`` of a ``save_pretrained`` folder, the export round trip both
ways and ``zoo export`` loading in ``AutoModelForMaskedLM``. One copy for the encoders."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import torch

from exactness import assert_matches, randomise
from test_export import resolved_net, saved_checkpoint
from zoo.convert.common import shape_overrides
from zoo.convert.export import FAMILIES, to_hf

MLM_DIMS = {"mask_id": 3, "special_ids": [0, 1, 2, 3]}  # besides the vocabulary: what data=wikitext gives an MLM


def real_tokens(vocab: int, shape: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """Random ids (B, L) above the special ids 0..3 (so none is the padding id)."""
    return torch.randint(4, vocab, shape, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def check_folder(tmp_path: Path, hf: torch.nn.Module, model: str, dims: dict, padding: torch.Tensor | None = None):
    """``model.init_from=DIR`` of ``hf``'s ``save_pretrained`` folder, through the shared reader,
    gives ``hf``'s logits (with ``padding`` (2, L), True at real tokens, the pad id elsewhere)."""
    from test_init_from import objective_from

    hf.save_pretrained(tmp_path)
    net = objective_from(model, tmp_path, MLM_DIMS | dims).net.eval()
    length = 37 if padding is None else padding.shape[1]
    tokens = real_tokens(hf.config.vocab_size, (2, length))
    if padding is None:
        padding = torch.ones_like(tokens, dtype=torch.bool)
    tokens = tokens.masked_fill(~padding, hf.config.pad_token_id)
    assert_matches(net(tokens, key_padding=padding), hf(tokens, attention_mask=padding.long()).logits,
                   padding[..., None], what=f"{model} logits from a folder")
    return net


@torch.no_grad()
def check_round_trip(hf: torch.nn.Module, module: ModuleType, model: str, shape) -> None:
    """HF -> zoo -> HF gives ``hf``'s logits and zoo -> HF -> zoo the same weights (every Hugging Face
    weight written); a zoo net drawn away from its init exports to its own logits."""
    hf_class = type(hf).__name__ if type(hf).__name__ in FAMILIES else module.FAMILY.hf_class
    net_cfg = resolved_net(model, shape_overrides(shape(hf.config.to_dict())), {"vocab_size": hf.config.vocab_size})
    zoo = module.from_transformers(hf).eval()
    x = FAMILIES[hf_class].example(net_cfg)
    back, untouched = to_hf(zoo, net_cfg, hf_class)
    assert untouched == []
    assert_matches(back(x).logits, hf(x).logits, what=f"{hf_class}: HF -> zoo -> HF logits")
    again = module.from_transformers(back).state_dict()
    assert again.keys() == zoo.state_dict().keys()
    assert all(torch.equal(again[k], v) for k, v in zoo.state_dict().items()), "zoo -> HF -> zoo weights"
    drawn = randomise(module.from_transformers(hf), seed=3).eval()
    out, _ = to_hf(drawn, net_cfg, hf_class)
    assert_matches(out(x).logits, drawn(x), what=f"{hf_class}: zoo -> HF logits")


@torch.no_grad()
def check_zoo_export(tmp_path: Path, capsys, model: str, hf_class: str, dims: dict, *overrides: str) -> dict:
    """``zoo export`` of a small randomised ``model=<model>`` checkpoint writes a folder of
    ``hf_class`` that AutoModelForMaskedLM loads (``overrides``: more of the checkpoint's settings) to the checkpoint's logits. Returns its config.json."""
    from transformers import AutoModelForMaskedLM

    from zoo.cli.commands import call

    built = saved_checkpoint(tmp_path / "m.ckpt", model, MLM_DIMS | dims, "model.net.n_layers=2",
                             "model.net.block.d_model=32", "model.net.block.d_ff=64", "model.net.context=24", *overrides)
    call("export", [f"ckpt={tmp_path / 'm.ckpt'}", f"out={tmp_path / 'out'}"])
    assert f"({hf_class})" in capsys.readouterr().out
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == [hf_class]
    hf = AutoModelForMaskedLM.from_pretrained(tmp_path / "out").eval()
    tokens = real_tokens(dims["vocab_size"], (2, 19))
    assert_matches(hf(tokens).logits, built.net(tokens), what=f"exported {model} checkpoint's logits")
    return config
