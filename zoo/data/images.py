"""Images for the models.

Datasets of many small images (CIFAR-10): decoded once and kept in memory as uint8,
augmented on the fly a whole batch at a time (decoding JPEG/PNG is the expensive part
of an image pipeline on a small CPU). Single images (LLaVA's inputs): loaded one at a
time, failing with the file's name, resized and normalised.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image, UnidentifiedImageError
from torch import Tensor
from torch.utils.data import Dataset

from zoo.data.batches import ImageLabels
from zoo.terminal import progress


def decode_image_folder(root: Path, classes: list[str] | None = None) -> tuple[Tensor, Tensor, list[str]]:
    """``root/<class>/*.{png,jpg,jpeg}`` -> (images (N, C, H, W) uint8, labels (N,) int64, classes).

    Classes are the sorted sub-folder names (as ``torchvision.datasets.ImageFolder``
    orders them) unless ``classes`` is given. Every image must decode to the same
    shape; a file that does not decode, or has another shape, is named in the error.
    """
    folder = torchvision.datasets.ImageFolder(str(root), allow_empty=True)
    if classes is not None and folder.classes != classes:
        raise ValueError(f"{root} has classes {folder.classes}, expected {classes}")
    if not folder.samples:
        raise FileNotFoundError(f"{root} has no images in <class>/*.png|jpg sub-folders")
    images = []
    for path, _ in progress(folder.samples, f"decoding {root}", unit="image"):
        try:
            image = torchvision.io.decode_image(path, mode=torchvision.io.ImageReadMode.RGB)
        except Exception as err:
            raise RuntimeError(f"cannot decode image {path}: {err}") from err
        if images and image.shape != images[0].shape:
            raise ValueError(f"{path} is {tuple(image.shape)} (C, H, W), the others are {tuple(images[0].shape)}")
        images.append(image)
    labels = torch.tensor([label for _, label in folder.samples], dtype=torch.int64)
    return torch.stack(images), labels, folder.classes


def collate_batch(batch: ImageLabels) -> ImageLabels:
    """The DataLoader's collate_fn for :class:`InMemoryImages`, whose batches come ready-made."""
    return batch


class InMemoryImages(Dataset):
    """uint8 images + labels -> normalised float batches, optionally augmented.

    Augmentation (training): a random crop of the image padded by ``crop_padding``
    zeros per side, a horizontal flip with probability 1/2, and optionally timm's
    RandAugment (``randaugment``, a timm config string such as ``"rand-m9-n2-mstd0.5"``;
    per image, through PIL, so it costs real CPU time). Randomness comes from torch's
    global generator (seeded by the trainer).

    Batches are built by ``__getitems__`` (the DataLoader passes the batch's indices):
    crop and flip run once on the whole batch. Use ``collate_fn=collate_batch``.
    """

    def __init__(self, images: Tensor, labels: Tensor, mean: tuple[float, ...], std: tuple[float, ...],
                 augment: bool = False, crop_padding: int = 0, flip: bool = False, randaugment: str | None = None):
        self.images, self.labels = images, labels
        self.augment, self.crop_padding, self.flip = augment, crop_padding, flip
        self.mean = torch.tensor(mean).view(1, -1, 1, 1) * 255
        self.std = torch.tensor(std).view(1, -1, 1, 1) * 255
        self.randaugment = None
        if augment and randaugment:
            from timm.data import rand_augment_transform

            fill = tuple(round(255 * m) for m in mean)
            self.randaugment = rand_augment_transform(randaugment, {"img_mean": fill})

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        images, labels = self.__getitems__([index])
        return images[0], labels[0]

    def __getitems__(self, indices: list[int]) -> ImageLabels:
        """indices -> ImageLabels(images (B, C, H, W) float, labels (B,))."""
        index = torch.as_tensor(indices)
        images = self.images[index]
        if self.augment:
            images = self._augment(images)
        return ImageLabels((images.float() - self.mean) / self.std, self.labels[index])

    def _augment(self, images: Tensor) -> Tensor:
        """(B, C, H, W) uint8 -> (B, C, H, W) uint8, each image cropped / flipped on its own."""
        b, c, h, w = images.shape
        if self.crop_padding:
            p = self.crop_padding
            padded = torch.nn.functional.pad(images, (p, p, p, p)).flatten(2)  # (B, C, (H+2p)(W+2p))
            top = torch.randint(0, 2 * p + 1, (b, 1, 1))
            left = torch.randint(0, 2 * p + 1, (b, 1, 1))
            rows = top + torch.arange(h).view(1, h, 1)
            cols = left + torch.arange(w).view(1, 1, w)
            # one gather of each image's window, by flat index into the padded image
            index = (rows * (w + 2 * p) + cols).view(b, 1, h * w).expand(b, c, h * w)
            images = padded.gather(2, index).view(b, c, h, w)
        if self.flip:
            flipped = torch.rand(b) < 0.5
            images = torch.where(flipped.view(b, 1, 1, 1), images.flip(-1), images)
        if self.randaugment is not None:
            to_pil, to_tensor = torchvision.transforms.functional.to_pil_image, torchvision.transforms.functional.pil_to_tensor
            images = torch.stack([to_tensor(self.randaugment(to_pil(image))) for image in images])
        return images.contiguous()


MEAN, STD = 0.5, 0.5  # pixels in [0, 1] -> [-1, 1]


def load_image(path: str | Path) -> Image.Image:
    """An RGB image from ``path``, at 8 bits per channel (:func:`to_rgb`): what every command that
    reads a user's image (classify, detect, embed, answer, attention-maps) loads it with. Refused,
    naming the file: a missing path, a folder, anything but a regular file (``/dev/zero`` is never
    read), a corrupt file, and a decompression bomb (more pixels than PIL's ``MAX_IMAGE_PIXELS``
    allows, twice over: its header is read, never its pixels)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"image {path} does not exist")
    if path.is_dir():
        raise IsADirectoryError(f"image {path} is a folder: give one image file")
    if not path.is_file():
        raise ValueError(f"image {path} is not a regular file (a device, a pipe or a socket): give an image file")
    try:
        with Image.open(path) as image:
            return to_rgb(image)
    except Image.DecompressionBombError as err:
        raise ValueError(f"image {path} is refused as a decompression bomb: {err}") from err
    except (UnidentifiedImageError, OSError) as err:
        raise ValueError(f"image {path} is corrupt or not an image: {err}") from err


def to_rgb(image: Image.Image) -> Image.Image:
    """``image`` as 8-bit RGB. PIL opens a 16-bit greyscale PNG or TIFF as ``I;16`` (older versions:
    ``I``, 32-bit integers), whose ``convert("RGB")`` clips every value above 255 to white; here
    the 16-bit range is scaled to the 8-bit one (value / 257, rounded: 65535 -> 255), as
    torchvision's and timm's float conversions read it. Other modes convert as PIL converts them
    (16-bit colour PNGs PIL already opens at 8 bits)."""
    if image.mode == "I" or image.mode.startswith("I;16"):
        values = np.asarray(image, dtype=np.float64).clip(0, 65535)
        image = Image.fromarray(np.rint(values / 257).astype(np.uint8))  # mode L
    return image.convert("RGB")


def to_tensor(image: Image.Image, image_size: int, resize: bool = True,
              mean: float | list[float] = MEAN, std: float | list[float] = STD) -> Tensor:
    """PIL image -> (3, image_size, image_size) float, normalised as (pixel in [0, 1] - mean) / std
    (per channel when lists; the default maps to [-1, 1]).

    An image of another size is resized (bicubic) when ``resize``; otherwise it fails
    with both sizes.
    """
    if image.size != (image_size, image_size):
        if not resize:
            raise ValueError(f"image of size {image.size[0]}x{image.size[1]}, the vision tower takes "
                             f"{image_size}x{image_size} (set data.resize=true to resize)")
        image = image.resize((image_size, image_size), Image.BICUBIC)
    pixels = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)
    return (pixels - torch.tensor(mean).view(-1, 1, 1)) / torch.tensor(std).view(-1, 1, 1)


def blank_like(images: Tensor) -> Tensor:
    """All-black images of the same shape: the image information taken away."""
    return torch.full_like(images, (0.0 - MEAN) / STD)
