"""An image with its detected objects drawn on it: each box outlined in its class's colour, with
its label and score above it (``zoo detect``'s picture)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

from zoo.inference.detecting import DetectedObject

# one colour per class index (cycled): bright on dark and on light images alike
COLOURS = ["#ff3b30", "#34c759", "#0a84ff", "#ffcc00", "#af52de", "#ff9500", "#5ac8fa", "#ff2d55"]


def draw_boxes(image: Image.Image, objects: list[DetectedObject], path: Path) -> Path:
    """Write ``image`` (at its own size) with ``objects`` drawn on it to ``path`` as PNG."""
    picture = image.convert("RGB")
    pen = ImageDraw.Draw(picture)
    width = max(1, round(max(picture.size) / 200))  # lines stay visible on large images
    for found in objects:
        colour = COLOURS[found.label % len(COLOURS)]
        x0, y0, x1, y1 = found.box
        pen.rectangle((x0, y0, x1, y1), outline=colour, width=width)
        text = f"{found.name if found.name is not None else found.label} {found.score:.2f}"
        left, top, right, bottom = pen.textbbox((0, 0), text)
        y = y0 - (bottom - top) - 2 if y0 >= bottom - top + 2 else y0 + width  # above the box, else inside
        pen.rectangle((x0, y, x0 + right - left + 2, y + bottom - top + 2), fill=colour)
        pen.text((x0 + 1 - left, y + 1 - top), text, fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    picture.save(path, format="PNG")
    return path
