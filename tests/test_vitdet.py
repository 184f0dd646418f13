"""model=vitdet against a tiny random ``VitDetModel`` (windowed layers with a global one every
third, a window shorter than the grid): the same patch vectors in fp32 and float64, also read
from a ``save_pretrained`` folder (``model.init_from=DIR``, under a fresh classifier head); the
window really cuts; the mask's cells, and its bad input."""

from __future__ import annotations

import pytest
import torch
from transformers import VitDetConfig, VitDetModel

from exactness import assert_matches, randomise
from test_export import saved_checkpoint
from test_init_from import VIT_DIMS, objective_from
from zoo.convert.export import export, read_zoo
from zoo.convert.vitdet import from_transformers, vitdet_shape
from zoo.nn.masks import GridWindowMask, NoMask

CPU = torch.device("cpu")


def reference(dtype=torch.float32, **changes) -> VitDetModel:
    torch.manual_seed(0)
    settings = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, mlp_ratio=2, image_size=32,
                    pretrain_image_size=32, patch_size=4, window_size=4, window_block_indices=[0, 1], drop_path_rate=0.0)
    config = VitDetConfig(**settings | changes)
    return randomise(VitDetModel(config)).to(dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_patch_vectors_match_vitdet(dtype):
    """On a randomised reference. (A window that does not divide the grid, which ViTDet zero-pads,
    is refused by the converter: the zoo's GridWindowMask has no partial windows.)"""
    hf = reference(dtype)
    zoo = from_transformers(hf).to(dtype)
    images = torch.randn(2, 3, 32, 32, dtype=dtype)
    with torch.no_grad():
        want = hf(images).last_hidden_state.flatten(2).transpose(1, 2)  # (B, D, H, W) -> (B, HW, D)
        got = zoo(images)
    assert_matches(got, want, what="ViTDet patch vectors")


def test_vitdet_folder_gives_the_hf_patch_vectors_under_a_fresh_classifier(tmp_path):
    hf = reference(window_size=2, window_block_indices=[1])  # a pattern and window other than the preset's
    hf.save_pretrained(tmp_path / "hf")
    with pytest.warns(UserWarning, match="ViTDet backbone .*classifier head starts from scratch"):
        model = saved_checkpoint(tmp_path / "vitdet.ckpt", "vitdet", VIT_DIMS, f"model.init_from={tmp_path / 'hf'}")
    net = model.hparams.net
    assert model.net.stack.layer_masks == [NoMask(), GridWindowMask(2), NoMask()]
    assert (net["block"]["d_ff"], net["block"]["norm_eps"]) == (64, 1e-6)  # mlp_ratio 2; VitDetConfig's eps
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        want = hf(images).last_hidden_state.flatten(2).transpose(1, 2)  # (B, D, H, W) -> (B, HW, D)
        assert_matches(model.net.features(images), want, what="ViTDet patch vectors from model.init_from")
        logits = model.net(images)
        assert logits.shape == (2, 10)
        # VitDetModel is the backbone: no transformers class holds the classifier, so export writes the zoo's format
        assert export(tmp_path / "vitdet.ckpt", tmp_path / "out") == (None, [])
        assert torch.equal(read_zoo(tmp_path / "out")(images), logits)


def test_vitdet_folder_for_other_images_is_refused_by_name(tmp_path):
    reference().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="image_size=64 but .*says 32"):
        objective_from("vitdet", tmp_path, VIT_DIMS | {"image_size": 64})


def test_the_window_really_cuts():
    hf, zoo = reference(), from_transformers(reference(window_block_indices=[]))  # same weights, all global
    images = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert (zoo(images) - hf(images).last_hidden_state.flatten(2).transpose(1, 2)).abs().max() > 1e-3


def test_cells_are_the_tiles_of_the_grid():
    mask, _ = GridWindowMask(2)(36, 36, CPU)  # a 6 x 6 grid in 2 x 2 tiles
    for i in range(36):
        for j in range(36):
            assert mask[i, j] == (i // 6 // 2 == j // 6 // 2 and i % 6 // 2 == j % 6 // 2), (i, j)
    assert mask.sum(1).eq(4).all()


def test_bad_input_is_refused_naming_the_sizes():
    with pytest.raises(ValueError, match="window=0"):
        GridWindowMask(0)
    with pytest.raises(ValueError, match="65 keys .* cls_token must be false"):
        GridWindowMask(4)(65, 65, CPU)
    with pytest.raises(ValueError, match="window=3 does not divide the 8x8 patch grid"):
        GridWindowMask(3)(64, 64, CPU)
    with pytest.raises(ValueError, match="window_size=3 does not divide the 8x8 patch grid"):
        vitdet_shape(reference(window_size=3).config.to_dict())
    with pytest.raises(ValueError, match="use_relative_position_embeddings"):
        vitdet_shape(reference(use_relative_position_embeddings=True).config.to_dict())
