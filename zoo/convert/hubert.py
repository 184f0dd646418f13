"""Hugging Face HuBERT (``HubertForCTC``) -> zoo ``model=wav2vec2``: HuBERT differs from wav2vec 2.0
in pre-training only, so its network is ``model=wav2vec2``'s (no preset of its own: it would be
wav2vec2's again) and its layout is wav2vec 2.0's under the ``hubert.`` prefix
(:mod:`zoo.convert.wav2vec2`). ``model=wav2vec2 model.converter=zoo.convert.hubert.pretrained
model.init_from=DIR`` reads a HuBERT folder, and the export then writes ``HubertForCTC``. Its
options the zoo does not build (a batch norm in the positional conv, no norm before the
projection) are refused."""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.convert.wav2vec2 import Layout, family, read

HUBERT = Layout(("hubert",), "hubert.", "HubertForCTC", "HubertConfig",
                {"conv_pos_batch_norm": False, "feat_proj_layer_norm": True, "use_weighted_layer_sum": False})


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a ``HubertForCTC`` folder."""
    return read(net_cfg, path, HUBERT)


FAMILY = family(HUBERT)
