"""Every family's export description, collected from the family modules themselves: each module
of ``zoo/convert`` that declares ``FAMILY`` (``zoo.registry.FAMILY_MODULES``, found by
:func:`zoo.registry.family_modules` without importing them). Nothing here names a family: adding
one is adding its module."""

from __future__ import annotations

import importlib
from functools import cache

from zoo.convert.family import Family
from zoo.registry import CONVERTER_HOOK, FAMILY_MODULES


@cache
def declared() -> dict[str, Family]:
    """Family module name (``zoo.convert.<name>``) -> its ``FAMILY``."""
    return {name: importlib.import_module(f"zoo.convert.{name}").FAMILY for name in FAMILY_MODULES}


def by_class() -> dict[str, Family]:
    """transformers class name -> its family (what ``zoo export`` writes); two modules declaring
    one class are refused, naming both (one would silently win)."""
    found: dict[str, str] = {}
    for name, family in declared().items():
        if found.setdefault(family.hf_class, name) != name:
            raise ValueError(f"zoo.convert.{found[family.hf_class]} and zoo.convert.{name} both declare "
                             f"FAMILY.hf_class={family.hf_class!r}: one module per transformers class")
    return {family.hf_class: family for family in declared().values()}


def by_converter() -> dict[str, str]:
    """``model.converter`` -> the transformers class a checkpoint naming it is exported to."""
    return {f"zoo.convert.{name}.{CONVERTER_HOOK}": family.hf_class for name, family in declared().items()
            if family.marks_checkpoints}
