"""Hugging Face ``RobertaForTokenClassification`` <-> a zoo RoBERTa under ``task=tag``: the export's
side, as :mod:`zoo.convert.bert_tagger` is BERT's (the import is :func:`zoo.convert.roberta.pretrained`'s)."""

from __future__ import annotations

from zoo.convert import roberta
from zoo.convert.bert import TAGGER, classifier_family
from zoo.convert.roberta import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = classifier_family(roberta.FAMILY, "RobertaForTokenClassification", TAGGER, roberta.roberta_shape,
                           roberta.roberta_state_dict)
