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


# --- training, the zero-shot test pass, zoo classify -------------------------------------------

TINY = ["model.net.n_layers=1", "model.net.block.d_model=32", "model.net.vision.n_layers=1",
        "model.net.vision.block.d_model=32"]


def test_clip_trains_on_cifar10_captions_tests_zero_shot_and_classifies(tmp_path):
    from PIL import Image

    from test_bad_input_data import cifar10_folder
    from test_llava import run_config
    from zoo.cli.commands import call
    from zoo.data.images import to_tensor
    from zoo.inference.classifying import ZeroShot
    from zoo.train.run import train

    data = cifar10_folder(tmp_path / "data")
    cfg = run_config(tmp_path, ["model=clip", "data=cifar10_captions", f"paths.data_dir={data}",
                                "trainer.max_steps=3", *TINY])
    metrics = train(cfg)
    assert {"test/loss", "test/retrieval_acc", "test/zero_shot_acc"} <= set(metrics)
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    zero_shot = ZeroShot(ckpt)
    objective = zero_shot.objective
    assert objective.hparams.class_names == ["airplane", "cat", "dog"]
    # the test pass's zero-shot accuracy, recomputed image by image from the checkpoint
    test_dir = data / "cifar10" / "test"
    images = [(path, k) for k, name in enumerate(objective.hparams.class_names)
              for path in sorted((test_dir / name).glob("*.jpg"))]
    with torch.no_grad():
        pixels = torch.stack([to_tensor(Image.open(p).convert("RGB"), 32) for p, _ in images])
        logits = objective.net.similarity(objective.net.encode_image(pixels),
                                          objective.class_vectors(objective.hparams.class_prompts))
    right = (logits.argmax(-1) == torch.tensor([k for _, k in images])).float().mean().item()
    assert metrics["test/zero_shot_acc"] == pytest.approx(right, abs=1e-6)
    # zoo classify: "a photo of a {label}" for each label, the softmax over them
    image = images[0][0]
    scored = call("classify", [f"ckpt={ckpt}", f"image={image}", "labels=[cat, dog]"])
    assert sorted(label for label, _ in scored) == ["cat", "dog"] and sum(s for _, s in scored) == pytest.approx(1.0)
    with torch.no_grad():
        expected = objective.net.similarity(objective.net.encode_image(pixels[:1]), objective.class_vectors(
            ["a photo of a cat", "a photo of a dog"]))[0].softmax(-1)
    assert dict(scored) == pytest.approx({"cat": expected[0].item(), "dog": expected[1].item()}, abs=1e-6)
    with pytest.raises(ValueError, match=r"words not in the vocabulary .*\['zebra'\]"):
        call("classify", [f"ckpt={ckpt}", f"image={image}", "labels=[cat, zebra]"])
