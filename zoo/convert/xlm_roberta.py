"""Hugging Face XLM-R (``XLMRobertaForMaskedLM``) <-> zoo ``model=roberta``: RoBERTa's model and
converter (:mod:`zoo.convert.roberta`, which reads both ``model_type`` values), declared under XLM-R's
class names so that a run with ``model.converter=zoo.convert.xlm_roberta.pretrained`` is exported as an
XLM-R checkpoint. (XLM-R base is RoBERTa-base's shape, ``model=roberta_base``, over its tokenizer's
250,002 ids: the vocabulary comes from the data, so it is no preset of its own.)"""

from __future__ import annotations

from dataclasses import replace

from zoo.convert import roberta
from zoo.convert.roberta import from_transformers, pretrained  # noqa: F401 (model.converter: this module's hook)

FAMILY = replace(roberta.FAMILY, hf_class="XLMRobertaForMaskedLM", config_class="XLMRobertaConfig")
