"""Exactness: tiny random Hugging Face ViViT and VideoMAE classifiers -> converted -> the same logits."""

import pytest
import torch
from hydra.errors import InstantiationException
from transformers import VideoMAEConfig, VideoMAEForVideoClassification, VivitConfig, VivitForVideoClassification

from exactness import assert_matches, randomise
from zoo.convert import videomae, vivit
from zoo.convert.common import build_net

SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48,
         "image_size": 16, "num_frames": 4, "num_labels": 5, "attn_implementation": "sdpa"}


def tiny_video(family: str) -> torch.nn.Module:
    """A tiny random ``VivitForVideoClassification`` or ``VideoMAEForVideoClassification`` (``family``)."""
    torch.manual_seed(0)
    if family == "vivit":
        hf = VivitForVideoClassification(VivitConfig(**SHAPE, tubelet_size=[2, 4, 4])).eval()
    else:
        hf = VideoMAEForVideoClassification(VideoMAEConfig(**SHAPE, tubelet_size=2, patch_size=4)).eval()
    randomise(hf)
    return hf


def _compare(hf, net, dtype, what: str) -> None:
    hf, net = hf.to(dtype), net.to(dtype)
    videos = torch.randn(3, 4, 3, 16, 16, dtype=dtype)  # (B, T, C, H, W), frames first as both read them
    with torch.no_grad():
        expected, got = hf(pixel_values=videos).logits, net(videos)
    assert got.shape == (3, 5)
    assert_matches(got, expected, what=what)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hf_vivit_logits_match(dtype):
    """float64 too: under SDPA (ViViT's eager attention takes its softmax in float32) the reference
    computes in float64 throughout. The fp32 case keeps ViViT's default gelu_fast (3e-12 from the
    Block's gelu_tanh, see zoo.convert.vivit); the float64 case, where 3e-12 would show, uses
    gelu_pytorch_tanh, which is the Block's gelu_tanh exactly."""
    torch.manual_seed(0)
    act = "gelu_fast" if dtype == torch.float32 else "gelu_pytorch_tanh"
    hf = VivitForVideoClassification(VivitConfig(**SHAPE, tubelet_size=[2, 4, 4], hidden_act=act)).eval()
    randomise(hf)
    net = vivit.from_transformers(hf)
    assert net.embedder.output_length(None) == 1 + 2 * 4 * 4  # CLS + 2 tubelets in time x 4 x 4 in space
    _compare(hf, net, dtype, f"ViViT logits ({dtype})")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("options", [{}, {"use_mean_pooling": False, "qv_bias": False}])
def test_hf_videomae_logits_match(dtype, options):
    """Default: the mean of the tubelets -> fc_norm -> classifier; else the first vector after a final
    LayerNorm, and no q/v biases. VideoMAE's eager attention keeps the input dtype, so float64 is
    float64 throughout (SDPA as well)."""
    torch.manual_seed(0)
    hf = VideoMAEForVideoClassification(VideoMAEConfig(**SHAPE, tubelet_size=2, patch_size=4, **options)).eval()
    randomise(hf)
    net = videomae.from_transformers(hf)
    assert net.embedder.cls is None and net.stack.blocks[0].attn.k.bias is None
    _compare(hf, net, dtype, f"VideoMAE logits ({dtype}, {options})")


def test_non_square_tubelets_are_refused_by_name():
    hf = VivitForVideoClassification(VivitConfig(**SHAPE, tubelet_size=[2, 4, 8]))
    with pytest.raises(ValueError, match=r"tubelet_size\[1:\]=\[4, 8\]"):
        vivit.from_transformers(hf)


def test_clip_of_another_shape_names_both():
    net = build_net("vivit", ["model.net.n_layers=1", "model.net.block.d_model=32", "model.net.block.n_heads=2"],
                    {"num_classes": 3, "num_frames": 8, "image_size": 32, "channels": 3})
    with pytest.raises(ValueError, match=r"clips of shape \(6, 3, 32, 32\).*expects \(8, 3, 32, 32\)"):
        net(torch.zeros(1, 6, 3, 32, 32))
    with pytest.raises(InstantiationException, match="7 frames are not divisible by the tubelet's 2 frames"):
        build_net("vivit", [], {"num_classes": 3, "num_frames": 7, "image_size": 32, "channels": 3})


@pytest.mark.parametrize("bias", [False, True])
def test_videomae_released_configs_qkv_bias_spelling_is_read_as_qv_bias(bias):
    """The released VideoMAE configs (MCG-NJU's) say ``qkv_bias``, which transformers reads as ``qv_bias``:
    the converter reads it too (a folder's config.json is read as written, not through VideoMAEConfig)."""
    config = VideoMAEConfig(**SHAPE, tubelet_size=2, patch_size=4).to_dict()
    config["qkv_bias"] = config.pop("qv_bias") and bias
    assert VideoMAEConfig(**config).qv_bias is bias  # as transformers reads it
    shape = videomae.videomae_shape(config)
    assert (shape["block.bias_q"], shape["block.bias_v"], shape["block.bias_k"]) == (bias, bias, False)
