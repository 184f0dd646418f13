"""Images for the models: load (failing with the file's name), resize, normalise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

MEAN, STD = 0.5, 0.5  # pixels in [0, 1] -> [-1, 1]


def load_image(path: str | Path) -> Image.Image:
    """An RGB image from ``path``; a missing or unreadable file fails with its name."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image {path} does not exist")
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError) as err:
        raise ValueError(f"image {path} is corrupt or not an image: {err}") from err


def to_tensor(image: Image.Image, image_size: int, resize: bool = True) -> Tensor:
    """PIL image -> (3, image_size, image_size) float in [-1, 1].

    An image of another size is resized (bicubic) when ``resize``; otherwise it fails
    with both sizes.
    """
    if image.size != (image_size, image_size):
        if not resize:
            raise ValueError(f"image of size {image.size[0]}x{image.size[1]}, the vision tower takes "
                             f"{image_size}x{image_size} (set data.resize=true to resize)")
        image = image.resize((image_size, image_size), Image.BICUBIC)
    pixels = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
    return (pixels - MEAN) / STD


def blank_like(images: Tensor) -> Tensor:
    """All-black images of the same shape: the image information taken away."""
    return torch.full_like(images, (0.0 - MEAN) / STD)
