"""Exactness: a tiny random Hugging Face YOLOS detector -> converted (in memory, or from a
``save_pretrained`` folder with ``model.init_from=DIR``, and exported back by its converter) -> the
same logits and boxes, and DETR's set loss (ours) equal to the model's own loss for the same labels."""

import pytest
import torch
from transformers import AutoModelForObjectDetection, YolosConfig, YolosForObjectDetection

from exactness import assert_matches, randomise
from test_export import saved_checkpoint
from test_init_from import objective_from
from zoo.convert import yolos
from zoo.convert.export import export
from zoo.objectives.set_loss import SetLoss

# 16 px images in 4 px patches, as the config's own image_size: no position interpolation happens
SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48,
         "image_size": [16, 16], "patch_size": 4, "num_detection_tokens": 6, "num_labels": 3,
         "use_mid_position_embeddings": False, "attn_implementation": "sdpa"}


def _model(**options) -> YolosForObjectDetection:
    """A tiny YOLOS drawn away from its init (Hugging Face zero-initialises the CLS, detection tokens
    and positions; its norms start at ones/zeros); its logits are large enough for the set loss's
    matching to be far from ties."""
    torch.manual_seed(0)
    return randomise(YolosForObjectDetection(YolosConfig(**SHAPE | options)).eval())


def _targets(counts: list[int]) -> list[dict[str, torch.Tensor]]:
    """One target per image with that many objects: classes and boxes (cx, cy, w, h) inside the image."""
    g = torch.Generator().manual_seed(1)
    out = []
    for n in counts:
        wh = torch.rand(n, 2, generator=g) * 0.3 + 0.05
        centre = wh / 2 + torch.rand(n, 2, generator=g) * (1 - wh)
        out.append({"class_labels": torch.randint(0, 3, (n,), generator=g), "boxes": torch.cat([centre, wh], 1)})
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hf_yolos_logits_and_boxes_match(dtype):
    """float64 too: under SDPA the reference's forward computes in float64 throughout."""
    hf = _model()
    net = yolos.from_transformers(hf)
    assert net.embedder.output_length(None) == 1 + 16 + 6  # CLS + 4 x 4 patches + detection tokens
    hf, net = hf.to(dtype), net.to(dtype)
    images = torch.randn(3, 3, 16, 16, dtype=dtype)
    with torch.no_grad():
        expected, got = hf(pixel_values=images), net(images)
    assert got.logits.shape == (3, 6, 4) and got.boxes.shape == (3, 6, 4)  # 3 classes + no object
    assert_matches(got.logits, expected.logits, what=f"YOLOS logits ({dtype})")
    assert_matches(got.boxes, expected.pred_boxes, what=f"YOLOS boxes ({dtype})")


def test_set_loss_matches_hf_loss():
    """fp32 only: Hugging Face's loss keeps its no-object weight in float32, so it refuses float64
    logits. Images with 3, 0 (only the no-object term) and 6 (= every detection token) objects."""
    hf = _model()
    net = yolos.from_transformers(hf)
    images, targets = torch.randn(3, 3, 16, 16), _targets([3, 0, 6])
    with torch.no_grad():
        expected, got = hf(pixel_values=images, labels=targets), net(images)
    c = hf.config
    ours = SetLoss(3, c.class_cost, c.bbox_cost, c.giou_cost, c.bbox_loss_coefficient, c.giou_loss_coefficient,
                   c.eos_coefficient)(got.logits, got.boxes, targets)
    assert_matches(ours["loss"], expected.loss, what="set loss")
    for part in ("loss_ce", "loss_bbox", "loss_giou"):
        assert_matches(ours[part], expected.loss_dict[part], what=part)


def test_image_without_objects_is_only_the_no_object_term():
    logits, boxes = torch.randn(1, 4, 3), torch.rand(1, 4, 4)
    loss = SetLoss(2, eos_coefficient=0.1)(logits, boxes, _targets([0]))
    assert loss["loss_bbox"] == 0 and loss["loss_giou"] == 0
    # every token's target is "no object" (class 2); one weight for all, so the plain mean
    assert_matches(loss["loss"], torch.nn.functional.cross_entropy(logits[0], torch.full((4,), 2)))


def test_more_objects_than_detection_tokens_names_both_numbers():
    with pytest.raises(ValueError, match=r"holds 5 objects, more than the model's 4 detection tokens"):
        SetLoss(3)(torch.randn(1, 4, 4), torch.rand(1, 4, 4), _targets([5]))


def test_hf_checkpoint_directory_loads(tmp_path):
    hf = _model()
    hf.save_pretrained(tmp_path / "hf")
    net = yolos.load_checkpoint_dir(tmp_path / "hf")
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert_matches(net(images).boxes, hf(pixel_values=images).pred_boxes, what="boxes from a directory")


def test_mid_position_embeddings_are_refused_by_name():
    with pytest.raises(ValueError, match="use_mid_position_embeddings=True"):
        yolos.from_transformers(_model(use_mid_position_embeddings=True))


# what the detection data gives the model (zoo/data/shapes_detection.py's dims), for the folder's 16 px images
DIMS = {"num_classes": 3, "image_size": 16, "channels": 3, "class_names": ["a", "b", "c"], "max_objects": 6,
        "pixel_mean": [0.5] * 3, "pixel_std": [0.5] * 3}


@torch.no_grad()
def test_yolos_folder_gives_the_hf_logits_and_boxes_and_exports_back_by_its_converter(tmp_path):
    hf = _model()
    hf.save_pretrained(tmp_path / "hf")
    model = saved_checkpoint(tmp_path / "yolos.ckpt", "yolos", DIMS, f"model.init_from={tmp_path / 'hf'}")
    net = model.hparams.net
    assert (net["n_layers"], net["embedder"]["patch_size"], net["embedder"]["n_detections"]) == (2, 4, 6)
    assert net["block"]["norm_eps"] == 1e-12  # from config.json, not the preset's
    images = torch.randn(2, 3, 16, 16)
    ref, got = hf(pixel_values=images), model.net(images)
    assert_matches(got.logits, ref.logits, what="YOLOS logits from model.init_from")
    assert_matches(got.boxes, ref.pred_boxes, what="YOLOS boxes from model.init_from")
    assert export(tmp_path / "yolos.ckpt", tmp_path / "out") == ("YolosForObjectDetection", [])  # no hf_class=
    back = AutoModelForObjectDetection.from_pretrained(tmp_path / "out").eval()(pixel_values=images)
    assert_matches(back.logits, ref.logits, what="YOLOS logits, HF -> zoo -> HF")
    assert_matches(back.pred_boxes, ref.pred_boxes, what="YOLOS boxes, HF -> zoo -> HF")


def test_yolos_folder_with_other_classes_starts_only_the_class_mlp_fresh(tmp_path):
    hf = _model()
    hf.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="classifies 3 labels, the data 5"):
        model = objective_from("yolos", tmp_path, DIMS | {"num_classes": 5, "class_names": list("abcde")})
    head = model.net.head
    assert head.classes.layers[-1].out_features == 6  # 5 classes + no object
    assert not torch.equal(head.classes.layers[0].weight, hf.class_labels_classifier.layers[0].weight)
    assert torch.equal(head.boxes.layers[0].weight, hf.bbox_predictor.layers[0].weight)
    assert torch.equal(model.net.embedder.detections, hf.vit.embeddings.detection_tokens)


def test_yolos_folder_for_other_images_or_mid_positions_is_refused_by_name(tmp_path):
    _model().save_pretrained(tmp_path / "hf")
    with pytest.raises(ValueError, match="image_size=32 but .*says 16"):
        objective_from("yolos", tmp_path / "hf", DIMS | {"image_size": 32})
    _model(use_mid_position_embeddings=True).save_pretrained(tmp_path / "mid")
    with pytest.raises(ValueError, match="use_mid_position_embeddings=True"):
        objective_from("yolos", tmp_path / "mid", DIMS)
