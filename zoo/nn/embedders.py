"""Input embedders: how an input becomes a sequence of d_model vectors (B, L, D).

One class per kind of input. Each takes ``start`` (the position of the first
input, for incremental decoding with a KV cache), and says what each of its output
positions is (``describe_positions``: a :class:`Position` each), which the attention maps label.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.nn.positions import RESAMPLING, LearnedPositions, SinusoidalPositions, resample_grid


class Position(NamedTuple):
    """What one output position of an embedder is: ``kind`` and its ``index``.

    ``token`` (the id,), ``cls`` (), ``distillation`` (), ``register`` (its number,), ``patch`` (row, column), ``detection`` (the token's number,),
    ``frame`` (the first log-mel frame it reads,), ``image`` (the image token's number,)."""

    kind: str
    index: tuple[int, ...] = ()


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
    positions + 2 segments + LayerNorm. BART: learned positions from row 2 on
    (``position_offset=2``) + LayerNorm (mBART scaled too). T5 / Llama: no positions here. ModernBERT: no
    positions, a LayerNorm without bias (``norm_bias=False``). Gemma: scaled, no positions.
    RoBERTa / XLM-R: positions counted from the ids (:meth:`position_ids`): the first
    ``position_offset`` rows are not positions (``padding_idx + 1`` of them), and with
    ``position_pad_id`` the tokens of that id read its row and are not counted.
    The scale is rounded to the table's dtype before it multiplies, as Gemma's reference does
    (in bfloat16 sqrt(3072) = 55.43 is 55.5); in float32 that is the float32 product as before.
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
        norm_bias: bool = True,
        position_offset: int = 0,
        position_pad_id: int | None = None,
    ):
        super().__init__()
        if not 0 <= position_offset < max_len:
            raise ValueError(f"position_offset={position_offset} leaves no position of the table's {max_len}")
        self.tokens = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.tokens.weight, std=0.02)
        self.positions = make_positions(positions, max_len, d_model)
        self.segments = nn.Embedding(n_segments, d_model) if n_segments else None
        self.norm = nn.LayerNorm(d_model, eps=norm_eps, bias=norm_bias) if norm_eps is not None else None
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len
        self.position_offset, self.position_pad_id = position_offset, position_pad_id

    def position_ids(self, tokens: Tensor, start: int = 0) -> Tensor:
        """tokens (B, L) -> the rows (B, L) of the position table they read: ``position_offset``
        + the position; with ``position_pad_id``, the position counts only the other tokens and
        those of that id read row ``position_pad_id`` (fairseq's ``make_positions``: a padded
        batch, left or right, gives each sequence's tokens the rows it has alone)."""
        if start + tokens.shape[1] + self.position_offset > self.max_len:
            raise ValueError(f"sequence of length {start + tokens.shape[1]} is longer than the model's context of "
                             f"{self.max_len - self.position_offset} positions")
        if self.position_pad_id is None:
            return torch.arange(start, start + tokens.shape[1], device=tokens.device).expand_as(tokens) \
                + self.position_offset
        real = tokens != self.position_pad_id
        return torch.where(real, real.cumsum(1) - 1 + start + self.position_offset, self.position_pad_id)

    def output_length(self, tokens: Tensor) -> int:
        """Vectors for ``tokens`` (B, L): one per token."""
        return tokens.shape[-1]

    def describe_positions(self, tokens: Tensor) -> list[Position]:
        """tokens (1, L) -> a ``token`` position per id."""
        return [Position("token", (int(t),)) for t in tokens[0]]

    def forward(self, tokens: Tensor, start: int = 0, segments: Tensor | None = None,
                inserted: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """tokens (B, L) int -> (B, L, D).

        inserted: (where (B, L) bool, vectors (n, D) with n = where.sum()): vectors that
        take the place of the token embeddings at ``where``, before positions are added
        (LLaVA's projected image features at its ``<image>`` tokens).
        """
        x = self.tokens(tokens)
        if self.scale != 1.0:
            x = x * torch.tensor(self.scale, dtype=x.dtype)
        if inserted is not None:
            where, vectors = inserted
            x = x.masked_scatter(where[..., None], vectors.to(x.dtype))
        if self.positions is not None and (self.position_offset or self.position_pad_id is not None):
            x = x + self.positions.weight[self.position_ids(tokens, start)]
        elif self.positions is not None:
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

    The sequence is [CLS, distillation token, registers, patches], each part optional:
    ``distillation_token`` (DeiT, Touvron et al. 2021) is a second learned token with its own
    position, read by the distillation head; ``registers`` (Darcet et al. 2024, DINOv2 with
    registers) are learned tokens without positions, put after the tokens that have them.
    ``interpolate`` (``zoo.nn.positions.RESAMPLING``): images of another size than
    ``image_size`` are taken, the patch positions resampled to their grid (DINOv2); None: the
    one size ``image_size`` only. ``absolute_positions=False``: no position table (BEiT's
    positions are a relative bias inside attention, ``zoo.nn.relative_bias``).
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
        distillation_token: bool = False,
        registers: int = 0,
        interpolate: str | None = None,
        absolute_positions: bool = True,
    ):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image size {image_size} is not divisible by patch size {patch_size}")
        if interpolate is not None and interpolate not in RESAMPLING:
            raise ValueError(f"unknown position resampling interpolate={interpolate!r}: expected one of "
                             f"{list(RESAMPLING)} or null")
        self.image_size, self.patch_size, self.interpolate = image_size, patch_size, interpolate
        self.n_patches = (image_size // patch_size) ** 2
        self.patchify = nn.Conv2d(channels, d_model, kernel_size=patch_size, stride=patch_size, bias=bias)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model)) if cls_token else None
        self.distillation = nn.Parameter(torch.zeros(1, 1, d_model)) if distillation_token else None
        self.registers = nn.Parameter(torch.zeros(1, registers, d_model)) if registers else None
        self.n_positioned = int(cls_token) + int(distillation_token)  # the tokens before the patches with positions
        self.prefix_tokens = self.n_positioned + registers  # every vector before the patches
        self.positions = LearnedPositions(self.n_patches + self.n_positioned, d_model) if absolute_positions else None
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if norm_eps is not None else None
        self.dropout = nn.Dropout(dropout)

    def grid(self, images: Tensor | None) -> tuple[int, int]:
        """(rows, columns) of patches of ``images`` (..., H, W); another size than ``image_size`` is
        refused unless the positions interpolate. ``None``: images of ``image_size``."""
        if images is None:
            return (self.image_size // self.patch_size,) * 2
        size = tuple(images.shape[-2:])
        if size != (self.image_size, self.image_size) and self.interpolate is None:
            raise ValueError(f"image of size {size}, the model expects {self.image_size}x{self.image_size}")
        if min(size) < self.patch_size:
            raise ValueError(f"image of size {size} is smaller than one {self.patch_size} px patch")
        return size[0] // self.patch_size, size[1] // self.patch_size

    def output_length(self, images: Tensor) -> int:
        """Vectors per image: the patches, and the tokens before them."""
        rows, columns = self.grid(images)
        return rows * columns + self.prefix_tokens

    def describe_positions(self, images: Tensor) -> list[Position]:
        """The CLS, distillation and register tokens (if any), then the patches row by row as (row, column)."""
        rows, columns = self.grid(images)
        prefix = [Position("cls")] * int(self.cls is not None) + [Position("distillation")] * int(
            self.distillation is not None) + [Position("register", (r,)) for r in range(self.prefix_tokens - self.n_positioned)]
        return prefix + [Position("patch", divmod(i, columns)) for i in range(rows * columns)]

    def _positions(self, grid: tuple[int, int]) -> Tensor:
        """(n_positioned + rows * columns, D): the table, its patch part resampled to ``grid``."""
        table, side = self.positions(self.positions.max_len), self.image_size // self.patch_size
        if grid == (side, side):
            return table
        return torch.cat([table[: self.n_positioned],
                          resample_grid(table[self.n_positioned :], side, grid, self.interpolate)])

    def forward(self, images: Tensor, start: int = 0) -> Tensor:
        """images (B, C, H, W) -> (B, prefix + N, D), N = (H / patch) * (W / patch)."""
        grid = self.grid(images)
        x = self.patchify(images).flatten(2).transpose(1, 2)
        tokens = [t.expand(x.shape[0], -1, -1) for t in (self.cls, self.distillation) if t is not None]
        x = torch.cat([*tokens, x], dim=1) if tokens else x  # a lone patch tensor keeps its layout (and rounding)
        if self.positions is not None:
            x = x + self._positions(grid)
        if self.registers is not None:
            x = torch.cat([x[:, : self.n_positioned], self.registers.expand(x.shape[0], -1, -1),
                           x[:, self.n_positioned :]], dim=1)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


class AudioEmbedder(nn.Module):
    """Log-mel frames -> audio vectors (Whisper's encoder input): two Conv1d with GELU,
    the second with stride 2 (100 -> 50 vectors per second), then fixed positions.

    Whisper's positions are the ``sinusoidal_concat`` table; its checkpoints store
    the table as weights, which the converter copies into this buffer exactly.
    """

    stride = 2  # the second conv's: log-mel frames per output vector

    def __init__(self, n_mels: int, d_model: int, max_len: int, positions: str = "sinusoidal_concat",
                 dropout: float = 0.0):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel_size=3, stride=self.stride, padding=1)
        # He initialisation puts the audio's signal at about the scale of the positions
        # (output std 0.45 vs 0.61 on an FSDD log-mel at width 128); PyTorch's default
        # gives 0.07, so a fresh encoder would see mostly positions.
        for conv in (self.conv1, self.conv2):
            nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
            nn.init.zeros_(conv.bias)
        self.positions = make_positions(positions, max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.n_mels, self.max_len = n_mels, max_len

    @classmethod
    def positions_for(cls, n_frames: Tensor | int) -> Tensor | int:
        """Vectors the embedder makes from ``n_frames`` log-mel frames (the stride-2 conv)."""
        return (n_frames - 1) // cls.stride + 1

    @classmethod
    def output_padding(cls, frame_padding: Tensor) -> Tensor:
        """The padding of the output for the padding of the input: frame_padding (B, T) True at
        real frames (right-padded) -> (B, positions_for(T)) True at vectors made from real frames."""
        real = cls.positions_for(frame_padding.sum(-1))
        return torch.arange(cls.positions_for(frame_padding.shape[-1]), device=frame_padding.device) < real[:, None]

    @property
    def max_frames(self) -> int:
        """The most log-mel frames the output's ``max_len`` positions hold."""
        return self.max_len * self.stride

    def output_length(self, features: Tensor) -> int:
        """Sequence length of the output for ``features`` (B, n_mels, T)."""
        return self.positions_for(features.shape[-1])

    def describe_positions(self, features: Tensor) -> list[Position]:
        """features (1, n_mels, T) -> a ``frame`` position per output vector (every ``stride``-th frame)."""
        return [Position("frame", (t * self.stride,)) for t in range(self.output_length(features))]

    def forward(self, features: Tensor, start: int = 0) -> Tensor:
        """features (B, n_mels, T) -> (B, ceil(T / 2), D)."""
        if features.dim() != 3 or features.shape[1] != self.n_mels:
            raise ValueError(f"audio features of shape {tuple(features.shape)}, expected (batch, {self.n_mels}, frames)")
        x = F.gelu(self.conv1(features))
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        if self.positions is not None:
            x = x + self.positions(x.shape[1], start)
        return self.dropout(x)


class TubeletEmbedder(nn.Module):
    """Videos -> tubelet vectors: a Conv3d patchify over tubelets of ``tubelet_size`` frames x
    ``patch_size`` x ``patch_size`` pixels (kernel = stride), an optional CLS token in front,
    positions, dropout.

    ViViT (Arnab et al. 2021, Hugging Face's "model 1", spatio-temporal attention): CLS and
    learned positions. VideoMAE (Tong et al. 2022): no CLS, the fixed interleaved sinusoid table.
    The vectors run in time-major order (tubelet t, row, column), as the Conv3d output flattens.
    """

    def __init__(
        self,
        frames: int,
        image_size: int,
        tubelet_size: int,
        patch_size: int,
        d_model: int,
        channels: int = 3,
        cls_token: bool = True,
        positions: str = "learned",
        dropout: float = 0.0,
    ):
        super().__init__()
        if frames % tubelet_size:
            raise ValueError(f"{frames} frames are not divisible by the tubelet's {tubelet_size} frames")
        if image_size % patch_size:
            raise ValueError(f"image size {image_size} is not divisible by patch size {patch_size}")
        if positions not in ("learned", "sinusoidal"):
            raise ValueError(f"unknown tubelet positions {positions!r}: expected learned or sinusoidal")
        self.shape = (frames, channels, image_size, image_size)  # (T, C, H, W) of one clip
        self.n_tubelets = (frames // tubelet_size) * (image_size // patch_size) ** 2
        size = (tubelet_size, patch_size, patch_size)
        self.patchify = nn.Conv3d(channels, d_model, kernel_size=size, stride=size)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model)) if cls_token else None
        self.max_len = self.n_tubelets + int(cls_token)  # the whole (fixed) sequence
        self.positions = make_positions(positions, self.max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def output_length(self, videos: Tensor) -> int:
        """Vectors per clip: the tubelets, and the CLS token."""
        return self.max_len

    def forward(self, videos: Tensor, start: int = 0) -> Tensor:
        """videos (B, T, C, H, W) -> (B, [1 +] N, D), N = T / t * (H / p)^2."""
        if tuple(videos.shape[1:]) != self.shape:
            raise ValueError(f"video clips of shape {tuple(videos.shape[1:])} (frames, channels, height, width), "
                             f"the model expects {self.shape}")
        x = self.patchify(videos.transpose(1, 2)).flatten(2).transpose(1, 2)  # Conv3d reads (B, C, T, H, W)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        return self.dropout(x + self.positions(x.shape[1]))
