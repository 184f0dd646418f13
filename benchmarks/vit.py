"""zoo ViT vs timm VisionTransformer, transformers ViTForImageClassification and x-transformers
ViTransformerWrapper(Encoder): training step time and peak memory at the same shape.

    python benchmarks/vit.py                  # CIFAR shape: patch 4 on 32 px, 6 layers, 192 wide, batch 64, fp32, CPU
    python benchmarks/vit.py --image 224 --patch 16 --layers 12 --width 384 --heads 6 --batch 8   # ViT-S/16

All are pre-LN with a GELU MLP 4x wide. x-transformers differs: no class token (it pools the
mean), LayerNorms around its patch projection, no bias on q/k/v/out.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import add_run_args, compare, make_step, peer
from zoo.convert.common import build_net, shape_overrides
from zoo.convert.vit import vit_shape

timm = peer("timm")
transformers = peer("transformers")
x_transformers = peer("x_transformers")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=192)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(
        image_size=a.image, patch_size=a.patch, hidden_size=a.width, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, intermediate_size=4 * a.width, num_labels=a.classes,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    x = torch.randn(a.batch, 3, a.image, a.image, device=a.device)
    y = torch.randint(0, a.classes, (a.batch,), device=a.device)

    def classifier_step(model, logits):
        model = model.to(a.device).train()
        return make_step(model, lambda: F.cross_entropy(logits(model), y), a.dtype, compile=a.compile)

    def zoo():
        dims = {"num_classes": a.classes, "image_size": a.image, "channels": 3}
        return classifier_step(build_net("vit", shape_overrides(vit_shape(cfg.to_dict())), dims), lambda m: m(x))

    def timm_vit():
        net = timm.models.vision_transformer.VisionTransformer(
            img_size=a.image, patch_size=a.patch, embed_dim=a.width, depth=a.layers, num_heads=a.heads,
            num_classes=a.classes)
        return classifier_step(net, lambda m: m(x))

    def hf():
        return classifier_step(transformers.ViTForImageClassification(cfg), lambda m: m(pixel_values=x).logits)

    def xt():
        net = x_transformers.ViTransformerWrapper(
            image_size=a.image, patch_size=a.patch, num_classes=a.classes,
            attn_layers=x_transformers.Encoder(dim=a.width, depth=a.layers, heads=a.heads,
                                               attn_dim_head=a.width // a.heads, ff_mult=4))
        return classifier_step(net, lambda m: m(x))

    shape = f"{a.layers} layers, {a.width} wide, {a.heads} heads, patch {a.patch} on {a.image} px, batch {a.batch}"
    compare("vit", shape, "zoo ViT", zoo, {"timm VisionTransformer": timm_vit, "ViTForImageClassification": hf,
                                           "x-transformers ViT": xt}, a)


if __name__ == "__main__":
    main()
