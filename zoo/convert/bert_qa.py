"""Hugging Face ``BertForQuestionAnswering`` <-> a zoo BERT under ``task=qa``: the export's side
(``FAMILY``). The import is :func:`zoo.convert.bert.pretrained`'s (a checkpoint's ``model.converter``
stays ``zoo.convert.bert.pretrained``: one family, several heads); ``zoo export`` writes this class for
a BERT whose head is a span head (``Family.question_answering`` of :data:`zoo.convert.bert.FAMILY`)."""

from __future__ import annotations

from zoo.convert import bert
from zoo.convert.bert import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = bert.question_answering_family(bert.FAMILY, "BertForQuestionAnswering", bert.bert_shape,
                                        bert.bert_state_dict, token_types=True)
