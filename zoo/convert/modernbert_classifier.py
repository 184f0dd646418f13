"""Hugging Face ``ModernBertForSequenceClassification`` <-> a zoo ModernBERT under ``task=classify``:
the export's side (``FAMILY``). The import is :func:`zoo.convert.modernbert.pretrained`'s; ``zoo
export`` writes this class for a ModernBERT whose head is a classifier (``Family.classifier``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from zoo.convert import modernbert
from zoo.convert.modernbert import pretrained  # noqa: F401  (the model.converter hook every family module has)

# the MLM head's classifier_bias is the classifier head's dense bias; the pooling and the dropout are its own
KEYS = modernbert.FAMILY.keys | {"classifier_bias": "head.pooler_bias", "classifier_pooling": "head.pool",
                                 "classifier_dropout": "head.dropout", "num_labels": "head.num_classes"}


def shape(config: dict[str, Any], net: dict[str, Any]) -> dict[str, Any]:
    labels = config.get("num_labels") or len(config["id2label"])  # a saved config.json keeps id2label only
    return modernbert.classifier_shape(config) | {"head.num_classes": labels}


FAMILY = replace(modernbert.FAMILY, hf_class="ModernBertForSequenceClassification", keys=KEYS, shape=shape,
                 state_dict=lambda sd, net: modernbert.classifier_state_dict(sd, net["n_layers"],
                                                                             net["head"]["num_classes"]),
                 marks_checkpoints=False, classifier=None)
