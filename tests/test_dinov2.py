"""DINOv2 (with and without registers): tiny random Hugging Face models -> converted (in memory, or a
folder in the released checkpoint's layout with ``model.init_from=DIR``, exported back) -> the same
features and logits, at an input size whose grid needs the positions resampled; layer scale learned."""

import json

import pytest
import torch
from PIL import Image
from transformers import (AutoModelForImageClassification, Dinov2Config, Dinov2ForImageClassification, Dinov2Model,
                          Dinov2WithRegistersConfig, Dinov2WithRegistersForImageClassification,
                          Dinov2WithRegistersModel)

from exactness import assert_matches, randomise
from test_export import saved_checkpoint
from test_init_from import VIT_DIMS, objective_from
from zoo.convert import dinov2
from zoo.convert.export import export

SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "mlp_ratio": 2,
         "image_size": 16, "patch_size": 4, "num_labels": 5, "attn_implementation": "sdpa"}
MODELS = {"plain": (Dinov2Config, Dinov2Model, Dinov2ForImageClassification, {}),
          "registers": (Dinov2WithRegistersConfig, Dinov2WithRegistersModel, Dinov2WithRegistersForImageClassification,
                        {"num_register_tokens": 3})}
# facebook/dinov2-small's config.json, its sizes scaled down (its image_size 518 = a 37 x 37 table: here 6 x 6)
RELEASED = {"architectures": ["Dinov2Model"], "attention_probs_dropout_prob": 0.0, "drop_path_rate": 0.0,
            "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": 48, "image_size": 24,
            "initializer_range": 0.02, "layer_norm_eps": 1e-06, "layerscale_value": 1.0, "mlp_ratio": 4,
            "model_type": "dinov2", "num_attention_heads": 3, "num_channels": 3, "num_hidden_layers": 2,
            "patch_size": 4, "qkv_bias": True, "use_swiglu_ffn": False}


def _model(kind: str, classifier: bool = False, **options):
    config, bare, head, extra = MODELS[kind]
    torch.manual_seed(0)
    return randomise((head if classifier else bare)(config(**SHAPE | extra | options)).eval())  # layer scales too


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("size, dtype", [((16, 16), torch.float32),  # the table's own 4 x 4 grid
                                         ((24, 20), torch.float32), ((24, 20), torch.float64)])  # 6 x 5: resampled
def test_hf_dinov2_features_and_logits_match(kind, size, dtype):
    """float64 too: under SDPA the reference computes in float64, but for its position resampling,
    in float32 (as the zoo's)."""
    hf, classifier = _model(kind), _model(kind, classifier=True)
    net, head_net = dinov2.from_transformers(hf).eval(), dinov2.from_transformers(classifier).eval()
    assert net.stack.blocks[0].attn_out_norm.gamma.shape == (32,)
    hf, net, classifier, head_net = (m.to(dtype) for m in (hf, net, classifier, head_net))
    images = torch.randn(2, 3, *size, dtype=dtype)
    with torch.no_grad():
        ref = hf(pixel_values=images).last_hidden_state
        got = net.features(images)
        logits = head_net(images)
        ref_logits = classifier(pixel_values=images).logits
    registers = MODELS[kind][3].get("num_register_tokens", 0)
    assert got.shape == (2, 1 + registers + (size[0] // 4) * (size[1] // 4), 32)
    assert_matches(got, ref, what=f"DINOv2 ({kind}) features at {size}")
    assert_matches(logits, ref_logits, what=f"DINOv2 ({kind}) logits at {size}")


def test_swiglu_giant_is_refused_by_name():
    with pytest.raises(ValueError, match="use_swiglu_ffn=True"):
        dinov2.from_transformers(Dinov2Model(Dinov2Config(**SHAPE, use_swiglu_ffn=True)))


@torch.no_grad()
def test_released_layout_backbone_folder_reads_under_a_fresh_classifier_and_exports_back(tmp_path):
    torch.manual_seed(0)
    hf = randomise(Dinov2Model(Dinov2Config(**RELEASED)).eval())
    hf.save_pretrained(tmp_path / "hf")
    with pytest.warns(UserWarning, match="DINOv2 backbone .*classifier starts from scratch"):
        model = saved_checkpoint(tmp_path / "dino.ckpt", "dinov2", VIT_DIMS, f"model.init_from={tmp_path / 'hf'}")
    net = model.hparams.net
    assert (net["embedder"]["image_size"], net["block"]["d_ff"], net["block"]["layer_scale"]) == (24, 192, 1.0)
    images = torch.randn(2, 3, 32, 32)  # CIFAR-10's size: the 6 x 6 table resampled to 8 x 8
    assert_matches(model.net.features(images), hf(pixel_values=images).last_hidden_state,
                   what="DINOv2 features from model.init_from")
    assert export(tmp_path / "dino.ckpt", tmp_path / "out") == ("Dinov2ForImageClassification", [
        "dinov2.embeddings.mask_token"])
    back = AutoModelForImageClassification.from_pretrained(tmp_path / "out").eval()
    assert_matches(back(pixel_values=images).logits, model.net(images), what="DINOv2 logits, zoo -> HF")


@torch.no_grad()
def test_registers_classifier_folder_exports_by_name_and_plain_export_refuses_it(tmp_path):
    hf = _model("registers", classifier=True, num_labels=10)
    hf.save_pretrained(tmp_path / "hf")
    model = saved_checkpoint(tmp_path / "reg.ckpt", "dinov2", VIT_DIMS | {"image_size": 16},
                             f"model.init_from={tmp_path / 'hf'}")
    images = torch.randn(2, 3, 16, 16)
    assert_matches(model.net(images), hf(pixel_values=images).logits, what="registers logits from a folder")
    with pytest.raises(ValueError, match="embedder.registers"):
        export(tmp_path / "reg.ckpt", tmp_path / "plain")
    name = "Dinov2WithRegistersForImageClassification"
    assert export(tmp_path / "reg.ckpt", tmp_path / "out", hf_class=name)[0] == name
    back = AutoModelForImageClassification.from_pretrained(tmp_path / "out").eval()
    assert_matches(back(pixel_values=images).logits, hf(pixel_values=images).logits, what="registers, HF -> zoo -> HF")


def test_zoo_embed_gives_the_cls_and_mean_patch_features_of_a_folder(tmp_path):
    from zoo.cli.commands import call

    torch.manual_seed(0)
    hf = randomise(Dinov2WithRegistersModel(Dinov2WithRegistersConfig(**SHAPE, num_register_tokens=2)).eval())
    hf.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "BitImageProcessor", "do_normalize": True, "image_mean": [0.5] * 3,
         "image_std": [0.5] * 3}))
    pixels = torch.randint(0, 256, (16, 16, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    Image.fromarray(pixels.numpy()).save(tmp_path / "a.png")
    images = (pixels.permute(2, 0, 1)[None].float() / 255 - 0.5) / 0.5
    with torch.no_grad():
        states = hf(pixel_values=images).last_hidden_state
    for pooling, expected in (("cls", states[:, 0]), ("mean", states[:, 3:].mean(1))):  # registers left out
        call("embed", [f"init_from={tmp_path / 'hf'}", f"image=[{tmp_path / 'a.png'}]", f"pooling={pooling}",
                       f"out={tmp_path / pooling}.json"])
        got = torch.tensor(json.loads((tmp_path / f"{pooling}.json").read_text())["embeddings"])
        assert_matches(got, expected, atol=1e-5, rtol=1e-5, what=f"zoo embed ({pooling})")  # JSON's float rounding
