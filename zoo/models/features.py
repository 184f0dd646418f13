"""Hidden states on request: a tower's output (or an inner layer's) without the container's head.

Every container's ``features`` goes through :func:`tower_features`, which asks the tower for
the hidden states of the layer it wants (:meth:`~zoo.nn.tower.Tower.intermediates`, timm's
``forward_intermediates``): the layers after it do not run, and nothing of the model changes,
so one model serves any number of callers at once. Layers are counted as Hugging Face's
``output_hidden_states`` lists them (:func:`zoo.nn.vision_towers.layer_index`): 0 = the
embedder's output, ``i`` = the residual stream after Block ``i``, negative from the end
(-1 = after the last Block).
"""

from __future__ import annotations

from torch import Tensor

from zoo.nn.tower import Tower
from zoo.nn.vision_towers import layer_index


def tower_features(tower: Tower, inputs: Tensor, layer: int | None = None, **hidden_kwargs) -> Tensor:
    """inputs (what ``tower``'s embedder takes) -> hidden states (B, L, D) after ``layer``.

    ``layer=None``: the tower's last hidden state, final norm included (Hugging Face's
    ``last_hidden_state``). ``layer=i``: the residual stream after ``i`` Blocks, never the final
    norm (``hidden_states[i]``; a GPT-2-style class puts its final norm into the last entry).
    ``hidden_kwargs``: what :meth:`~zoo.nn.tower.Tower.hidden` takes (key_padding, embedder inputs).
    """
    if layer is None:
        return tower.hidden(inputs, **hidden_kwargs)
    n = len(tower.layer_masks)
    if not -(n + 1) <= layer <= n:
        raise ValueError(f"layer={layer}: the {tower.name} tower has {n} layers; give 0..{n} (0 = the embedder's "
                         f"output) or -{n + 1}..-1 (-1 = after the last Block)")
    return tower.intermediates(inputs, [layer_index(layer, n)], **hidden_kwargs)[0]
