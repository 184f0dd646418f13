"""Distilled DeiT: a tiny random Hugging Face ``DeiTForImageClassificationWithTeacher`` -> converted (in
memory, or a folder in the released checkpoint's layout with ``model.init_from=DIR``, exported back) ->
the same logits; and hard-label distillation from a zoo ViT teacher computes DeiT's loss."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForImageClassification, DeiTConfig, DeiTForImageClassification, \
    DeiTForImageClassificationWithTeacher

from exactness import assert_matches, randomise
from test_export import saved_checkpoint
from test_init_from import VIT_DIMS, objective_from
from zoo.convert import deit
from zoo.convert.export import export

SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48,
         "image_size": 16, "patch_size": 4, "num_labels": 5, "attn_implementation": "sdpa"}
# facebook/deit-small-distilled-patch16-224's config.json, its sizes scaled down (and 10 labels, as CIFAR-10)
RELEASED = {"architectures": ["DeiTForImageClassificationWithTeacher"], "attention_probs_dropout_prob": 0.0,
            "encoder_stride": 16, "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": 48,
            "image_size": 32, "initializer_range": 0.02, "intermediate_size": 96, "layer_norm_eps": 1e-12,
            "num_attention_heads": 3, "num_channels": 3, "num_hidden_layers": 2, "patch_size": 8,
            "qkv_bias": True, "id2label": {str(i): str(i) for i in range(10)},
            "label2id": {str(i): i for i in range(10)}}


def _model(config: dict = SHAPE, cls=DeiTForImageClassificationWithTeacher):
    torch.manual_seed(0)
    return randomise(cls(DeiTConfig(**config)).eval())  # HF zero-initialises both tokens; norms at ones


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hf_deit_logits_match(dtype):
    """float64 too: under SDPA the reference computes in float64 throughout."""
    hf = _model()
    net = deit.from_transformers(hf).eval()
    assert net.embedder.output_length(torch.zeros(1, 3, 16, 16)) == 2 + 16  # CLS, distillation token, patches
    hf, net = hf.to(dtype), net.to(dtype)
    images = torch.randn(3, 3, 16, 16, dtype=dtype)
    with torch.no_grad():
        ref, got = hf(pixel_values=images), net(images)
        cls, dist = net.head.pair(net.hidden(images))
    assert_matches(got, ref.logits, what="DeiT logits (both heads averaged)")
    assert_matches(cls, ref.cls_logits, what="DeiT class head")
    assert_matches(dist, ref.distillation_logits, what="DeiT distillation head")


@torch.no_grad()
def test_released_layout_folder_reads_and_exports_back(tmp_path):
    hf = _model(RELEASED)
    hf.save_pretrained(tmp_path / "hf")
    model = saved_checkpoint(tmp_path / "deit.ckpt", "deit", VIT_DIMS, f"model.init_from={tmp_path / 'hf'}")
    net = model.hparams.net
    assert (net["n_layers"], net["block"]["d_model"], net["embedder"]["patch_size"]) == (2, 48, 8)
    images = torch.randn(2, 3, 32, 32)
    ref = hf(pixel_values=images).logits
    assert_matches(model.net(images), ref, what="DeiT logits from model.init_from")
    assert export(tmp_path / "deit.ckpt", tmp_path / "out") == ("DeiTForImageClassificationWithTeacher", [])
    back = AutoModelForImageClassification.from_pretrained(tmp_path / "out").eval()
    assert type(back).__name__ == "DeiTForImageClassificationWithTeacher"
    assert_matches(back(pixel_values=images).logits, ref, what="DeiT logits, HF -> zoo -> HF")


def test_other_classes_start_both_classifiers_fresh_and_a_plain_deit_is_refused(tmp_path):
    hf = _model(RELEASED)
    hf.save_pretrained(tmp_path / "hf")
    with pytest.warns(UserWarning, match="classifies 10 labels, the data 4"):
        model = objective_from("deit", tmp_path / "hf", VIT_DIMS | {"num_classes": 4, "class_names": list("abcd")})
    assert model.net.head.proj.out_features == model.net.head.dist.out_features == 4
    assert torch.equal(model.net.embedder.distillation, hf.deit.embeddings.distillation_token)
    _model(RELEASED | {"architectures": ["DeiTForImageClassification"]}, DeiTForImageClassification).save_pretrained(
        tmp_path / "plain")
    with pytest.raises(ValueError, match="no distillation head"):
        objective_from("deit", tmp_path / "plain", VIT_DIMS)


def _student(tmp_path, teacher):
    cfg = ["model.net.n_layers=1", "model.net.block.d_model=32", "model.net.block.n_heads=2"]
    return saved_checkpoint(tmp_path / "student.ckpt", "deit", VIT_DIMS, *cfg,
                            *([f"model.teacher={teacher}"] if teacher else [])).train()


def test_hard_label_distillation_is_the_mean_of_the_two_cross_entropies(tmp_path):
    teacher = saved_checkpoint(tmp_path / "vit.ckpt", "vit", VIT_DIMS, "model.net.n_layers=1")
    student = _student(tmp_path, tmp_path / "vit.ckpt")
    student.on_fit_start()
    assert not any(k.startswith("_teacher") for k in student.state_dict())  # never stored with the student
    images, labels = torch.randn(4, 3, 32, 32), torch.tensor([0, 3, 3, 9])
    loss = student.training_step((images, labels), 0)
    with torch.no_grad():
        taught = teacher.net(images).argmax(-1)
        cls, dist = student.net.head.pair(student.net.hidden(images))
    assert_matches(loss.detach(), (F.cross_entropy(cls, labels) + F.cross_entropy(dist, taught)) / 2,
                   what="distillation loss")
    assert not torch.equal(taught, labels)  # the teacher's targets are its own, not the labels
    alone = _student(tmp_path, None)  # no teacher: the distillation head learns the labels
    alone.on_fit_start()
    loss = alone.training_step((images, labels), 0)
    with torch.no_grad():
        cls, dist = alone.net.head.pair(alone.net.hidden(images))
    assert_matches(loss.detach(), (F.cross_entropy(cls, labels) + F.cross_entropy(dist, labels)) / 2)


def test_a_teacher_of_other_data_is_refused_naming_the_setting(tmp_path):
    saved_checkpoint(tmp_path / "vit.ckpt", "vit", VIT_DIMS | {"num_classes": 7, "class_names": list("abcdefg")},
                     "model.net.n_layers=1")
    with pytest.raises(ValueError, match="has num_classes=7, the student 10"):
        _student(tmp_path, tmp_path / "vit.ckpt").on_fit_start()
