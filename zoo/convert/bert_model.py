"""Hugging Face ``BertModel`` <-> a zoo BERT under ``task=embed`` (its head ``torch.nn.Identity``): the
export's side (``FAMILY``), written inside a sentence-transformers folder. The import is
:func:`zoo.convert.bert.pretrained`'s (one family, three heads)."""

from __future__ import annotations

from zoo.convert import bert
from zoo.convert.bert import pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = bert.encoder_family(bert.FAMILY, "BertModel", bert.bert_shape, bert.bert_state_dict)
