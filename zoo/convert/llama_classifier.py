"""Hugging Face ``LlamaForSequenceClassification`` <-> a zoo Llama under ``task=classify`` (the
rightmost real token's vector -> ``score``, no bias): the export's side (``FAMILY``). The import is
:func:`zoo.convert.llama.pretrained`'s; ``zoo export`` writes this class for a Llama whose head is a
classifier (``Family.classifier``)."""

from __future__ import annotations

from zoo.convert.llama import LLAMA, pretrained  # noqa: F401  (the model.converter hook every family module has)

FAMILY = LLAMA.classifier_family()
