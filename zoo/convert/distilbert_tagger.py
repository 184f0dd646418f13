"""Hugging Face ``DistilBertForTokenClassification`` <-> a zoo DistilBERT under ``task=tag``: the export's
side, as :mod:`zoo.convert.bert_tagger` is BERT's (the import is :func:`zoo.convert.distilbert.pretrained`'s)."""

from __future__ import annotations

from zoo.convert import distilbert
from zoo.convert.bert import TAGGER, classifier_family
from zoo.convert.distilbert import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = classifier_family(distilbert.FAMILY, "DistilBertForTokenClassification", TAGGER,
                           distilbert.distilbert_shape, distilbert.distilbert_state_dict)
