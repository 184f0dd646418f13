"""Position information, kept outside the Block.

Added to the input (in the embedder): :class:`LearnedPositions`,
:class:`SinusoidalPositions`. Acting inside attention (passed to every Block
as an argument): :class:`RotaryEmbedding` (a cos/sin table; :func:`rotary_tables`
when its base differs by layer; as wide as a head or narrower, :func:`rotary_width`; its positions scaled down, linear scaling). T5's relative position bias is an additive
attention bias of the same kind.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from zoo.nn.masks import tile


class TableEnd(ValueError):
    """A position table that cannot be computed further (a trained one): its message says what it is."""


def _check_length(start: int, length: int, max_len: int) -> None:
    if start + length > max_len:
        raise ValueError(
            f"sequence of length {start + length} is longer than the model's context of {max_len} positions"
        )


class LearnedPositions(nn.Module):
    """A trained vector per position (GPT, BERT, ViT, Whisper's decoder)."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.zeros(max_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, length: int, start: int = 0) -> Tensor:
        """Vectors for positions start..start+length-1: (length, D)."""
        _check_length(start, length, self.max_len)
        return self.weight[start : start + length]

    def longer(self, max_len: int) -> LearnedPositions:
        """A trained table has no vector past its end: refused (:class:`TableEnd`)."""
        raise TableEnd(f"a learned table of {self.max_len}")


RESAMPLING = ("bicubic", "bicubic_antialias")


def resample_grid(table: Tensor, side: int, grid: tuple[int, int], mode: str) -> Tensor:
    """A square grid's position vectors, table (side * side, D) row by row, resampled to ``grid``
    (rows, columns) -> (rows * columns, D): the table as a (D, side, side) image, interpolated as
    DINOv2 does (``bicubic``, PyTorch's kernel; ``bicubic_antialias``, PIL's, as Hugging Face's
    DINOv2 with registers), in float32 and cast back (the reference's precision)."""
    if mode not in RESAMPLING:
        raise ValueError(f"unknown position resampling {mode!r}: expected one of {list(RESAMPLING)}")
    image = table.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    out = torch.nn.functional.interpolate(image.to(torch.float32), size=grid, mode="bicubic", align_corners=False,
                                          antialias=mode == "bicubic_antialias").to(table.dtype)
    return out.permute(0, 2, 3, 1).reshape(grid[0] * grid[1], -1)


def sinusoids(max_len: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """The fixed sinusoidal table (max_len, d_model).

    ``interleaved`` is the paper's formula: PE(pos, 2i) = sin(pos / 10000^(2i/d)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d)). ``concat`` is Whisper's variant: all
    sines, then all cosines, with timescales spread over d/2 - 1 steps.
    """
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    if layout == "interleaved":
        inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        table = torch.zeros(max_len, d_model, dtype=torch.float64)
        table[:, 0::2] = torch.sin(pos * inv_freq)
        table[:, 1::2] = torch.cos(pos * inv_freq)
    elif layout == "concat":
        half = d_model // 2
        inv_freq = torch.exp(-math.log(10000.0) / (half - 1) * torch.arange(half, dtype=torch.float64))
        table = torch.cat([torch.sin(pos * inv_freq), torch.cos(pos * inv_freq)], dim=1)
    else:
        raise ValueError(f"unknown sinusoid layout {layout!r}: expected 'interleaved' or 'concat'")
    return table.float()


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal positions (the original Transformer; Whisper's encoder)."""

    def __init__(self, max_len: int, d_model: int, layout: str = "interleaved"):
        super().__init__()
        self.max_len, self.layout = max_len, layout
        self.register_buffer("weight", sinusoids(max_len, d_model, layout))

    def forward(self, length: int, start: int = 0) -> Tensor:
        _check_length(start, length, self.max_len)
        return self.weight[start : start + length]

    def longer(self, max_len: int) -> SinusoidalPositions:
        """The same formula computed to ``max_len`` positions (the first rows are this table's)."""
        return SinusoidalPositions(max_len, self.weight.shape[1], self.layout).to(self.weight.device)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoFormer; Llama): a cos/sin table per position.

    The table is computed once per forward and handed to every Block, which rotates
    queries and keys with :func:`apply_rotary` (the "rotate half" convention). ``scale``: linear
    position scaling, position p rotates as p / scale (Hugging Face's ``rope_type: linear`` with
    ``factor`` = scale: Gemma 3 4B and up, on its global layers); dividing the frequencies, as
    Hugging Face does, is exact for scale 1.
    """

    def __init__(self, d_head: int, max_len: int, base: float = 10000.0, scale: float = 1.0):
        super().__init__()
        self.max_len, self.base, self.scale = max_len, base, scale
        inv_freq = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head) / scale
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
        angles = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, length: int, start: int = 0) -> tuple[Tensor, Tensor]:
        """(cos, sin), each (length, d_head)."""
        _check_length(start, length, self.max_len)
        return self.cos[start : start + length], self.sin[start : start + length]

    def longer(self, max_len: int) -> RotaryEmbedding:
        """The same rotation computed to ``max_len`` positions (the first rows are this table's)."""
        return RotaryEmbedding(self.cos.shape[1], max_len, self.base, self.scale).to(self.cos.device)


def rotary_tables(d_head: int, max_len: int, base: float | Sequence[float], n_layers: int,
                  scale: float | Sequence[float] = 1.0) -> RotaryEmbedding | nn.ModuleList:
    """The rotary table of a stack of ``n_layers`` layers: one for all (``base`` and ``scale``
    numbers), or one per layer (an ``nn.ModuleList``) for a list of bases or of linear scales,
    each a pattern repeated over the layers as :class:`~zoo.nn.masks.PerLayer` masks are:
    ModernBERT's global layers rotate with base 160,000 and its local ones with 10,000, so its
    pattern is [160000, 10000, 10000]; Gemma 3 4B's global layers also scale their positions by 8.
    Layers with the same base and scale share one table (computed once per forward)."""
    if isinstance(base, (int, float)) and isinstance(scale, (int, float)):
        return RotaryEmbedding(d_head, max_len, base, scale)
    pairs = list(zip(layer_values(base, n_layers, "rotary base"), layer_values(scale, n_layers, "rotary scale")))
    shared = {pair: RotaryEmbedding(d_head, max_len, *pair) for pair in dict.fromkeys(pairs)}
    return nn.ModuleList(shared[pair] for pair in pairs)


def layer_values(value: float | Sequence[float], n_layers: int, what: str) -> list[float]:
    """Each of ``n_layers`` layers' value of a number (all alike) or of a pattern (:func:`~zoo.nn.masks.tile`)."""
    return [value] * n_layers if isinstance(value, (int, float)) else tile(value, n_layers, what)


def rotary_width(d_head: int, fraction: float = 1.0) -> int:
    """How many of a head's ``d_head`` values rotate: all (``fraction`` 1), or the first
    ``int(d_head * fraction)`` (GPT-NeoX's ``rotary_pct``: Pythia rotates 16 of its 64); an even number."""
    width = int(d_head * fraction)
    if not 0 < width <= d_head or width % 2:
        raise ValueError(f"rotary_fraction={fraction} of a head of {d_head} rotates {width} values: "
                         f"it must be an even number from 2 to {d_head}")
    return width


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x (B, H, L, Dh) by the angles of its positions: each head's first ``cos.shape[-1]``
    values (a table narrower than the head: partial rotary), the others pass as they are."""
    width = cos.shape[-1]
    if width < x.shape[-1]:
        return torch.cat([apply_rotary(x[..., :width], cos, sin), x[..., width:]], dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin
