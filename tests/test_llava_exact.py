"""LLaVA converted from Hugging Face (CLIP vision + Llama text) gives the same logits."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from zoo.convert.llava import from_transformers  # noqa: E402
from zoo.nn.multimodal import expand_image_placeholder  # noqa: E402

IMAGE_TOKEN = 63


def tiny_llava(feature_layer: int = -2, strategy: str = "default"):
    torch.manual_seed(0)
    vision = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, image_size=32,
        patch_size=8, hidden_act="quick_gelu")
    text = transformers.LlamaConfig(
        vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)
    cfg = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN,
                                   vision_feature_layer=feature_layer, vision_feature_select_strategy=strategy)
    model = transformers.LlavaForConditionalGeneration(cfg).eval()
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())  # untied, as in LLaVA
    assert_untied(model)
    return randomise(model)


@pytest.mark.parametrize("feature_layer,strategy", [(-2, "default"), (-1, "full")])
def test_llava_logits_match_transformers(feature_layer, strategy):
    hf = tiny_llava(feature_layer, strategy)
    net = from_transformers(hf).eval()
    n_image = net.embedder.n_image_tokens
    assert n_image == (16 if strategy == "default" else 17)
    prompts = [[1, 5, IMAGE_TOKEN, 7, 9, 11, 2], [3, IMAGE_TOKEN, 4, 4, 8, 10, 12]]
    tokens = torch.tensor([expand_image_placeholder(p, IMAGE_TOKEN, n_image)[0] for p in prompts])
    images = torch.randn(2, 3, 32, 32)
    real = torch.ones_like(tokens, dtype=torch.bool)
    real[0, -3:] = False  # row 0 right-padded, row 1 left-padded (its first text token a pad)
    real[1, 0] = False
    tokens = tokens.masked_fill(~real, 0)
    with torch.no_grad():
        ref = hf(input_ids=tokens, pixel_values=images, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real, images=images)
    # fp32 only: the Llama norms and rotary tables cast to float32 (a tiny LLaVA in float64 is
    # ~5e-8 off), so there is no clean float64 reference
    assert_matches(ours, ref, real[..., None], what="LLaVA logits")
