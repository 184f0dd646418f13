"""Exactness: tiny random reference ViTs (Hugging Face, timm) -> converted -> same logits (fp32)."""

import pytest
import timm
import torch
from hydra.errors import InstantiationException
from transformers import ViTConfig, ViTForImageClassification

from exactness import assert_matches, randomise
from zoo.convert.common import build_net
from zoo.convert.vit import from_timm, from_timm_state_dict, from_transformers


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hf_vit_logits_match(dtype):
    """float64 too: under SDPA (eager ViT attention takes its softmax in float32) the reference
    computes in float64 throughout."""
    torch.manual_seed(0)
    cfg = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                    image_size=16, patch_size=4, num_channels=3, num_labels=5, attn_implementation="sdpa")
    hf = randomise(ViTForImageClassification(cfg).eval())
    net = from_transformers(hf).eval()
    hf, net = hf.to(dtype), net.to(dtype)
    images = torch.randn(3, 3, 16, 16, dtype=dtype)
    with torch.no_grad():
        expected, got = hf(pixel_values=images).logits, net(images)
    assert got.shape == (3, 5)
    assert_matches(got, expected, what="ViT logits")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("options", [
    {},                                                          # CLS token pooling, final norm
    {"global_pool": "avg"},                                      # mean of patches, then fc_norm
    {"pre_norm": True, "qkv_bias": False, "in_chans": 1},        # norm after positions, no q/k/v bias
])
def test_timm_vit_logits_match(options, dtype):
    """float64 too: timm's fused attention (SDPA) computes in the input's dtype throughout."""
    torch.manual_seed(0)
    ref = timm.models.vision_transformer.VisionTransformer(
        img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, mlp_ratio=1.5, num_classes=7, **options).eval()
    randomise(ref)  # timm zero-initialises the head and CLS, norms at ones/zeros
    net = from_timm(ref).eval()
    ref, net = ref.to(dtype), net.to(dtype)
    images = torch.randn(2, options.get("in_chans", 3), 16, 16, dtype=dtype)
    with torch.no_grad():
        expected, got = ref(images), net(images)
    assert_matches(got, expected, what="timm ViT logits")


def test_timm_state_dict_needs_the_head_count_it_cannot_infer():
    ref = timm.models.vision_transformer.VisionTransformer(
        img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2, num_classes=3).eval()
    net = from_timm_state_dict(ref.state_dict(), n_heads=2)
    assert net.stack.blocks[0].attn.n_heads == 2
    with pytest.raises(ValueError, match="global_pool='map'"):
        from_timm_state_dict(ref.state_dict(), n_heads=2, global_pool="map")


def test_timm_layer_scale_is_refused_by_name():
    ref = timm.models.vision_transformer.VisionTransformer(
        img_size=8, patch_size=4, embed_dim=16, depth=1, num_heads=2, num_classes=3, init_values=0.1)
    with pytest.raises(KeyError, match="ls1.gamma"):
        from_timm(ref)


def test_image_size_not_divisible_by_patch_names_both():
    # through the config, as train.py builds it (Hydra wraps the embedder's ValueError)
    with pytest.raises(InstantiationException, match="image size 30 is not divisible by patch size 4"):
        build_net("vit", [], {"num_classes": 10, "image_size": 30, "channels": 3})
