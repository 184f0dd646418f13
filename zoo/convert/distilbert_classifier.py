"""Hugging Face ``DistilBertForSequenceClassification`` <-> a zoo DistilBERT under ``task=classify``: the
export's side, as :mod:`zoo.convert.bert_classifier` is BERT's (the import is
:func:`zoo.convert.distilbert.pretrained`'s)."""

from __future__ import annotations

from zoo.convert import distilbert
from zoo.convert.bert import classifier_family
from zoo.convert.distilbert import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = classifier_family(distilbert.FAMILY, "DistilBertForSequenceClassification", distilbert.DISTILBERT_CLASSIFIER,
                           distilbert.distilbert_shape, distilbert.distilbert_state_dict)
