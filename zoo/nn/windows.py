"""Swin's shifted windows over a patch grid (Liu et al. 2021) as a mask: who sees whom when the grid,
padded to whole windows and rolled by ``-shift`` along both axes, is cut into window x window tiles.

The zoo attends over the whole grid under this mask (the reference attends inside each window: the
same function). A grid the window does not divide is padded, and the padding takes part in the
attention of the windows it falls in as keys and values of a zero input (Swin pads after the
attention's norm): the mask says how many (:attr:`ShiftedWindowMask.zero_keys`), and the attention
appends them after the real keys (``zoo.nn.context.AttentionContext.zero_keys``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.nn.masks import Mask


def padded(side: int, window: int) -> int:
    """``side`` rounded up to whole windows."""
    return -(-side // window) * window


def window_layout(grid: tuple[int, int], window: int, shift: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Every cell of the H x W ``grid`` padded to whole windows, the real patches row by row first and
    then the padding cells row by row, in the frame rolled by ``-shift``: (its window, its region (the
    cyclic shift's: cells that wrapped around see only each other), its row and its column inside
    its window), (H_pad * W_pad,) long each."""
    (h, w), (hp, wp) = grid, (padded(grid[0], window), padded(grid[1], window))
    cpu = torch.device("cpu")  # (also under a meta device: a net built for its shapes keeps its layout)
    rows, columns = torch.arange(hp, device=cpu).repeat_interleave(wp), torch.arange(wp, device=cpu).repeat(hp)
    real = (rows < h) & (columns < w)
    order = torch.cat([real.nonzero()[:, 0], (~real).nonzero()[:, 0]])
    rows, columns = (rows[order] - shift) % hp, (columns[order] - shift) % wp
    windows = rows // window * (wp // window) + columns // window
    region = torch.zeros_like(rows)
    if shift:  # Swin's three bands per axis: before the last window, the last window's unwrapped and wrapped parts
        bands = [(side >= full - window).long() + (side >= full - shift).long() for side, full in ((rows, hp), (columns, wp))]
        region = bands[0] * 3 + bands[1]
    return windows, region, rows % window, columns % window


# (grid, window, shift) -> each cell's window and region (CPU), laid out once, when a mask is made:
# the layout picks cells with `nonzero`, whose data-dependent shape would stop torch.compile's graph
# in every forward. Kept outside the masks, which compare by their plain values.
_LAYOUTS: dict[tuple[tuple[int, int], int, int], tuple[Tensor, Tensor]] = {}


class ShiftedWindowMask(Mask):
    """A patch sees the patches of its own window of the padded grid rolled by ``-shift`` (Swin's even
    layers: shift 0; odd layers: window // 2), and within it only those of its own region.

    Args:
        grid: (H, W), the stage's patch grid (row-major, no CLS).
        window: the window's side, in patches.
        shift: the cyclic shift, 0 <= shift < window.

    Called with q_len = H * W queries over k_len = H * W keys (a picture) or H * W + :attr:`zero_keys`
    (the padding's keys after the real ones, as the attention appends them); anything else is refused.
    It depends on the grid, not on absolute positions alone: it has no cells (SDPA only)."""

    has_cells = False

    def __init__(self, grid, window: int, shift: int = 0) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1 or not 0 <= shift < window:
            raise ValueError(f"ShiftedWindowMask window={window!r}, shift={shift!r}: give a window >= 1 and "
                             f"0 <= shift < window")
        self.grid, self.window, self.shift = (int(grid[0]), int(grid[1])), window, shift
        if self._key not in _LAYOUTS:
            _LAYOUTS[self._key] = window_layout(self.grid, window, shift)[:2]

    @property
    def _key(self) -> tuple[tuple[int, int], int, int]:
        return self.grid, self.window, self.shift

    @property
    def zero_keys(self) -> int:
        """The padding cells (keys of a zero input) that pad the grid to whole windows."""
        return padded(self.grid[0], self.window) * padded(self.grid[1], self.window) - self.grid[0] * self.grid[1]

    @property
    def picture_length(self) -> int:
        return self.grid[0] * self.grid[1]

    def dense(self, q_len: int, k_len: int, device: torch.device, prefix_len: Tensor | None = None) -> Tensor:
        length = self.grid[0] * self.grid[1]
        if q_len != length or k_len not in (length, length + self.zero_keys):
            raise ValueError(f"ShiftedWindowMask over a {self.grid[0]}x{self.grid[1]} grid takes {length} queries over "
                             f"{length} (+ {self.zero_keys} padding) keys, got {q_len} over {k_len}: give the model "
                             f"images of its image_size")
        windows, region = (t.to(device) for t in _LAYOUTS[self._key])
        sees = (windows[:q_len, None] == windows[None, :]) & (region[:q_len, None] == region[None, :])
        return sees[:, :k_len]
