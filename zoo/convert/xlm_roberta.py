"""Hugging Face XLM-R (``XLMRobertaForMaskedLM``) <-> zoo ``model=xlm_roberta_base``: RoBERTa's model
and converter (:mod:`zoo.convert.roberta`, which reads both ``model_type`` values), declared under
XLM-R's class names so that ``zoo export`` writes an XLM-R checkpoint back as one."""

from __future__ import annotations

from dataclasses import replace

from zoo.convert import roberta
from zoo.convert.roberta import from_transformers, pretrained  # noqa: F401 (model.converter: this module's hook)

FAMILY = replace(roberta.FAMILY, hf_class="XLMRobertaForMaskedLM", config_class="XLMRobertaConfig")
