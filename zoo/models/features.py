"""Hidden states on request: a tower's output (or an inner layer's) without the container's head.

Every container's ``features`` goes through :func:`tower_features`, which reads a tower at a
chosen layer with the Stack's own :meth:`~zoo.nn.stack.Stack.read_at` (the mechanism LLaVA's
vision tower is built on), for this one call: the layers after it do not run, and the tower
is left as it was afterwards. Layers are counted as Hugging Face's ``output_hidden_states``
lists them (:func:`zoo.nn.vision_towers.layer_index`): 0 = the embedder's output, ``i`` = the
residual stream after Block ``i``, negative from the end (-1 = after the last Block).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor

from zoo.nn.tower import Tower
from zoo.nn.vision_towers import layer_index


@contextmanager
def reading_at(tower: Tower, layer: int | None) -> Iterator[None]:
    """Inside the block, ``tower.hidden`` returns the hidden state after ``layer`` (see the
    module docstring; ``None``: the tower's own output, final norm included). The stack's
    read point is restored on leaving, also after an error. Not for concurrent use of one tower."""
    if layer is None:
        yield
        return
    stack = tower.stack
    n = len(stack.blocks)
    if not -(n + 1) <= layer <= n:
        raise ValueError(f"layer={layer}: the {tower.name} tower has {n} layers; give 0..{n} (0 = the embedder's "
                         f"output) or -{n + 1}..-1 (-1 = after the last Block)")
    saved = stack.n_read, stack.layer_masks
    stack.read_at(layer_index(layer, n))
    try:
        yield
    finally:
        stack.n_read, stack.layer_masks = saved


def tower_features(tower: Tower, inputs: Tensor, layer: int | None = None, **hidden_kwargs) -> Tensor:
    """inputs (what ``tower``'s embedder takes) -> hidden states (B, L, D) after ``layer``.

    ``layer=None``: the tower's last hidden state, final norm included (Hugging Face's
    ``last_hidden_state``). ``layer=i``: the residual stream after ``i`` Blocks, never the final
    norm (``hidden_states[i]``; a GPT-2-style class puts its final norm into the last entry).
    ``hidden_kwargs``: what :meth:`~zoo.nn.tower.Tower.hidden` takes (key_padding, embedder inputs).
    """
    with reading_at(tower, layer):
        return tower.hidden(inputs, **hidden_kwargs)
