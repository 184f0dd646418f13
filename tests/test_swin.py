"""Swin, the staged hierarchy: tiny random Hugging Face ``SwinForImageClassification`` models -> converted
(in memory, or a folder in the released checkpoint's layout with ``model.init_from=DIR``, exported back) ->
the same logits; a grid the window does not divide (the reference pads it) included."""

import pytest
import torch
from transformers import AutoModelForImageClassification, SwinConfig, SwinForImageClassification

from exactness import assert_matches, randomise
from test_export import saved_checkpoint
from test_init_from import VIT_DIMS
from zoo.convert import swin
from zoo.convert.export import export
from zoo.nn.windows import ShiftedWindowMask

# (transformers 5.24's Swin fails on a stage whose grid is smaller than the window: every stage here is not)
SHAPES = {  # 8 x 8 then 4 x 4 grids under windows of 4 (the second stage: one window, unshifted)
    "whole_windows": {"image_size": 32, "patch_size": 4, "window_size": 4},
    # 8 x 8 then 4 x 4 grids under windows of 3: both padded (to 9 x 9 and 6 x 6), both shifted by 1
    "padded": {"image_size": 32, "patch_size": 4, "window_size": 3},
}
SHAPE = {"embed_dim": 16, "depths": [2, 3], "num_heads": [2, 4], "num_labels": 5, "attn_implementation": "sdpa"}
# microsoft/swin-tiny-patch4-window7-224's config.json, its sizes scaled down (embed_dim 96 -> 24, depths
# [2, 2, 6, 2] -> [2, 2], heads [3, 6, 12, 24] -> [3, 6]; 224 px, a 56 x 56 grid, to CIFAR's 32 px, 8 x 8)
RELEASED = {"architectures": ["SwinForImageClassification"], "attention_probs_dropout_prob": 0.0, "depths": [2, 2],
            "drop_path_rate": 0.1, "embed_dim": 24, "encoder_stride": 32, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.0, "image_size": 32, "initializer_range": 0.02, "layer_norm_eps": 1e-05,
            "mlp_ratio": 4.0, "model_type": "swin", "num_channels": 3, "num_heads": [3, 6], "patch_size": 4,
            "path_norm": True, "qkv_bias": True, "use_absolute_embeddings": False, "window_size": 4,
            "id2label": {str(i): str(i) for i in range(10)}, "label2id": {str(i): i for i in range(10)}}


def _model(kind: str) -> SwinForImageClassification:
    torch.manual_seed(0)
    return randomise(SwinForImageClassification(SwinConfig(**SHAPE | SHAPES[kind])).eval())  # tables too


@pytest.mark.parametrize("kind", list(SHAPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@torch.no_grad()
def test_hf_swin_logits_match(kind, dtype):
    """float64 too: under SDPA the reference computes in float64 (its shift mask's -100 against the zoo's
    -inf weighs e^-100 of a key: below the float64 bound)."""
    hf = _model(kind)
    net = swin.from_transformers(hf).eval()
    assert list(net.towers) == ["stage1", "stage2"]
    hf, net = hf.to(dtype), net.to(dtype)
    images = torch.randn(2, 3, 32, 32, dtype=dtype)
    assert_matches(net(images), hf(pixel_values=images).logits, what=f"Swin ({kind}) logits")


def test_the_padded_grid_has_zero_keys_and_the_masks_shift_per_layer():
    net = swin.from_transformers(_model("padded"))
    masks = [net.towers[name].layer_masks for name in ("stage1", "stage2")]
    assert masks[0][:2] == [ShiftedWindowMask((8, 8), 3, 0), ShiftedWindowMask((8, 8), 3, 1)]
    assert [m.zero_keys for m in masks[0]] == [81 - 64] * 2 and masks[1][2] == ShiftedWindowMask((4, 4), 3, 0)
    plain, shifted = (m.dense(64, 64 + 17, torch.device("cpu")) for m in masks[0][:2])
    assert plain[0, :64].nonzero()[:, 0].tolist() == [r * 8 + c for r in range(3) for c in range(3)]
    assert not plain[0, 64:].any() and plain[63, 64:].sum() == 5  # (7, 7)'s window: 4 real, 5 padding cells
    # rolled by -1 on the 9 x 9 padded grid, (0, 0) is alone in its region (the wrapped row and column);
    # (7, 7) shares its window's region with the padding cells (7, 8), (8, 7), (8, 8)
    assert shifted[0].nonzero()[:, 0].tolist() == [0]
    assert shifted[63, :64].nonzero()[:, 0].tolist() == [63] and shifted[63, 64:].sum() == 3


@torch.no_grad()
def test_released_layout_folder_reads_with_init_from_and_exports_back(tmp_path):
    torch.manual_seed(0)
    hf = randomise(SwinForImageClassification(SwinConfig(**RELEASED)).eval())
    hf.save_pretrained(tmp_path / "hf")
    model = saved_checkpoint(tmp_path / "swin.ckpt", "swin", VIT_DIMS, f"model.init_from={tmp_path / 'hf'}")
    assert (model.hparams.net["depths"], model.net.head.proj.in_features) == ([2, 2], 48)  # 24 * 2 wide at the end
    images = torch.randn(2, 3, 32, 32)
    assert_matches(model.net(images), hf(pixel_values=images).logits, what="Swin logits from model.init_from")
    assert export(tmp_path / "swin.ckpt", tmp_path / "out")[0] == "SwinForImageClassification"
    back = AutoModelForImageClassification.from_pretrained(tmp_path / "out").eval()
    assert_matches(back(pixel_values=images).logits, hf(pixel_values=images).logits, what="Swin, HF -> zoo -> HF")


def test_absolute_positions_are_refused_by_name():
    with pytest.raises(ValueError, match="use_absolute_embeddings=True"):
        swin.swin_shape(SwinConfig(**SHAPE, use_absolute_embeddings=True).to_dict())
