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

from zoo.convert import wav2vec2
from zoo.convert.common import ConfigKeys
from zoo.convert.wav2vec2 import Layout, family, read

# HubertConfig's keys: wav2vec 2.0's, and the two options the zoo builds at one value only
CONFIG_KEYS = wav2vec2.CONFIG_KEYS | ConfigKeys(fixed={"conv_pos_batch_norm": False, "feat_proj_layer_norm": True})
HUBERT = Layout(("hubert",), "hubert.", "HubertForCTC", "HubertConfig", CONFIG_KEYS)


def from_transformers(hf_model) -> nn.Module:
    """A zoo ``model=wav2vec2`` net holding a ``HubertForCTC``'s weights."""
    return wav2vec2.from_transformers(hf_model, layout=HUBERT)


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a ``HubertForCTC`` folder."""
    return read(net_cfg, path, HUBERT)


FAMILY = family(HUBERT)
