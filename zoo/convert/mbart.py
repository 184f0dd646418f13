"""Hugging Face mBART (``MBartForConditionalGeneration``) -> zoo mBART (conf/model/mbart.yaml) and
back: BART's mapping (:mod:`zoo.convert.bart`) with pre-LN Blocks and a final norm per tower."""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from zoo.convert import bart
from zoo.convert.bart import family, read_folder

MODEL_TYPES = ("mbart",)  # the config.json model_type values this converter reads
FAMILY = family("MBartForConditionalGeneration", "MBartConfig", prenorm=True)
from_transformers = partial(bart.from_transformers, model="mbart")  # a zoo mBART of one in memory


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: a Hugging Face mBART folder (see :func:`zoo.convert.bart.read_folder`)."""
    return read_folder(net_cfg, path, MODEL_TYPES, prenorm=True)
