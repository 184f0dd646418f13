"""No list a family must remember (issue 45): every family module of zoo/convert has mutants in
tools/mutant_list.py, one-line changes of its mapping that its tests must catch (``make mutants``
runs them). Cheap: the list is read, no mutant is run."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from mutant_list import EQUIVALENT, FAMILY_TESTS, MUTANTS  # noqa: E402
from mutants import check  # noqa: E402
from zoo.registry import FAMILY_MODULES  # noqa: E402

PER_FAMILY = 2  # the mutants of its mapping (a file of zoo/convert) each family's tests must catch


def mapping_mutants(mutants: list[dict], family: str) -> list[str]:
    """The mutants of ``family``: changes to a mapping (a file of zoo/convert) whose tests are its own."""
    return [m["name"] for m in mutants if family in m.get("families", ()) and m["file"].startswith("zoo/convert/")]


def test_the_families_are_found():
    assert {"gpt2", "llama", "beit", "swin", "siglip", "xlm_roberta"} <= set(FAMILY_MODULES)


@pytest.mark.parametrize("family", FAMILY_MODULES)
def test_each_family_has_mutants_of_its_mapping(family):
    assert family in FAMILY_TESTS, f"tools/mutant_list.py: FAMILY_TESTS has no tests for the family {family}"
    found = mapping_mutants(MUTANTS, family)
    assert len(found) >= PER_FAMILY, (f"tools/mutant_list.py: the family {family} has {len(found)} mutants of its "
                                      f"mapping {found}, it needs {PER_FAMILY}: add one-line changes of "
                                      f"zoo/convert/{family}.py its tests catch")


def test_a_family_without_mutants_is_found():
    """The check above would fail on a family added without its mutants."""
    assert mapping_mutants(MUTANTS, "a_new_family") == []
    assert mapping_mutants([{"name": "m", "file": "zoo/nn/masks.py", "families": ["llama"]}], "llama") == []


def test_every_mutant_applies_to_the_code_as_it_is():
    """Each original text occurs exactly once in its file, and each test file named exists (what
    ``tools/mutants.py`` refuses before it runs anything)."""
    check(MUTANTS)
    assert len({m["name"] for m in MUTANTS + EQUIVALENT}) == len(MUTANTS) + len(EQUIVALENT)
    assert all(family in FAMILY_TESTS for m in MUTANTS for family in m.get("families", ()))
