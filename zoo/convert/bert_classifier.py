"""Hugging Face ``BertForSequenceClassification`` <-> a zoo BERT under ``task=classify``: the export's
side (``FAMILY``). The import is :func:`zoo.convert.bert.pretrained`'s (a checkpoint's ``model.converter``
stays ``zoo.convert.bert.pretrained``: one family, two heads); ``zoo export`` writes this class for a
BERT whose head is a classifier (``Family.classifier`` of :data:`zoo.convert.bert.FAMILY`)."""

from __future__ import annotations

from zoo.convert import bert
from zoo.convert.bert import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = bert.classifier_family(bert.FAMILY, "BertForSequenceClassification", bert.BERT_CLASSIFIER, bert.bert_shape,
                                bert.bert_state_dict)
