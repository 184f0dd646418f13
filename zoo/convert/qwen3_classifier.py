"""Hugging Face ``Qwen3ForSequenceClassification`` <-> a zoo Qwen3 under ``task=classify`` (the
rightmost real token's vector -> ``score``, no bias): the export's side (``FAMILY``). The import is
:func:`zoo.convert.qwen3.pretrained`'s; ``zoo export`` writes this class for a Qwen3 whose head is a
classifier (``Family.classifier``)."""

from __future__ import annotations

from zoo.convert.qwen3 import QWEN3, pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = QWEN3.classifier_family()
