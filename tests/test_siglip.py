"""SigLIP: the zoo's two towers against a randomised ``SiglipModel`` (vectors, logits, the sigmoid loss;
the text read at its last, padded, position; the attention-pooling head), a ``save_pretrained`` folder
of the released config scaled down, and the export round trip."""

from __future__ import annotations

import torch
from transformers import SiglipConfig, SiglipModel

import zoo.convert.siglip as siglip
from two_tower_family import check_exact, check_folder, check_round_trip
from zoo.objectives.contrastive import sigmoid_loss

PAD = 1
DIMS = {"eos_id": None, "class_names": [], "class_prompts": []}


def tiny() -> SiglipModel:
    """A tiny SiglipModel: text 2 layers 32 wide, vision 2 layers 48 wide (patch 8 on 32 px), the text
    projected to the vision width (SigLIP's image vector is the attention pool's, unprojected)."""
    torch.manual_seed(0)
    return SiglipModel(SiglipConfig(
        text_config=dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=40, pad_token_id=PAD, bos_token_id=0,
                         eos_token_id=2, projection_size=48),
        vision_config=dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8)))


def released_scaled_down() -> SiglipConfig:
    """google/siglip-base-patch16-224's config.json (both towers alike, 64 tokens, 224 px images in 16 px
    patches, its 32,000-token vocabulary, tanh GELU, eps 1e-6) with widths and depths scaled down; the
    projection is the text width, as released."""
    tower = dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
    return SiglipConfig(text_config=dict(vocab_size=32000, max_position_embeddings=64, **tower),
                        vision_config=dict(image_size=224, patch_size=16, **tower))


def test_siglip_matches_the_reference_in_float64_at_the_last_padded_position():
    net = check_exact(tiny(), siglip, sigmoid_loss, eos=None, pad=PAD)
    assert net.text_pool == "last" and net.logit_bias is not None


def test_a_save_pretrained_folder_of_the_released_layout_is_read(tmp_path):
    torch.manual_seed(0)
    check_folder(tmp_path, SiglipModel(released_scaled_down()), "siglip", DIMS | {"vocab_size": 32000}, eos=None, pad=1)


def test_export_round_trip():
    check_round_trip(tiny(), siglip, "siglip", siglip.siglip_shape, DIMS | {"vocab_size": 99})
