"""``model.init_from=timm:<name>[@file]`` (ViT) through timm's own pretrained loading, offline: the
weights file the test writes goes to ``timm.create_model(name, pretrained=True,
pretrained_cfg_overlay={"file": ...})``, and a timm-format folder (``save_for_hf``) is read the same
way. The shape (heads, eps, pooling) comes from the timm model, never from numbers passed by hand,
and what the zoo ViT cannot express is refused naming it."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from exactness import assert_matches, randomise
from test_init_from import VIT_DIMS, objective_from
from zoo.cli.commands import call
from zoo.convert.vit import from_timm

timm = pytest.importorskip("timm")

NAME = "test_vit"  # timm's own test ViT: 371k parameters, 2 heads (the zoo ViT config has 3), 160 px


def random_weights(name: str, file, **kwargs) -> torch.nn.Module:
    """A timm model of ``name`` drawn away from its init (head and CLS too: timm zero-initialises
    them; norms too), its state dict written to ``file``."""
    torch.manual_seed(0)
    model = randomise(timm.create_model(name, pretrained=False, **kwargs).eval())
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(file))
    return model


@torch.no_grad()
def test_a_named_timm_model_from_a_weights_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    ref = random_weights(NAME, tmp_path / "w.safetensors")
    loaded = timm.create_model(NAME, pretrained=True, pretrained_cfg_overlay={"file": str(tmp_path / "w.safetensors"),
                                                                               "custom_load": False}).eval()
    images = torch.randn(2, 3, 160, 160, generator=torch.Generator().manual_seed(1))
    assert torch.equal(loaded(images), ref(images))  # timm's own loading reads the file the test wrote
    model = objective_from("vit", f"timm:{NAME}@{tmp_path / 'w.safetensors'}",
                           VIT_DIMS | {"image_size": 160, "num_classes": ref.num_classes})
    net = model.net.eval()
    assert net.blocks[0].attn.n_heads == 2 and model.hparams.net["block"]["norm_eps"] == 1e-6
    assert_matches(net(images), ref(images), what="timm ViT logits")


@torch.no_grad()
def test_a_timm_folder_gives_heads_eps_and_pooling_from_the_model(tmp_path):
    from timm.models import save_for_hf

    # not the config's defaults: 4 heads (the zoo ViT has 3), mean pooling + fc_norm
    args = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 4, "global_pool": "avg",
            "num_classes": 10}
    ref = random_weights(NAME, tmp_path / "unused.safetensors", **args)
    save_for_hf(ref, tmp_path / "folder", model_args={k: v for k, v in args.items() if k != "num_classes"})
    config = json.loads((tmp_path / "folder" / "config.json").read_text())
    config["pretrained_cfg"] |= {"source": "hf-hub", "hf_hub_id": "someone/else", "url": "http://x"}  # ignored:
    (tmp_path / "folder" / "config.json").write_text(json.dumps(config))  # the folder's own weights are read
    model = objective_from("vit", tmp_path / "folder", VIT_DIMS)
    net, shape = model.net.eval(), model.hparams.net
    assert (net.blocks[0].attn.n_heads, shape["head"]["pool"], shape["head"]["norm_eps"]) == (4, "mean", 1e-6)
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    assert_matches(net(images), ref(images), what="timm folder logits")


@torch.no_grad()
def test_the_norm_eps_is_the_models_own():
    """A CLIP-style ViT (LayerNorm eps 1e-5): the default 1e-6 would be off by ~6e-3 (issue 17)."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    ref = VisionTransformer(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5,
                            norm_layer=partial(torch.nn.LayerNorm, eps=1e-5)).eval()
    net = from_timm(ref).eval()
    assert net.blocks[0].attn_norm.eps == 1e-5 and net.stack.norm.eps == 1e-5
    images = torch.randn(2, 3, 16, 16)
    assert_matches(net(images), ref(images), what="eps-1e-5 ViT logits")


def test_a_distilled_deit_is_refused_for_its_distillation_token(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    random_weights("deit_tiny_distilled_patch16_224", tmp_path / "deit.safetensors")  # 5.9M parameters
    with pytest.raises(ValueError, match="has a distillation token"):
        objective_from("vit", f"timm:deit_tiny_distilled_patch16_224@{tmp_path / 'deit.safetensors'}",
                       VIT_DIMS | {"image_size": 224, "num_classes": 1000})
    assert not (tmp_path / "cache" / "timm").exists()  # refused before anything was written


def test_bad_timm_sources_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="timm:not_a_vit: timm has no model of that name"):
        objective_from("vit", "timm:not_a_vit", VIT_DIMS)
    with pytest.raises(FileNotFoundError, match=r"the weights file .*absent.safetensors does not exist"):
        objective_from("vit", f"timm:{NAME}@{tmp_path / 'absent.safetensors'}", VIT_DIMS)
    with pytest.raises(ValueError, match="expected timm:<model name>"):
        objective_from("vit", "timm:../x", VIT_DIMS)
    random_weights("test_vit2", tmp_path / "reg.safetensors")  # a register token
    with pytest.raises(ValueError, match="reg_tokens"):
        objective_from("vit", f"timm:test_vit2@{tmp_path / 'reg.safetensors'}", VIT_DIMS)


@torch.no_grad()
def test_zoo_embed_reads_a_timm_source(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    ref = random_weights(NAME, tmp_path / "w.safetensors")
    pixels = np.random.default_rng(0).integers(0, 256, (2, 160, 160, 3), dtype=np.uint8)
    files = [tmp_path / f"{i}.png" for i in range(2)]
    for file, image in zip(files, pixels):
        Image.fromarray(image).save(file)
    out = tmp_path / "emb.json"
    call("embed", [f"init_from=timm:{NAME}@{tmp_path / 'w.safetensors'}", "image=[" + ",".join(map(str, files)) + "]",
                   f"out={out}"])
    x = (torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.5  # test_vit's mean and std
    assert_matches(torch.tensor(json.loads(out.read_text())["embeddings"]), ref.forward_features(x)[:, 0],
                   what="CLS embeddings of the timm model")
