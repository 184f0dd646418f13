"""Input embedders: how an input becomes a sequence of d_model vectors (B, L, D).

One class per kind of input. Each takes ``start`` (the position of the first
input, for incremental decoding with a KV cache).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from zoo.nn.positions import LearnedPositions, SinusoidalPositions


def make_positions(kind: str, max_len: int, d_model: int) -> nn.Module | None:
    """Positions added to the input: ``learned``, ``sinusoidal``, ``sinusoidal_concat``
    (Whisper's layout) or ``none`` (rotary / relative positions act inside attention)."""
    if kind == "learned":
        return LearnedPositions(max_len, d_model)
    if kind == "sinusoidal":
        return SinusoidalPositions(max_len, d_model, "interleaved")
    if kind == "sinusoidal_concat":
        return SinusoidalPositions(max_len, d_model, "concat")
    if kind == "none":
        return None
    raise ValueError(f"unknown positions {kind!r}: expected learned, sinusoidal, sinusoidal_concat or none")


class TokenEmbedder(nn.Module):
    """Token ids -> vectors: token embedding (x sqrt(d) if ``scale``) + positions
    (+ segment embedding), then optional LayerNorm and dropout.

    GPT: learned positions. Original Transformer: scaled, sinusoidal. BERT: learned
    positions + 2 segments + LayerNorm. T5 / Llama: no positions here.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int,
        positions: str = "learned",
        scale: bool = False,
        n_segments: int = 0,
        norm_eps: float | None = None,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.tokens.weight, std=0.02)
        self.positions = make_positions(positions, max_len, d_model)
        self.segments = nn.Embedding(n_segments, d_model) if n_segments else None
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if norm_eps is not None else None
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len

    def forward(self, tokens: Tensor, start: int = 0, segments: Tensor | None = None,
                inserted: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """tokens (B, L) int -> (B, L, D).

        inserted: (where (B, L) bool, vectors (n, D) with n = where.sum()): vectors that
        take the place of the token embeddings at ``where``, before positions are added
        (LLaVA's projected image features at its ``<image>`` tokens).
        """
        x = self.tokens(tokens) * self.scale
        if inserted is not None:
            where, vectors = inserted
            x = x.masked_scatter(where[..., None], vectors.to(x.dtype))
        if self.positions is not None:
            x = x + self.positions(tokens.shape[1], start)
        elif start + tokens.shape[1] > self.max_len:
            raise ValueError(
                f"sequence of length {start + tokens.shape[1]} is longer than the model's context of {self.max_len}"
            )
        if self.segments is not None:
            x = x + self.segments(segments if segments is not None else tokens.new_zeros(tokens.shape))
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


class PatchEmbedder(nn.Module):
    """Images -> patch vectors: a conv patchify (kernel = stride = patch size), a CLS
    token in front, learned positions, dropout (ViT); optionally a LayerNorm after
    (CLIP's ``pre_layrnorm``).
    """

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        d_model: int,
        channels: int = 3,
        cls_token: bool = True,
        norm_eps: float | None = None,
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image size {image_size} is not divisible by patch size {patch_size}")
        self.image_size, self.patch_size = image_size, patch_size
        self.n_patches = (image_size // patch_size) ** 2
        self.patchify = nn.Conv2d(channels, d_model, kernel_size=patch_size, stride=patch_size, bias=bias)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model)) if cls_token else None
        self.positions = LearnedPositions(self.n_patches + int(cls_token), d_model)
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if norm_eps is not None else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, images: Tensor, start: int = 0) -> Tensor:
        """images (B, C, H, W) -> (B, 1 + N, D), N = (H / patch)^2."""
        if images.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"image of size {tuple(images.shape[-2:])}, the model expects {self.image_size}x{self.image_size}")
        x = self.patchify(images).flatten(2).transpose(1, 2)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.positions(x.shape[1])
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)
