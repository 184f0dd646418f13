"""Hugging Face ``RobertaModel`` <-> a zoo RoBERTa under ``task=embed``: the export's side (``FAMILY``),
as :mod:`zoo.convert.bert_model` for BERT. The import is :func:`zoo.convert.roberta.pretrained`'s."""

from __future__ import annotations

from zoo.convert import roberta
from zoo.convert.bert import encoder_family
from zoo.convert.roberta import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = encoder_family(roberta.FAMILY, "RobertaModel", roberta.roberta_shape, roberta.roberta_state_dict)
