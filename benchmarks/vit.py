"""zoo ViT vs timm VisionTransformer: training step time and peak memory, same shapes and weights.

    python benchmarks/vit.py                  # CIFAR shape: patch 4 on 32 px, 6 layers, 192 wide, batch 64, fp32, CPU
    python benchmarks/vit.py --image 224 --patch 16 --layers 12 --width 384 --heads 6 --batch 8   # ViT-S/16
"""

from __future__ import annotations

import argparse

import timm
import torch
import torch.nn.functional as F

from common import compare, make_step
from zoo.convert.vit import from_timm


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=192)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.manual_seed(0)
    ref = timm.models.vision_transformer.VisionTransformer(
        img_size=a.image, patch_size=a.patch, embed_dim=a.width, depth=a.layers, num_heads=a.heads,
        num_classes=a.classes).to(a.device).train()
    zoo = from_timm(ref).to(a.device).train()
    x = torch.randn(a.batch, 3, a.image, a.image, device=a.device)
    y = torch.randint(0, a.classes, (a.batch,), device=a.device)
    print(f"ViT {a.layers} layers, {a.width} wide, patch {a.patch} on {a.image} px, batch {a.batch}, fp32, {a.device}, "
          f"torch {torch.__version__}, timm {timm.__version__}, {torch.get_num_threads()} threads")
    compare("zoo ViT", lambda: make_step(zoo, lambda: F.cross_entropy(zoo(x), y)),
            "timm VisionTransformer", lambda: make_step(ref, lambda: F.cross_entropy(ref(x), y)),
            steps=a.steps, device=a.device)


if __name__ == "__main__":
    main()
