"""Hugging Face ``Qwen2ForSequenceClassification`` <-> a zoo Qwen2 under ``task=classify`` (the
rightmost real token's vector -> ``score``, no bias): the export's side (``FAMILY``). The import is
:func:`zoo.convert.qwen2.pretrained`'s; ``zoo export`` writes this class for a Qwen2 whose head is a
classifier (``Family.classifier``)."""

from __future__ import annotations

from zoo.convert.qwen2 import QWEN2, pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = QWEN2.classifier_family()
