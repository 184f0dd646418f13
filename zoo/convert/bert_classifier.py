"""Hugging Face ``BertForSequenceClassification`` <-> a zoo BERT under ``task=classify``: the export's
side (``FAMILY``). The import is :func:`zoo.convert.bert.pretrained`'s (a checkpoint's ``model.converter``
stays ``zoo.convert.bert.pretrained``: one family, two heads); ``zoo export`` writes this class for a
BERT whose head is a classifier (``Family.classifier`` of :data:`zoo.convert.bert.FAMILY`)."""

from __future__ import annotations

from typing import Any

from zoo.convert.bert import ACTIVATIONS, DROPOUT_KEYS, KEYS, bert_shape, classifier_state_dict, without_head
from zoo.convert.bert import pretrained  # noqa: F401  (the model.converter hook every family module has)
from zoo.convert.family import Family, plain


def classifier_shape(config: dict[str, Any]) -> dict[str, Any]:
    """The zoo values a ``BertForSequenceClassification`` config sets: BERT's, less the MLM head's,
    and the classifier's width (``num_labels``)."""
    labels = config.get("num_labels") or len(config["id2label"])  # a saved config.json keeps id2label only
    return without_head(bert_shape(config)) | {"head.num_classes": labels}


FAMILY = Family(hf_class="BertForSequenceClassification", config_class="BertConfig",
                keys=plain(KEYS) | DROPOUT_KEYS | {"num_labels": "head.num_classes"},
                activations=ACTIVATIONS, activation_key="hidden_act",
                shape=lambda config, net: classifier_shape(config), state_dict=classifier_state_dict,
                marks_checkpoints=False)
