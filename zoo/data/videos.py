"""Video clips for the models: decoding (PyAV), fitting a clip to the model's frames and size,
and batches of normalised clips.

A clip is a uint8 tensor (T, C, H, W): frames first, as Hugging Face's video models and
:class:`zoo.nn.embedders.TubeletEmbedder` read it (batched: (B, T, C, H, W)).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

from zoo.data.batches import VideoClips


def decode_video(path: str | Path) -> Tensor:
    """All frames of a video file as RGB: (T, 3, H, W) uint8. PyAV (``pip install av``, the
    ``video`` extra) decodes it; a file it cannot read is named in the error."""
    try:
        import av
    except ImportError as err:
        raise ImportError(f"decoding {path} needs PyAV: pip install av (or the project's video extra)") from err
    try:
        with av.open(str(path)) as container:
            frames = [torch.from_numpy(f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
    except (av.error.FFmpegError, ValueError, IndexError) as err:  # IndexError: no video stream
        raise ValueError(f"cannot decode video {path}: {err}") from err
    if not frames:
        raise ValueError(f"video {path} has no frames")
    return torch.stack(frames).permute(0, 3, 1, 2).contiguous()


def fit_clip(clip: Tensor, frames: int, size: int, resize: bool, name: str) -> tuple[Tensor, bool]:
    """(clip (frames, C, size, size) uint8, whether it had to change) from ``clip`` (T, C, H, W).

    Another number of frames is sampled evenly over the clip (repeating frames of a short
    one); another size is centre-cropped to a square and resized (bilinear, antialiased).
    ``resize=False`` refuses both, naming the clip and the two shapes.
    """
    t, c, h, w = clip.shape
    if (t, h, w) == (frames, size, size):
        return clip, False
    if not resize:
        raise ValueError(f"clip {name} is {t} frames of {h}x{w}, the model takes {frames} frames of {size}x{size} "
                         f"(set data.resize=true to sample and resize)")
    clip = clip[torch.linspace(0, t - 1, frames).round().long()]
    if (h, w) != (size, size):
        side = min(h, w)
        top, left = (h - side) // 2, (w - side) // 2
        square = clip[:, :, top:top + side, left:left + side].float()
        clip = F.interpolate(square, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        clip = clip.round().clamp(0, 255).to(torch.uint8)
    return clip, True


def warn_fitted(source: str, n_fitted: int, n_total: int, frames: int, size: int) -> None:
    """One warning for all the clips of ``source`` that :func:`fit_clip` changed."""
    if n_fitted:
        warnings.warn(f"{n_fitted} of {n_total} clips in {source} were not {frames} frames of {size}x{size}: "
                      f"sampled and resized to it (data.resize=false refuses such clips)", stacklevel=2)


def shuffle_frames(videos: Tensor, generator: torch.Generator) -> Tensor:
    """The same clips with their frames in random order, one permutation per clip:
    (B, T, ...) -> (B, T, ...). What is left of a clip without its frame order."""
    order = torch.rand(videos.shape[:2], generator=generator).argsort(dim=1).to(videos.device)
    return videos[torch.arange(videos.shape[0], device=videos.device)[:, None], order]


def normalise(clips: Tensor, mean: list[float], std: list[float]) -> Tensor:
    """uint8 clips (..., C, H, W) -> float, (pixel / 255 - mean) / std per channel."""
    mean_ = torch.tensor(mean).view(-1, 1, 1)
    std_ = torch.tensor(std).view(-1, 1, 1)
    return (clips.float() / 255 - mean_) / std_


class InMemoryClips(Dataset):
    """uint8 clips (N, T, C, H, W) + labels (N,) -> VideoClips(clip (T, C, H, W) normalised float, label);
    ``flip``: a random horizontal flip per clip (training), from torch's global generator."""

    def __init__(self, clips: Tensor, labels: Tensor, mean: list[float], std: list[float], flip: bool = False):
        self.clips, self.labels, self.mean, self.std, self.flip = clips, labels, mean, std, flip

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> VideoClips:
        clip = self.clips[index]
        if self.flip and torch.rand(()) < 0.5:
            clip = clip.flip(-1)
        return VideoClips(normalise(clip, self.mean, self.std), self.labels[index])
