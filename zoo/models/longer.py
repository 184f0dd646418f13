"""A model at a longer context than it was built (and trained) for: length extrapolation.

The position machinery is computed further where it can be: the sinusoidal table and the rotary
tables are formulas (:meth:`~zoo.nn.positions.SinusoidalPositions.longer`,
:meth:`~zoo.nn.positions.RotaryEmbedding.longer`); ALiBi, T5's bias and no positions need nothing.
A learned table cannot go past its end: :class:`~zoo.nn.positions.TableEnd`, which says so.
"""

from __future__ import annotations

import copy

from torch import nn

from zoo.models.model import Model
from zoo.nn.embedders import TokenEmbedder


def longer_context(model: Model, context: int) -> Model:
    """A copy of ``model`` (same weights) that reads up to ``context`` tokens; ``model`` is unchanged
    (and returned as it is for a context it reads already). Raises :class:`~zoo.nn.positions.TableEnd`
    for learned positions, ValueError (one line) for a model that is not one tower over a
    :class:`TokenEmbedder` with positions by position (not from an offset or from the ids)."""
    embedder = getattr(model, "embedder", None)
    if not isinstance(model, Model) or not isinstance(embedder, TokenEmbedder):
        raise ValueError(f"a longer context: {type(model).__name__} is not one tower over token ids (a Model with a "
                         f"TokenEmbedder: GPT, Llama, ...)")
    if embedder.position_offset or embedder.position_pad_id is not None:
        raise ValueError("a longer context: positions counted from an offset or from the ids (BART, RoBERTa) "
                         "are learned tables")
    if context <= model.context:
        return model
    # (first: a learned table refuses before anything is copied)
    positions = embedder.positions.longer(context) if embedder.positions is not None else None
    longer = copy.deepcopy(model)
    longer.embedder.positions = positions
    if isinstance(longer.rope, nn.ModuleList):  # one table per layer; layers that shared one share its longer one
        tables = {id(table): table.longer(context) for table in longer.rope}
        longer.rope = nn.ModuleList(tables[id(table)] for table in longer.rope)
    elif longer.rope is not None:
        longer.rope = longer.rope.longer(context)
    for layer_mask in longer.layer_masks:
        layer_mask.check_context(context)
    longer.embedder.max_len = longer.context = context
    return longer
