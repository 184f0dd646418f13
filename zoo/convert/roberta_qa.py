"""Hugging Face ``RobertaForQuestionAnswering`` <-> a zoo RoBERTa under ``task=qa``: the export's side,
as :mod:`zoo.convert.bert_qa` is BERT's (the import is :func:`zoo.convert.roberta.pretrained`'s)."""

from __future__ import annotations

from zoo.convert import roberta
from zoo.convert.bert import question_answering_family
from zoo.convert.roberta import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = question_answering_family(roberta.FAMILY, "RobertaForQuestionAnswering", roberta.roberta_shape,
                                   roberta.roberta_state_dict)
