"""Raw waveforms -> vectors: wav2vec 2.0's and HuBERT's convolutional front end.

A stack of strided Conv1d over the 16 kHz samples (the feature encoder, 320 samples per vector
at the released shapes), a projection (LayerNorm + Linear) to the Blocks' width, and
convolutional relative positions (a grouped, weight-normed Conv1d over the vectors, GELU) added
to them; for the post-LN encoders (the base models) the encoder's LayerNorm follows, for the
pre-LN ones (``do_stable_layer_norm``, the large models) the Tower's final norm closes the stack
instead. The padding of a batch is given at the vectors (``padding`` (B, L), True at real ones,
:meth:`WaveEmbedder.output_padding` of the samples' padding): padded vectors are zeroed before
the positional convolution, as the reference does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.nn.embedders import Position
from zoo.nn.feedforward import get_activation


class ConvLayer(nn.Module):
    """Conv1d -> optional norm -> activation. ``norm``: ``group`` (GroupNorm with one group per
    channel: a per-channel norm over time), ``layer`` (LayerNorm over the channels) or ``none``."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, bias: bool, norm: str, activation: str):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel_size=kernel, stride=stride, bias=bias)
        if norm not in ("group", "layer", "none"):
            raise ValueError(f"unknown conv norm {norm!r}: expected group, layer or none")
        self.norm = {"group": lambda: nn.GroupNorm(c_out, c_out), "layer": lambda: nn.LayerNorm(c_out),
                     "none": lambda: None}[norm]()
        self.kind, self.act = norm, get_activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, T) -> (B, C_out, (T - kernel) // stride + 1)."""
        x = self.conv(x)
        if self.kind == "layer":
            x = self.norm(x.transpose(1, 2)).transpose(1, 2)
        elif self.kind == "group":
            x = self.norm(x)
        return self.act(x)


class ConvPositions(nn.Module):
    """Convolutional relative positions: a Conv1d of ``kernel`` taps in ``groups`` groups, its
    weight normalised (w = g * v / ||v||, the norm over all but the tap axis, as
    ``weight_norm(dim=2)``), padded by kernel // 2 and trimmed by one at the end for an even kernel
    (same length out as in), then GELU. ``weight_g`` (1, 1, K) and ``weight_v`` are the reference's
    ``parametrizations.weight.original0`` / ``original1`` (older files: ``weight_g`` / ``weight_v``)."""

    def __init__(self, d_model: int, kernel: int, groups: int, activation: str = "gelu"):
        super().__init__()
        if d_model % groups:
            raise ValueError(f"d_model={d_model} is not divisible by the {groups} positional conv groups")
        v = torch.empty(d_model, d_model // groups, kernel)
        nn.init.normal_(v, std=(2.0 / (kernel * d_model // groups)) ** 0.5)
        self.weight_v = nn.Parameter(v)
        self.weight_g = nn.Parameter(torch.linalg.vector_norm(v, dim=(0, 1), keepdim=True))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.kernel, self.groups, self.act = kernel, groups, get_activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, L, D) positional vectors."""
        v = self.weight_v
        weight = v * (self.weight_g / torch.linalg.vector_norm(v, dim=(0, 1), keepdim=True))
        y = F.conv1d(x.transpose(1, 2), weight, self.bias, padding=self.kernel // 2, groups=self.groups)
        if self.kernel % 2 == 0:
            y = y[..., :-1]
        return self.act(y).transpose(1, 2)


class WaveEmbedder(nn.Module):
    """Waveforms (B, T) -> vectors (B, L, D): conv feature encoder -> LayerNorm + Linear ->
    + convolutional positions -> (``norm``) LayerNorm -> dropout.

    Args:
        conv_dim, conv_kernel, conv_stride: each conv layer's channels, kernel and stride.
        conv_bias: the convs have biases (wav2vec 2.0 large-lv60: yes; base: no).
        feat_extract_norm: ``group`` (GroupNorm on the first conv only: base) or ``layer``
            (LayerNorm after every conv: large).
        d_model: the Blocks' width.
        n_conv_pos, conv_pos_groups: the positional conv's kernel and groups.
        norm: the encoder's LayerNorm after the positions (post-LN encoders); False for pre-LN
            ones, whose Tower ends in the norm.
        norm_eps: of the projection's and the encoder's LayerNorm.
        activation: of the convs and the positional conv (``feat_extract_activation``).
    """

    def __init__(self, conv_dim: Sequence[int], conv_kernel: Sequence[int], conv_stride: Sequence[int],
                 d_model: int, n_conv_pos: int = 128, conv_pos_groups: int = 16, conv_bias: bool = False,
                 feat_extract_norm: str = "group", norm: bool = True, norm_eps: float = 1e-5,
                 activation: str = "gelu", dropout: float = 0.0):
        super().__init__()
        if not len(conv_dim) == len(conv_kernel) == len(conv_stride):
            raise ValueError(f"conv_dim {list(conv_dim)}, conv_kernel {list(conv_kernel)} and conv_stride "
                             f"{list(conv_stride)} must be as long (one entry per conv layer)")
        if feat_extract_norm not in ("group", "layer"):
            raise ValueError(f"feat_extract_norm={feat_extract_norm!r}: expected group or layer")
        norms = [feat_extract_norm] + ["layer" if feat_extract_norm == "layer" else "none"] * (len(conv_dim) - 1)
        channels = [1, *conv_dim]
        self.conv_layers = nn.ModuleList(
            ConvLayer(channels[i], channels[i + 1], conv_kernel[i], conv_stride[i], conv_bias, norms[i], activation)
            for i in range(len(conv_dim)))
        self.proj_norm = nn.LayerNorm(conv_dim[-1], eps=norm_eps)
        self.proj = nn.Linear(conv_dim[-1], d_model)
        self.positions = ConvPositions(d_model, n_conv_pos, conv_pos_groups, activation)
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if norm else None
        self.dropout = nn.Dropout(dropout)
        self.kernels, self.strides = list(conv_kernel), list(conv_stride)

    def positions_for(self, n_samples: Tensor | int) -> Tensor | int:
        """Vectors the conv stack makes of ``n_samples`` samples: (n - kernel) // stride + 1 per layer."""
        for k, s in zip(self.kernels, self.strides):
            n_samples = (n_samples - k) // s + 1
        return n_samples

    def samples_for(self, n_positions: int) -> int:
        """The fewest samples that make ``n_positions`` vectors (the inverse of :meth:`positions_for`)."""
        for k, s in zip(reversed(self.kernels), reversed(self.strides)):
            n_positions = (n_positions - 1) * s + k
        return n_positions

    def output_padding(self, sample_padding: Tensor) -> Tensor:
        """sample_padding (B, T) True at real samples (right-padded) -> (B, positions_for(T)) True
        at the vectors of the real samples (the reference's feature-vector attention mask)."""
        real = self.positions_for(sample_padding.sum(-1))
        return torch.arange(self.positions_for(sample_padding.shape[-1]), device=sample_padding.device) < real[:, None]

    def output_length(self, waves: Tensor) -> int:
        """Vectors for ``waves`` (B, T)."""
        return self.positions_for(waves.shape[-1])

    def describe_positions(self, waves: Tensor) -> list[Position]:
        """waves (1, T) -> a ``sample`` position per vector: the first sample it reads."""
        hop = 1
        for s in self.strides:
            hop *= s
        return [Position("sample", (t * hop,)) for t in range(self.output_length(waves))]

    def forward(self, waves: Tensor, start: int = 0, padding: Tensor | None = None) -> Tensor:
        """waves (B, T) float -> (B, L, D), L = :meth:`positions_for` (T). padding (B, L): True at
        real vectors; the padded ones are zeroed before the positions (they then see only zeros)."""
        if waves.dim() != 2:
            raise ValueError(f"waveforms of shape {tuple(waves.shape)}, expected (batch, samples)")
        x = waves[:, None]
        for layer in self.conv_layers:
            x = layer(x)
        x = self.proj(self.proj_norm(x.transpose(1, 2)))
        if padding is not None:
            x = x.masked_fill(~padding[..., None], 0.0)
        x = x + self.positions(x)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)
