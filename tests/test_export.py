"""Export to Hugging Face (zoo/convert/export.py): HF -> zoo -> HF gives the reference's logits
and zoo -> HF -> zoo the same weights, for every family with an exporter; a net the Hugging Face
class cannot express is refused with the difference; a zoo checkpoint becomes a folder that
``AutoModelForCausalLM.from_pretrained`` loads."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf, open_dict
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          ViTConfig, ViTForImageClassification)

from exactness import assert_matches
from zoo.convert import bert, gpt2, llama, vit
from zoo.convert.common import build_net, compose_config, shape_overrides
from zoo.convert.export import to_hf


def tiny(family: str):
    torch.manual_seed(0)
    if family == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=24, n_embd=16, n_layer=2, n_head=2)), gpt2
    if family == "bert":
        return (BertForMaskedLM(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                           intermediate_size=24, max_position_embeddings=32)), bert)
    if family == "llama":
        return (LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                             rope_theta=5000.0)), llama)
    hf = ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=24, num_labels=5))
    with torch.no_grad():
        hf.classifier.weight.normal_()
    return hf, vit


def example(family: str) -> torch.Tensor:
    return torch.randn(2, 3, 32, 32) if family == "vit" else torch.randint(0, 50, (2, 12))


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama", "vit"])
@torch.no_grad()
def test_round_trips(family):
    hf, module = tiny(family)
    hf.eval()
    zoo = module.from_transformers(hf).eval()
    net_cfg = _net_cfg(family, hf)
    back, untouched = to_hf(zoo, net_cfg, f"zoo.convert.{module.__name__.rsplit('.', 1)[-1]}.pretrained")
    x = example(family)
    assert_matches(back(x).logits, hf(x).logits, what=f"{family}: HF -> zoo -> HF logits")
    again = module.from_transformers(back).state_dict()
    assert again.keys() == zoo.state_dict().keys()
    assert all(torch.equal(again[k], v) for k, v in zoo.state_dict().items()), "zoo -> HF -> zoo weights"
    assert untouched == []  # every Hugging Face weight is written (BertForMaskedLM has no pooler)


def resolved_net(model: str, overrides: list[str], dims: dict) -> dict:
    """The resolved net config of ``model=<model>`` with ``overrides`` (what a checkpoint stores)."""
    composed = compose_config([f"model={model}", *overrides])
    with open_dict(composed):
        composed.dims = dims
    return OmegaConf.to_container(composed.model.net, resolve=True)


def _net_cfg(family: str, hf) -> dict:
    model, shape, dims = {
        "gpt2": ("gpt", gpt2.gpt2_shape, {"vocab_size": 50}),
        "bert": ("bert", bert.bert_shape, {"vocab_size": 50}),
        "llama": ("llama", llama.llama_shape, {"vocab_size": 50}),
        "vit": ("vit", vit.vit_shape, {"num_classes": 5, "image_size": 32, "channels": 3}),
    }[family]
    return resolved_net(model, shape_overrides(shape(hf.config.to_dict())), dims)


def test_a_net_the_hugging_face_class_cannot_express_is_refused():
    torch.manual_seed(0)
    overrides = ["model.net.n_layers=2", "model.net.block.d_model=16", "model.net.block.n_heads=2",
                 "model.net.context=24", "model.net.block.prenorm=false"]
    net = build_net("gpt", overrides, {"vocab_size": 50})
    with pytest.raises(ValueError, match="GPT2LMHeadModel gives outputs .* away from the zoo net's"):
        to_hf(net, resolved_net("gpt", overrides, {"vocab_size": 50}), "zoo.convert.gpt2.pretrained")
    with pytest.raises(ValueError, match="no export for this network"):
        to_hf(net, {}, None)


@pytest.mark.slow  # one train.py run, ~30 s
def test_a_zoo_checkpoint_becomes_a_folder_transformers_loads(tmp_path, shakespeare_dir):
    from transformers import AutoModelForCausalLM

    from conftest import run_train
    from zoo.convert.export import export
    from zoo.train.checkpoint import load

    run_train(tmp_path / "run", shakespeare_dir, "model.net.n_layers=2", "model.net.block.d_model=32",
              "model.net.block.n_heads=2", "data.check=false", "data.batch_size=4", "data.val_batches=1",
              "trainer.max_steps=3", "trainer.val_check_interval=3", "++model.sample_tokens=5", "test=false")
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert export(ckpt, tmp_path / "hf") == []
    assert {"config.json", "model.safetensors"} <= {p.name for p in (tmp_path / "hf").iterdir()}
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, hf.config.vocab_size, (2, 20))
    with torch.no_grad():
        assert_matches(hf(ids).logits, load(ckpt).net.eval()(ids), what="exported checkpoint's logits")
