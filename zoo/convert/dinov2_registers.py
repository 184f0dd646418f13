"""The export of a zoo DINOv2 with register tokens to Hugging Face's
``Dinov2WithRegistersForImageClassification`` (``zoo export ... hf_class=`` names it; a zoo DINOv2's
checkpoints name :mod:`zoo.convert.dinov2`, which reads both kinds of folder)."""

from __future__ import annotations

# the model.init_from hook and the in-memory converter: dinov2's, which reads both kinds of folder
from zoo.convert.dinov2 import FAMILY as PLAIN, from_transformers, pretrained  # noqa: F401
from zoo.convert.dinov2 import WITH_REGISTERS as CONFIG_KEYS  # noqa: F401  (Dinov2Config's keys | the register count)
from zoo.convert.family import Family

FAMILY = Family(**{**PLAIN.__dict__, "hf_class": "Dinov2WithRegistersForImageClassification",
                   "config_class": "Dinov2WithRegistersConfig",
                   "keys": PLAIN.keys | {"num_register_tokens": "embedder.registers"}, "marks_checkpoints": False})
