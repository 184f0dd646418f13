"""Patch merging (Swin, Liu et al. 2021): the embedder of a staged hierarchy's later stages. Each
2 x 2 block of the previous stage's patch grid becomes one vector: its four vectors side by side
(4C), a LayerNorm, a Linear to 2C without bias. The grid halves (an odd side is padded with zeros
first, as Swin does); the width doubles."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class PatchMerging(nn.Module):
    """(B, H * W, C), the previous stage's patches row by row -> (B, ceil(H/2) * ceil(W/2), 2C).

    Args:
        d_model: C, the previous stage's width.
        grid: (H, W), the previous stage's patch grid.
        norm_eps: the LayerNorm's eps.

    Its input is another tower's output, not the net's (``reads_tower``: a container's FLOPs and
    ``describe`` count the input lengths of the towers that read the net's own input)."""

    reads_tower = True

    def __init__(self, d_model: int, grid: tuple[int, int] | list[int], norm_eps: float = 1e-5):
        super().__init__()
        self.grid = (int(grid[0]), int(grid[1]))
        self.norm = nn.LayerNorm(4 * d_model, eps=norm_eps)
        self.reduction = nn.Linear(4 * d_model, 2 * d_model, bias=False)

    @property
    def out_grid(self) -> tuple[int, int]:
        """(rows, columns) of the merged grid."""
        return -(-self.grid[0] // 2), -(-self.grid[1] // 2)

    def output_length(self, inputs: Tensor | None = None) -> int:
        """Vectors out: the merged grid's."""
        return self.out_grid[0] * self.out_grid[1]

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """x (B, H * W, C) -> (B, ceil(H/2) * ceil(W/2), 2C); the four of each 2 x 2 block in Swin's
        order: (even row, even column), (odd, even), (even, odd), (odd, odd)."""
        (h, w), (b, length, c) = self.grid, x.shape
        if length != h * w:
            raise ValueError(f"PatchMerging over a {h}x{w} grid takes {h * w} vectors, got {length}")
        x = nn.functional.pad(x.view(b, h, w, c), (0, 0, 0, w % 2, 0, h % 2))
        x = torch.cat([x[:, row::2, column::2] for column in range(2) for row in range(2)], dim=-1)
        return self.reduction(self.norm(x.view(b, -1, 4 * c)))
