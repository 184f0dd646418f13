"""SigLIP: the zoo's two towers against a randomised ``SiglipModel`` (vectors, logits, the sigmoid loss;
the text read at its last, padded, position; the attention-pooling head), a ``save_pretrained`` folder
of the released config scaled down, the export round trip, and the objective reading every caption at
full length."""

from __future__ import annotations

import pytest
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


@torch.no_grad()
def test_every_caption_is_read_at_full_length_whatever_shares_its_batch(tmp_path):
    """SigLIP reads its text at the last position: the objective pads every caption to the context
    (64, as SigLIP and the zero-shot pipeline pad it), so a caption's logit in training and a label's
    score in ``zoo classify`` do not hang on the longest caption or label beside it."""
    from test_export_clients import TWO_TOWER, _png, checkpoint
    from zoo.data.batches import ImageCaptions
    from zoo.data.images import load_image
    from zoo.data.tokenizers import WordTokenizer
    from zoo.inference.classifying import ZeroShot

    tok = WordTokenizer.from_texts(["a photo of a cat", "a photo of a dog horse"])
    checkpoint(tmp_path / "m.ckpt", "siglip", {"vocab_size": tok.vocab_size, "eos_id": tok.eos_id, "class_names": [],
                                               "class_prompts": []}, *TWO_TOWER, tokenizer=tok)
    zero_shot = ZeroShot(tmp_path / "m.ckpt")
    image = load_image(_png(tmp_path / "x.png", 32))
    alone, beside = dict(zero_shot(image, ["cat"])), dict(zero_shot(image, ["cat", "dog horse"]))
    assert beside["cat"] == pytest.approx(alone["cat"], abs=1e-6)
    objective = zero_shot.objective
    images = torch.randn(2, 3, 32, 32)
    short, long = ([*tok.encode(text), tok.eos_id] for text in ("a photo of a cat", "a photo of a dog horse"))

    def logits(second: list[int]) -> torch.Tensor:
        width = max(len(short), len(second))
        rows = [ids + [tok.pad_id] * (width - len(ids)) for ids in (short, second)]
        padding = torch.tensor([[j < len(ids) for j in range(width)] for ids in (short, second)])
        return objective.logits(ImageCaptions(images, torch.tensor(rows), padding, torch.tensor([-1, -1])))

    torch.testing.assert_close(logits(long)[:, 0], logits(short)[:, 0], atol=1e-5, rtol=0)
