"""A staged hierarchy (Swin, Liu et al. 2021): the first container that is not one stack per tower.

Each stage is a :class:`~zoo.nn.tower.Tower` of the same Block at its own width and heads, under its
own masks and biases: shifted windows over its patch grid (``zoo.nn.windows``; even layers unshifted,
odd layers rolled by window // 2) and a relative position bias per layer over each window
(``zoo.nn.relative_bias.WindowRelativeBias``). The first stage's embedder reads the images; each
later stage's is patch merging (``zoo.nn.merging``), which reads the stage before it: the grid halves,
the width doubles. The last stage ends in the final norm; the head reads its patches.

The stages are the container's towers (``net.towers``: ``stage1``, ``stage2``, ...), so describe, the
mask pictures and the FLOPs count go through them as through any other container's towers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from torch import Tensor, nn

from zoo.models.model import init_weights
from zoo.nn.block import BlockConfig
from zoo.nn.flops import linear_flops, tower_flops, training_flops
from zoo.nn.masks import PerLayer
from zoo.nn.merging import PatchMerging
from zoo.nn.parts import Part, build_embedder, build_head
from zoo.nn.relative_bias import WindowRelativeBias
from zoo.nn.tower import Tower, towers_of
from zoo.nn.windows import ShiftedWindowMask


def stage_windows(grid: tuple[int, int], window: int) -> tuple[int, int]:
    """(window, shift) of a stage over ``grid``: Swin's, or, where the grid is no larger than the
    window, one window over its shorter side and no shift (Hugging Face's ``set_shift_and_window_size``)."""
    return (window, window // 2) if min(grid) > window else (min(grid), 0)


class Staged(nn.Module):
    """Stages of Blocks between an image embedder and a head.

    Args:
        embedder: images -> (B, H * W, D) patch vectors, no CLS (``PatchEmbedder``); its image size
            fixes every stage's grid. A partial is built at the first stage's width and dropout.
        block: the first stage's Block; stage i is 2^i times as wide (``d_model``, ``d_ff``) with
            ``heads[i]`` heads.
        depths: the Blocks of each stage.
        heads: the heads of each stage.
        window: the windows' side, in patches (Swin's ``window_size``).
        head: builds the head from the last stage's width, ``head(d_model=D_last)`` (a Hydra
            ``_partial_``: only the container knows that width); (B, L, D_last) -> outputs.
        final_norm: a norm after the last stage.
        init_std: std of the normal initialisation.
    """

    def __init__(self, embedder: Part, block: BlockConfig, depths: Sequence[int], heads: Sequence[int],
                 window: int, head: Part, final_norm: bool = True, init_std: float = 0.02):
        super().__init__()
        if len(depths) != len(heads):
            raise ValueError(f"depths={list(depths)} and heads={list(heads)}: give one number of heads per stage")
        embedder = build_embedder(embedder, block)
        grid, stages = embedder.grid(None), []
        for i, (depth, n_heads) in enumerate(zip(depths, heads)):
            cfg = replace(block, d_model=block.d_model * 2 ** i, d_ff=block.d_ff * 2 ** i, n_heads=n_heads)
            if i:
                embedder = PatchMerging(cfg.d_model // 2, grid)
                grid = embedder.out_grid
            size, shift = stage_windows(grid, window)
            masks = [ShiftedWindowMask(grid, size, 0), ShiftedWindowMask(grid, size, shift)]
            biases = nn.ModuleList(WindowRelativeBias(n_heads, size, grid=grid, shift=masks[j % 2].shift)
                                   for j in range(depth))
            stages.append(Tower(embedder, cfg, depth, PerLayer(masks[: 1 + bool(shift)]), f"stage{i + 1}",
                                final_norm=final_norm and i == len(depths) - 1, bias=biases))
        self.stages = nn.ModuleList(stages)
        self.head = build_head(head, stages[-1].stack.blocks[0].attn.out.out_features)
        self.context = stages[0].embedder.output_length(None)  # the positions of the first stage
        self.n_layers = sum(depths)
        init_weights([self.stages, self.head], init_std, self.n_layers)

    @property
    def towers(self) -> dict[str, Tower]:
        """The stages, by name (``stage1``, ...)."""
        return towers_of(self)

    def features(self, inputs: Tensor, layer: int | None = None) -> Tensor:
        """images -> the last stage's patch vectors (B, L, D_last), final norm included."""
        if layer is not None:
            raise ValueError("a staged net gives its last hidden state only (layer=None): its stages differ in width")
        for stage in self.stages:
            inputs = stage.hidden(inputs)
        return inputs

    def forward(self, inputs: Tensor, key_padding: Tensor | None = None) -> Tensor:
        """images (B, C, S, S) -> head output, e.g. (B, num_classes). Images have no padding."""
        return self.head(self.features(inputs))

    def batch_flops(self, inputs: Tensor) -> int:
        """Training FLOPs of one step on ``inputs``."""
        return self.training_flops(inputs.shape[0], self.stages[0].output_length(inputs))

    def training_flops(self, batch: int, length: int) -> int:
        """Analytic FLOPs of one training step on ``batch`` images of ``length`` first-stage patches:
        each stage's Blocks at its own length and patch merging (zoo.nn.flops), the head once per image."""
        total = linear_flops(self.head)
        for stage in self.stages:
            merging = isinstance(stage.embedder, PatchMerging)
            n = stage.embedder.output_length() if merging else length
            total += tower_flops(stage, n) + (n * linear_flops(stage.embedder) if merging else 0)
        return training_flops(batch * total)
