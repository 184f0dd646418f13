"""Hugging Face ``DistilBertModel`` <-> a zoo DistilBERT under ``task=embed``: the export's side
(``FAMILY``), as :mod:`zoo.convert.bert_model` for BERT. The import is :func:`zoo.convert.distilbert.pretrained`'s."""

from __future__ import annotations

from zoo.convert import distilbert
from zoo.convert.bert import encoder_family
from zoo.convert.distilbert import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = encoder_family(distilbert.FAMILY, "DistilBertModel", distilbert.distilbert_shape,
                        distilbert.distilbert_state_dict)
