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
from pathlib import Path

from omegaconf import DictConfig

from zoo.data.images import load_image
from zoo.inference.detecting import DetectedObject, Detector, check_threshold
from zoo.viz.boxes import draw_boxes


def as_json(found: list[DetectedObject]) -> str:
    """A JSON list, one object a line."""
    return "[" + ",".join(f"\n  {json.dumps(d.as_json())}" for d in found) + ("\n]" if found else "]")


def main(cfg: DictConfig) -> list[DetectedObject]:
    """Print the objects in ``image`` scoring at least ``threshold`` and draw them into ``out``
    (conf/detect.yaml); return them."""
    threshold = check_threshold(cfg.threshold)  # before the checkpoint is read
    image = load_image(cfg.image)
    found = Detector.from_checkpoint(cfg.ckpt, cfg.device)(image, threshold)
    print(as_json(found))
    draw_boxes(image, found, Path(cfg.out))
    return found
