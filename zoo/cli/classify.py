"""``zoo classify``: zero-shot classification of one image with a two-tower checkpoint (CLIP, SigLIP):
each label's caption ("a photo of a {label}") against the image.

    python -m zoo classify ckpt=outputs/clip_cifar10_captions_cpu/<run>/checkpoints/last.ckpt \\
        image=cat.png labels="[cat, dog]"

Prints a JSON list, best first, of ``{"label": ..., "score": ...}``: the softmax over the labels (CLIP)
or each label's sigmoid (SigLIP).
"""

from __future__ import annotations

import json

from omegaconf import DictConfig

from zoo.data.images import load_image
from zoo.inference.classifying import ZeroShot
from zoo.inference.device import check_device


def main(cfg: DictConfig) -> list[tuple[str, float]]:
    """Print the labels' scores for ``image`` (conf/classify.yaml); return them."""
    labels = [str(label) for label in cfg.labels] if not isinstance(cfg.labels, str) else [cfg.labels]
    device = check_device(cfg.device)
    image = load_image(cfg.image)
    scored = ZeroShot(cfg.ckpt, device)(image, labels, str(cfg.prompt))
    print("[" + ",".join(f"\n  {json.dumps({'label': label, 'score': round(score, 4)})}" for label, score in scored)
          + "\n]")
    return scored
