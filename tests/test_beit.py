"""BEiT: tiny random Hugging Face ``BeitForImageClassification`` models (relative position bias per layer
or shared, mean pooling or the CLS) -> converted (in memory, or a folder in the released checkpoint's layout
with ``model.init_from=DIR``, exported back) -> the same logits."""

import pytest
import torch
from transformers import AutoModelForImageClassification, BeitConfig, BeitForImageClassification

from exactness import assert_matches, randomise
from test_export import saved_checkpoint
from test_init_from import VIT_DIMS
from zoo.convert import beit
from zoo.convert.export import export

# a 5 x 5 patch grid (odd: the offsets' table is 9 x 9), 3 layers so that per-layer tables can differ
SHAPE = {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 48,
         "image_size": 20, "patch_size": 4, "num_labels": 5, "attn_implementation": "sdpa",
         "use_absolute_position_embeddings": False, "use_mask_token": False}
KINDS = {"per_layer": {"use_relative_position_bias": True},
         "shared": {"use_shared_relative_position_bias": True, "use_absolute_position_embeddings": True},
         "cls_pooling": {"use_relative_position_bias": True, "use_mean_pooling": False}}
# microsoft/beit-base-patch16-224's config.json (BEiT-B/16 fine-tuned on ImageNet-1k), its sizes scaled down
# (768 wide, 12 layers of 12 heads: 48, 2 of 3) and its 224 px images (a 14 x 14 grid) to CIFAR's 32 (8 x 8)
RELEASED = {"architectures": ["BeitForImageClassification"], "attention_probs_dropout_prob": 0.0,
            "drop_path_rate": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": 48,
            "image_size": 32, "initializer_range": 0.02, "intermediate_size": 192, "layer_norm_eps": 1e-12,
            "layer_scale_init_value": 0.1, "model_type": "beit", "num_attention_heads": 3, "num_channels": 3,
            "num_hidden_layers": 2, "patch_size": 4, "use_absolute_position_embeddings": False,
            "use_mask_token": False, "use_mean_pooling": True, "use_relative_position_bias": True,
            "use_shared_relative_position_bias": False, "vocab_size": 8192,
            "id2label": {str(i): str(i) for i in range(10)}, "label2id": {str(i): i for i in range(10)}}


def _model(kind: str) -> BeitForImageClassification:
    torch.manual_seed(0)
    return randomise(BeitForImageClassification(BeitConfig(**SHAPE | KINDS[kind])).eval())  # tables, lambdas too


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@torch.no_grad()
def test_hf_beit_logits_match(kind, dtype):
    """float64 too: under SDPA the reference computes its bias tables and attention in float64."""
    hf = _model(kind)
    net = beit.from_transformers(hf).eval()
    per_layer = kind != "shared"
    assert isinstance(net.bias, torch.nn.ModuleList) == per_layer
    table = net.bias[1].table if per_layer else net.bias.table
    assert table.shape == (9 * 9 + 3, 4)  # (2 * 5 - 1) squared offsets + the CLS's 3
    hf, net = hf.to(dtype), net.to(dtype)
    images = torch.randn(2, 3, 20, 20, dtype=dtype)
    assert_matches(net(images), hf(pixel_values=images).logits, what=f"BEiT ({kind}) logits")


@torch.no_grad()
def test_each_layer_reads_its_own_table():
    """Swapping two layers' tables changes the logits: a test that a shared table would pass is not one."""
    hf = _model("per_layer")
    net = beit.from_transformers(hf).eval()
    images = torch.randn(2, 3, 20, 20)
    before = net(images)
    tables = [b.table.clone() for b in net.bias]
    net.bias[0].table.copy_(tables[2])
    net.bias[2].table.copy_(tables[0])
    assert (net(images) - before).abs().max() > 1e-3


def test_both_or_neither_bias_kind_is_refused_by_name():
    for flags in ({}, {"use_relative_position_bias": True, "use_shared_relative_position_bias": True}):
        with pytest.raises(ValueError, match="use_relative_position_bias="):
            beit.from_transformers(BeitForImageClassification(BeitConfig(**SHAPE | flags)))


@torch.no_grad()
def test_another_image_size_is_refused_by_the_tables():
    net = beit.from_transformers(_model("per_layer")).eval()
    with pytest.raises(ValueError, match="image"):
        net(torch.randn(1, 3, 24, 24))


@torch.no_grad()
def test_released_layout_folder_reads_with_init_from_and_exports_back(tmp_path):
    torch.manual_seed(0)
    hf = randomise(BeitForImageClassification(BeitConfig(**RELEASED)).eval())
    hf.save_pretrained(tmp_path / "hf")
    model = saved_checkpoint(tmp_path / "beit.ckpt", "beit", VIT_DIMS, f"model.init_from={tmp_path / 'hf'}")
    net = model.hparams.net
    assert (net["block"]["norm_eps"], net["block"]["layer_scale"], net["bias"]["window"]) == (1e-12, 0.1, 8)
    images = torch.randn(2, 3, 32, 32)
    assert_matches(model.net(images), hf(pixel_values=images).logits, what="BEiT logits from model.init_from")
    assert export(tmp_path / "beit.ckpt", tmp_path / "out")[0] == "BeitForImageClassification"
    back = AutoModelForImageClassification.from_pretrained(tmp_path / "out").eval()
    assert_matches(back(pixel_values=images).logits, hf(pixel_values=images).logits, what="BEiT, HF -> zoo -> HF")


@torch.no_grad()
def test_a_zoo_trained_shared_bias_beit_exports(tmp_path):
    """A zoo checkpoint (randomised, its own init drawn away) with the shared table and absolute positions."""
    model = saved_checkpoint(tmp_path / "b.ckpt", "beit", VIT_DIMS, "model.net.bias.shared=true",
                             "model.net.embedder.absolute_positions=true", "model.net.n_layers=2",
                             "model.net.block.d_model=32", "model.net.block.n_heads=2")
    assert export(tmp_path / "b.ckpt", tmp_path / "out")[0] == "BeitForImageClassification"
    back = AutoModelForImageClassification.from_pretrained(tmp_path / "out").eval()
    assert back.config.use_shared_relative_position_bias and back.config.use_absolute_position_embeddings
    images = torch.randn(2, 3, 32, 32)
    assert_matches(back(pixel_values=images).logits, model.net(images), what="BEiT logits, zoo -> HF")
