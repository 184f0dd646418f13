"""Hugging Face ``DistilBertForQuestionAnswering`` <-> a zoo DistilBERT under ``task=qa``: the export's
side, as :mod:`zoo.convert.bert_qa` is BERT's (the import is :func:`zoo.convert.distilbert.pretrained`'s)."""

from __future__ import annotations

from zoo.convert import distilbert
from zoo.convert.bert import question_answering_family
from zoo.convert.distilbert import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = question_answering_family(distilbert.FAMILY, "DistilBertForQuestionAnswering", distilbert.distilbert_shape,
                                   distilbert.distilbert_state_dict)
