"""Export to Hugging Face (zoo/convert/export.py): HF -> zoo -> HF gives the reference's logits
and zoo -> HF -> zoo the same weights, for every family with an exporter; a net the Hugging Face
class cannot express is refused with the difference; a zoo checkpoint becomes a folder that
``AutoModelForCausalLM.from_pretrained`` loads."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf, open_dict
import transformers as T
from omegaconf import OmegaConf, open_dict

from exactness import assert_matches, assert_untied, randomise
from zoo.convert import (big_bird, bert, gpt2, gpt_neo, llama, llava, mistral, modernbert, t5, videomae, vit,
                         vitdet, vivit, whisper, yolos)
from zoo.convert.common import build_net, compose_config, shape_overrides
from zoo.convert.export import FAMILIES, to_hf


def _untied_t5(config):
    """A T5 v1.1: a head of its own (transformers 5 ties it at construction whatever the config says)."""
    hf = T.T5ForConditionalGeneration(config)
    hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.lm_head.weight))
    assert_untied(hf)
    return hf


VIDEO = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 24,
         "image_size": 8, "num_frames": 4, "num_labels": 3}
VISION = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 24}
T5_SHAPE = {"vocab_size": 40 + t5.EXTRA, "d_model": 16, "d_kv": 4, "d_ff": 32, "num_layers": 2, "num_decoder_layers": 3,
            "num_heads": 4, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 20}

# family -> (a tiny random reference, its converter module, model=..., the import's Hydra overrides of its
# config (a dict), the data's dims)
CASES = {
    "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=50, n_positions=24, n_embd=16, n_layer=2, n_head=2)),
             gpt2, "gpt", lambda c: shape_overrides(gpt2.gpt2_shape(c)), {"vocab_size": 50}),
    "bert": (lambda: T.BertForMaskedLM(T.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=24,
                                                    max_position_embeddings=32)),
             bert, "bert", lambda c: shape_overrides(bert.bert_shape(c)), {"vocab_size": 50}),
    "llama": (lambda: T.LlamaForCausalLM(T.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=40,
                                                       num_hidden_layers=2, num_attention_heads=4,
                                                       num_key_value_heads=2, max_position_embeddings=32,
                                                       rope_theta=5000.0)),
              llama, "llama", lambda c: shape_overrides(llama.llama_shape(c)), {"vocab_size": 50}),
    "vit": (lambda: (T.ViTForImageClassification(T.ViTConfig(image_size=32, patch_size=8, num_labels=5,
                                                                       **VISION))),
            vit, "vit", lambda c: shape_overrides(vit.vit_shape(c)),
            {"num_classes": 5, "image_size": 32, "channels": 3}),
    "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(**T5_SHAPE)),
           t5, "t5", lambda c: shape_overrides(t5.t5_shape(c, True)), {"vocab_size": 40}),
    "t5_v1_1": (lambda: _untied_t5(T.T5Config(**T5_SHAPE, feed_forward_proj="gated-gelu", tie_word_embeddings=False)),
                t5, "t5", lambda c: shape_overrides(t5.t5_shape(c, False)), {"vocab_size": 40}),
    "whisper": (lambda: (T.WhisperForConditionalGeneration(T.WhisperConfig(
        vocab_size=50, num_mel_bins=8, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_source_positions=6,
        max_target_positions=20, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1))),
        whisper, "whisper", lambda c: shape_overrides(whisper.whisper_shape(c)), {"vocab_size": 50}),
    "mistral": (lambda: T.MistralForCausalLM(T.MistralConfig(vocab_size=50, hidden_size=16, intermediate_size=40,
                                                             num_hidden_layers=2, num_attention_heads=4,
                                                             num_key_value_heads=2, max_position_embeddings=32,
                                                             sliding_window=5)),
                mistral, "mistral", lambda c: shape_overrides(mistral.MISTRAL.shape(c)),
                {"vocab_size": 50}),
    "bigbird": (lambda: T.BigBirdForMaskedLM(T.BigBirdConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                                             num_attention_heads=2, intermediate_size=24,
                                                             max_position_embeddings=64, block_size=4,
                                                             num_random_blocks=2, attention_type="block_sparse")),
                big_bird, "bigbird", lambda c: shape_overrides(big_bird.big_bird_shape(c)), {"vocab_size": 50}),
    "modernbert": (lambda: (T.ModernBertForMaskedLM(T.ModernBertConfig(
        vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=4, num_attention_heads=2,
        max_position_embeddings=64, local_attention=8, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        cls_token_id=1, sep_token_id=2))),
        modernbert, "modernbert", lambda c: shape_overrides(modernbert.modernbert_shape(c)), {"vocab_size": 50}),
    "gpt_neo": (lambda: T.GPTNeoForCausalLM(T.GPTNeoConfig(vocab_size=50, hidden_size=16, num_layers=3, num_heads=2,
                                                           max_position_embeddings=64, window_size=5,
                                                           attention_types=[[["global", "local"], 1], [["local"], 1]])),
                gpt_neo, "gpt_neo", lambda c: shape_overrides(gpt_neo.gpt_neo_shape(c)),
                {"vocab_size": 50}),
    "vivit": (lambda: (T.VivitForVideoClassification(T.VivitConfig(**VIDEO, tubelet_size=[2, 4, 4]))),
              vivit, "vivit", lambda c: shape_overrides(vivit.vivit_shape(c)),
              {"num_classes": 3, "num_frames": 4, "image_size": 8, "channels": 3}),
    "videomae": (lambda: (T.VideoMAEForVideoClassification(T.VideoMAEConfig(**VIDEO, tubelet_size=2,
                                                                                      patch_size=4))),
                 videomae, "videomae", lambda c: shape_overrides(videomae.videomae_shape(c)),
                 {"num_classes": 3, "num_frames": 4, "image_size": 8, "channels": 3}),
    "yolos": (lambda: (T.YolosForObjectDetection(T.YolosConfig(
        **VISION, image_size=[16, 16], patch_size=4, num_detection_tokens=3, num_labels=3,
        use_mid_position_embeddings=False))),
        yolos, "yolos", lambda c: shape_overrides(yolos.yolos_shape(c)),
        {"num_classes": 3, "image_size": 16, "channels": 3}),
    "vitdet": (lambda: (T.VitDetModel(T.VitDetConfig(
        hidden_size=16, num_hidden_layers=3, num_attention_heads=2, mlp_ratio=2, image_size=16, pretrain_image_size=16,
        patch_size=2, window_size=4, window_block_indices=[0, 1]))),
        vitdet, "vitdet",
        lambda c: [*shape_overrides(vitdet.vitdet_shape(c)), "model.net.head={_target_:torch.nn.Identity}"],
        {"num_classes": 1, "image_size": 16, "channels": 3}),
    "llava": (lambda: T.LlavaForConditionalGeneration(T.LlavaConfig(
        vision_config=T.CLIPVisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=3,
                                         num_attention_heads=2, image_size=16, patch_size=8, hidden_act="quick_gelu"),
        text_config=T.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32),
        image_token_index=49)),
        llava, "llava", lambda c: shape_overrides(llava.llava_shape(c)), {"vocab_size": 50, "image_token_id": 49}),
}

# The Hugging Face weights no zoo weight is written to: BigBirdForMaskedLM keeps a pooler its logits do
# not read (BertForMaskedLM has none); LLaVA reads its vision tower at the second-to-last layer, so the
# zoo builds neither the last layer nor the final norm
UNTOUCHED = {"bigbird": lambda name: name.startswith("bert.pooler."),
             "llava": lambda name: name.startswith(("model.vision_tower.encoder.layers.2.",
                                                    "model.vision_tower.post_layernorm."))}


@pytest.mark.parametrize("family", list(CASES))
@torch.no_grad()
def test_round_trips(family):
    """HF -> zoo: the import gives the reference's outputs (so a swap in the import mapping fails here:
    the export inverts that mapping on a probe and would cancel it); zoo -> HF: the exported model gives
    the zoo net's outputs; HF -> zoo -> HF -> zoo: the same weights. Both sides are randomised (every
    weight, norm and bias away from its init), so two weights that are equal at init cannot be confused."""
    build, module, model, overrides, dims = CASES[family]
    torch.manual_seed(0)
    hf = randomise(build().eval())
    if family == "t5_v1_1":
        assert_untied(hf)
    zoo = module.from_transformers(hf).eval()
    net_cfg = resolved_net(model, overrides(hf.config.to_dict()), dims)
    exported = FAMILIES[type(hf).__name__]
    x = exported.example(net_cfg)
    assert_matches(exported.ours(zoo, x), exported.outputs(hf, x), what=f"{family}: HF -> zoo outputs")
    back, untouched = to_hf(zoo, net_cfg, type(hf).__name__)
    assert_matches(exported.outputs(back, x), exported.outputs(hf, x), what=f"{family}: HF -> zoo -> HF outputs")
    again = module.from_transformers(back).state_dict()
    assert again.keys() == zoo.state_dict().keys()
    assert all(torch.equal(again[k], v) for k, v in zoo.state_dict().items()), "zoo -> HF -> zoo weights"
    unread = UNTOUCHED.get(family, lambda name: False)
    assert untouched == [k for k in back.state_dict() if unread(k)]  # every other Hugging Face weight is written


@pytest.mark.parametrize("family", list(CASES))
@torch.no_grad()
def test_a_randomised_zoo_net_exports_to_its_outputs(family):
    """zoo -> HF on a zoo net drawn away from its init (not one that came from Hugging Face): the
    exported model gives the net's outputs under the shared bound, and reads back to the same weights."""
    build, module, model, overrides, dims = CASES[family]
    torch.manual_seed(0)
    hf = build().eval()
    net_cfg = resolved_net(model, overrides(hf.config.to_dict()), dims)
    net = randomise(module.from_transformers(hf), seed=3).eval()
    exported = FAMILIES[type(hf).__name__]
    x = exported.example(net_cfg)
    out, _ = to_hf(net, net_cfg, type(hf).__name__)
    assert_matches(exported.outputs(out, x), exported.ours(net, x), what=f"{family}: zoo -> HF outputs")
    again = module.from_transformers(out).state_dict()
    assert all(torch.equal(again[k], v) for k, v in net.state_dict().items()), "zoo -> HF -> zoo weights"


def resolved_net(model: str, overrides: list[str], dims: dict) -> dict:
    """The resolved net config of ``model=<model>`` with ``overrides`` (what a checkpoint stores)."""
    composed = compose_config([f"model={model}", *overrides])
    with open_dict(composed):
        composed.dims = dims
    return OmegaConf.to_container(composed.model.net, resolve=True)


def test_a_net_the_hugging_face_class_cannot_express_is_refused():
    torch.manual_seed(0)
    overrides = ["model.net.n_layers=2", "model.net.block.d_model=16", "model.net.block.n_heads=2",
                 "model.net.context=24", "model.net.block.prenorm=false"]
    net = build_net("gpt", overrides, {"vocab_size": 50})
    with pytest.raises(ValueError, match="GPT2LMHeadModel gives outputs .* away from the zoo net's"):
        to_hf(net, resolved_net("gpt", overrides, {"vocab_size": 50}), "GPT2LMHeadModel")
    with pytest.raises(ValueError, match="no export to 'OPTForCausalLM'"):
        to_hf(net, {}, "OPTForCausalLM")


@pytest.mark.slow  # one train.py run, ~30 s
def test_a_zoo_checkpoint_becomes_a_folder_transformers_loads(tmp_path, shakespeare_dir):
    from transformers import AutoModelForCausalLM

    from conftest import run_train
    from zoo.convert.export import export
    from zoo.objectives.loading import load

    run_train(tmp_path / "run", shakespeare_dir, "model.net.n_layers=2", "model.net.block.d_model=32",
              "model.net.block.n_heads=2", "data.check=false", "data.batch_size=4", "data.val_batches=1",
              "trainer.max_steps=3", "trainer.val_check_interval=3", "++model.sample_tokens=5", "test=false")
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert export(ckpt, tmp_path / "hf") == ("GPT2LMHeadModel", [])
    assert {"config.json", "model.safetensors"} <= {p.name for p in (tmp_path / "hf").iterdir()}
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, hf.config.vocab_size, (2, 20))
    with torch.no_grad():
        assert_matches(hf(ids).logits, load(ckpt).net.eval()(ids), what="exported checkpoint's logits")


def saved_checkpoint(path, model: str, dims: dict, *overrides: str):
    """A zoo checkpoint of ``model=<model>`` (built as train.py builds it, its net randomised unless it starts from a folder) at ``path``:
    what ``zoo export`` reads, without a training run."""
    from zoo.registry import name_of
    from zoo.train.run import objective

    cfg = compose_config([f"model={model}", *overrides])
    with open_dict(cfg):
        cfg.dims = dims
    built = objective(cfg)
    if not any(o.startswith("model.init_from=") for o in overrides):
        randomise(built.net, seed=2)  # away from the zoo's init too: norms, biases, positions
    torch.save({"zoo_objective": name_of(type(built)), "hyper_parameters": dict(built.hparams),
                "state_dict": built.state_dict()}, path)
    return built.eval()


@torch.no_grad()
def test_the_original_transformer_is_written_in_the_zoos_format_and_reads_back(tmp_path, capsys):
    from zoo.cli.commands import call
    from zoo.convert.export import read_zoo

    dims = {"vocab_size": 40, "eos_id": 2, "bos_id": 1, "pad_id": 0}
    model = saved_checkpoint(tmp_path / "t.ckpt", "transformer", dims, "model.net.n_encoder_layers=1",
                             "model.net.n_decoder_layers=2", "model.net.block.d_model=16", "model.net.block.n_heads=2",
                             "model.net.block.d_ff=24", "model.net.context=20")
    call("export", [f"ckpt={tmp_path / 't.ckpt'}", f"out={tmp_path / 'out'}"])
    said = capsys.readouterr().out
    assert "in the zoo's format (model.safetensors + zoo_config.json): this network has no transformers class" in said
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"model.safetensors", "zoo_config.json"}
    back = read_zoo(tmp_path / "out")
    source, target = torch.randint(3, 40, (2, 9)), torch.randint(3, 40, (2, 7))
    assert torch.equal(back(source, target), model.net(source, target))
    assert back.state_dict().keys() == model.net.state_dict().keys()


def test_a_zoo_folder_naming_a_class_outside_the_registry_is_refused(tmp_path):
    import json

    from zoo.convert.export import read_zoo

    (tmp_path / "model.safetensors").write_bytes(b"")
    (tmp_path / "zoo_config.json").write_text(json.dumps({"_target_": "os.system", "command": "touch pwned"}))
    with pytest.raises(ValueError, match="_target_='os.system' is not a class"):
        read_zoo(tmp_path)
    (tmp_path / "zoo_config.json").unlink()
    with pytest.raises(FileNotFoundError, match="zoo_config.json is missing"):
        read_zoo(tmp_path)


@torch.no_grad()
def test_zoo_export_writes_a_t5_checkpoint_that_auto_model_loads(tmp_path):
    """A zoo T5 started from a Hugging Face v1.1 folder, exported by the command: the folder
    ``AutoModelForSeq2SeqLM`` loads gives the first folder's logits and carries the zoo's special ids."""
    from zoo.cli.commands import call

    torch.manual_seed(0)
    hf = _untied_t5(T.T5Config(**T5_SHAPE, feed_forward_proj="gated-gelu", tie_word_embeddings=False)).eval()
    randomise(hf)
    hf.save_pretrained(tmp_path / "in")
    dims = {"vocab_size": 40, "eos_id": 2, "bos_id": 1, "pad_id": 0}
    saved_checkpoint(tmp_path / "t5.ckpt", "t5", dims, f"model.init_from={tmp_path / 'in'}")
    call("export", [f"ckpt={tmp_path / 't5.ckpt'}", f"out={tmp_path / 'out'}"])
    out = T.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert (out.config.eos_token_id, out.config.pad_token_id, out.config.decoder_start_token_id) == (2, 0, 1)
    source, target = torch.randint(0, 142, (2, 9)), torch.randint(0, 142, (2, 5))
    assert_matches(out(input_ids=source, decoder_input_ids=target).logits,
                   hf(input_ids=source, decoder_input_ids=target).logits, what="exported T5 logits")


def test_a_gpt_neo_checkpoint_is_exported_by_its_converter(tmp_path):
    from zoo.convert.export import export

    dims = {"vocab_size": 50}
    model = saved_checkpoint(tmp_path / "neo.ckpt", "gpt_neo", dims, "model.net.n_layers=2",
                             "model.net.block.d_model=16", "model.net.block.n_heads=2", "model.net.context=40")
    assert export(tmp_path / "neo.ckpt", tmp_path / "out") == ("GPTNeoForCausalLM", [])
    hf = T.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert hf.config.attention_layers == ["global", "local"] and hf.config.window_size == 32
    ids = torch.randint(0, 50, (2, 40))
    with torch.no_grad():
        assert_matches(hf(ids).logits, model.net(ids), what="exported GPT-Neo logits")


def test_a_vitdet_classifier_is_refused_naming_its_head():
    """VitDetModel is the backbone: a zoo ViTDet trained as a classifier has weights it cannot hold."""
    overrides = ["model.net.n_layers=3", "model.net.block.d_model=16", "model.net.block.n_heads=2",
                 "model.net.block.d_ff=32"]
    dims = {"num_classes": 4, "image_size": 16, "channels": 3}
    with pytest.raises(ValueError, match=r"VitDetModel has no place for the zoo weights \['head\."):
        to_hf(build_net("vitdet", overrides, dims), resolved_net("vitdet", overrides, dims), "VitDetModel")


def test_every_family_module_declares_one_class_and_two_declaring_one_are_refused(monkeypatch):
    from zoo.convert import families
    from zoo.registry import family_modules

    assert sorted(families.declared()) == sorted(family_modules())
    assert len(FAMILIES) == len(family_modules())  # one transformers class per family module
    gpt2_family = families.declared()["gpt2"]
    monkeypatch.setattr(families, "declared", lambda: {"gpt2": gpt2_family, "gpt2_again": gpt2_family})
    with pytest.raises(ValueError, match=r"zoo.convert.gpt2 and zoo.convert.gpt2_again both declare "
                                         r"FAMILY.hf_class='GPT2LMHeadModel'"):
        families.by_class()
