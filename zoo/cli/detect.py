"""``zoo detect``: the objects a detector checkpoint (YOLOS) finds in one image, printed as JSON and
drawn on the image.

    python -m zoo detect ckpt=outputs/yolos_shapes_cpu/<run>/checkpoints/last.ckpt image=shapes.png \\
        threshold=0.5 out=detections.png

Prints a JSON list, best first, of ``{"label": name (the index when the data had no names),
"class": index, "score": probability, "box": [x0, y0, x1, y1]}`` in pixels of the image given, and
writes the image at its own size with the boxes and labels drawn (``out``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from omegaconf import DictConfig

from zoo.data.images import load_image
from zoo.inference.detecting import DetectedObject, Detector, check_threshold
from zoo.inference.device import check_device
from zoo.viz.boxes import draw_boxes


def as_json(found: list[DetectedObject]) -> str:
    """A JSON list, one object a line."""
    return "[" + ",".join(f"\n  {json.dumps(d.as_json())}" for d in found) + ("\n]" if found else "]")


def check_out(image: Path, out: Path) -> None:
    """Refuse an ``out`` that is the input ``image`` (by another name too): the drawing would replace it."""
    if out.exists() and os.path.samefile(image, out):
        raise ValueError(f"out={out} is the input image: the boxes would be drawn over it; pass another out=")


def main(cfg: DictConfig) -> list[DetectedObject]:
    """Print the objects in ``image`` scoring at least ``threshold`` and draw them into ``out``
    (conf/detect.yaml); return them."""
    # before the checkpoint is read
    threshold = check_threshold(cfg.threshold)
    device = check_device(cfg.device)
    image = load_image(cfg.image)
    check_out(Path(cfg.image), Path(cfg.out))
    found = Detector.from_checkpoint(cfg.ckpt, device)(image, threshold)
    print(as_json(found))
    draw_boxes(image, found, Path(cfg.out))
    return found
