"""Hugging Face ``BertForTokenClassification`` <-> a zoo BERT under ``task=tag``: the export's side, as
:mod:`zoo.convert.bert_classifier` is task=classify's (the import is :func:`zoo.convert.bert.pretrained`'s,
its token classifier read at :data:`zoo.convert.bert.TAGGER`); ``zoo export`` writes this class for a
BERT whose head classifies every token (``Family.tagger`` of :data:`zoo.convert.bert.FAMILY`)."""

from __future__ import annotations

from zoo.convert import bert
from zoo.convert.bert import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = bert.classifier_family(bert.FAMILY, "BertForTokenClassification", bert.TAGGER, bert.bert_shape,
                                bert.bert_state_dict)
