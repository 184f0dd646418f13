"""Detection (YOLOS, Fang et al. 2021): a plain ViT reads N learnable detection tokens after its
patches, and a head turns each detection token's final vector into class logits (with a last
"no object" class) and a box.

Same Block, same ``NoMask``: the only new pieces are the embedder (one more run of learned
tokens, with their own learned positions) and the head.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from zoo.nn.embedders import PatchEmbedder, Position
from zoo.nn.positions import LearnedPositions


class DetectionEmbedder(PatchEmbedder):
    """Images -> [CLS, patches, detection tokens] vectors, each with a learned position (YOLOS'
    ``YolosEmbeddings``: the ViT embedder with ``n_detections`` learned tokens appended)."""

    def __init__(self, image_size: int, patch_size: int, d_model: int, n_detections: int, channels: int = 3,
                 dropout: float = 0.0):
        if n_detections < 1:
            raise ValueError(f"n_detections={n_detections}: a detector needs at least one detection token")
        super().__init__(image_size, patch_size, d_model, channels, cls_token=True, dropout=dropout)
        self.n_detections = n_detections
        self.detections = nn.Parameter(torch.zeros(1, n_detections, d_model))
        # one table over the whole sequence, as YOLOS stores it: CLS, patches, detection tokens
        self.max_len = 1 + self.n_patches + n_detections  # the whole (fixed) sequence
        self.positions = LearnedPositions(self.max_len, d_model)

    def output_length(self, images: Tensor) -> int:
        """Vectors per image: the CLS, the patches and the detection tokens."""
        return self.max_len

    def describe_positions(self, images: Tensor) -> list[Position]:
        """The CLS token, the patches (row, column), then the detection tokens."""
        return super().describe_positions(images) + [Position("detection", (q,)) for q in range(self.n_detections)]

    def forward(self, images: Tensor, start: int = 0) -> Tensor:
        """images (B, C, H, W) -> (B, 1 + N + n_detections, D), N = (H / patch)^2."""
        if images.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"image of size {tuple(images.shape[-2:])}, the model expects {self.image_size}x{self.image_size}")
        x = self.patchify(images).flatten(2).transpose(1, 2)
        batch = x.shape[0]
        x = torch.cat([self.cls.expand(batch, -1, -1), x, self.detections.expand(batch, -1, -1)], dim=1)
        return self.dropout(x + self.positions(x.shape[1]))


class Detections(NamedTuple):
    """What a detector predicts per detection token: ``logits`` (B, Q, num_classes + 1), the last
    class being "no object", and ``boxes`` (B, Q, 4) as (cx, cy, w, h) in [0, 1] of the image."""

    logits: Tensor
    boxes: Tensor


class MLP(nn.Module):
    """DETR's prediction MLP: ``n_layers`` linear layers, ReLU between them (none after the last)."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int, n_layers: int):
        super().__init__()
        widths = [d_in] + [d_hidden] * (n_layers - 1) + [d_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x: Tensor) -> Tensor:
        """(..., d_in) -> (..., d_out)."""
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


class DetectionHead(nn.Module):
    """The last ``n_detections`` vectors (B, L, D) -> :class:`Detections`: a 3-layer MLP to
    ``num_classes + 1`` logits, and a 3-layer MLP to 4 numbers through a sigmoid (the box's
    centre, width and height as fractions of the image), both of hidden width ``d_model``."""

    def __init__(self, d_model: int, num_classes: int, n_detections: int, n_layers: int = 3):
        super().__init__()
        self.n_detections, self.num_classes = n_detections, num_classes
        self.classes = MLP(d_model, d_model, num_classes + 1, n_layers)
        self.boxes = MLP(d_model, d_model, 4, n_layers)

    def forward(self, x: Tensor) -> Detections:
        """(B, L, D) -> logits (B, Q, num_classes + 1), boxes (B, Q, 4), Q = n_detections."""
        tokens = x[:, -self.n_detections:]
        return Detections(self.classes(tokens), self.boxes(tokens).sigmoid())
