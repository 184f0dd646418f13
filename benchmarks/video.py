"""zoo ViViT vs transformers VivitForVideoClassification, or zoo VideoMAE vs
VideoMAEForVideoClassification (``--family``): video classification training step time and
peak memory at the same shape, one family per run.

    python benchmarks/video.py                    # ViViT: 8 frames of 32 px, 2x8x8 tubelets, 6 layers, 192 wide
    python benchmarks/video.py --family videomae  # VideoMAE at the same shape
    python benchmarks/video.py --frames 32 --image 224 --patch 16 --layers 12 --width 768 --heads 12 --batch 1  # ViViT-B

The zoo net is conf/model/<family>.yaml reshaped to the Hugging Face config (the converters'
vivit_shape / videomae_shape), as tests/test_video_convert.py does: both are the same network.
ViViT keeps its default ``gelu_fast`` (the tanh GELU written out in Python ops), which the zoo
computes as the one fused ``gelu_tanh`` op; VideoMAE uses the exact GELU on both sides.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import add_run_args, compare, make_step, peer
from zoo.convert.videomae import videomae_shape
from zoo.convert.vivit import video_net, vivit_shape

transformers = peer("transformers")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", choices=["vivit", "videomae"], default="vivit")
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--image", type=int, default=32)
    p.add_argument("--tubelet", type=int, default=2, help="frames per tubelet")
    p.add_argument("--patch", type=int, default=8, help="pixels per tubelet side")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=192)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)
    shared = dict(image_size=a.image, num_frames=a.frames, hidden_size=a.width, num_hidden_layers=a.layers,
                  num_attention_heads=a.heads, intermediate_size=4 * a.width, num_labels=a.classes,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
    if a.family == "vivit":
        cfg = transformers.VivitConfig(**shared, tubelet_size=[a.tubelet, a.patch, a.patch])
        reference, shape, zoo_name = transformers.VivitForVideoClassification, vivit_shape, "zoo ViViT"
    else:
        cfg = transformers.VideoMAEConfig(**shared, tubelet_size=a.tubelet, patch_size=a.patch)
        reference, shape, zoo_name = transformers.VideoMAEForVideoClassification, videomae_shape, "zoo VideoMAE"
    x = torch.randn(a.batch, a.frames, 3, a.image, a.image, device=a.device)  # (B, T, C, H, W): both read frames first
    y = torch.randint(0, a.classes, (a.batch,), device=a.device)

    def classifier_step(model, logits):
        model = model.to(a.device).train()
        return make_step(model, lambda: F.cross_entropy(logits(model), y), a.dtype, compile=a.compile)

    def zoo():
        return classifier_step(video_net(a.family, shape(cfg.to_dict())), lambda m: m(x))

    def hf():
        return classifier_step(reference(cfg), lambda m: m(pixel_values=x).logits)

    tubelets = (a.frames // a.tubelet) * (a.image // a.patch) ** 2
    described = (f"{a.layers} layers, {a.width} wide, {a.heads} heads, {a.frames} frames of {a.image} px in "
                 f"{a.tubelet}x{a.patch}x{a.patch} tubelets ({tubelets}), batch {a.batch}")
    compare(a.family, described, zoo_name, zoo, {reference.__name__: hf}, a)


if __name__ == "__main__":
    main()
