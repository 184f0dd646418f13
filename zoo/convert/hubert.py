"""Hugging Face HuBERT (``HubertForCTC``) -> zoo ``model=hubert``: wav2vec 2.0's layout under the
``hubert.`` prefix (:mod:`zoo.convert.wav2vec2`); its options the zoo does not build (a batch norm
in the positional conv, no norm before the projection) are refused."""

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
