"""``python -m zoo diff A B``: what differs between two training configs, grouped as the families
differ (:data:`zoo.models.axes.GROUPS`: mask, embedder, head, Block knobs, positions, container,
and training for everything outside ``model.net``), with the two values side by side.

    python -m zoo diff gpt mistral                                  # two families
    python -m zoo diff gpt "gpt model.net.mask={_target_:zoo.nn.masks.LocalMask,window:16,causal:true}"

A side is a family name, or overrides of conf/train.yaml (a bare word in them is ``model=WORD``).
The grouping is :mod:`zoo.models.axes`'s one table; a study's one-axis check reads the same.
"""

from __future__ import annotations

import shlex
from typing import Any

from omegaconf import DictConfig, OmegaConf

from zoo.config import compose_config
from zoo.models.axes import GROUPS, config_axis, differences, flat

ABSENT = "(absent)"


def side_overrides(side: str | None) -> list[str]:
    """The overrides of conf/train.yaml a side of ``diff`` stands for: ``"mistral
    model.net.context=64"`` -> ``["model=mistral", "model.net.context=64"]``."""
    words = shlex.split(side) if isinstance(side, str) else []
    if not words:
        raise ValueError(f"a side of zoo diff is empty ({side!r}): give a family (gpt) or overrides of "
                         f"conf/train.yaml, quoted as one word: \"gpt model.net.n_layers=2\"")
    return [word if "=" in word or word.startswith("~") else f"model={word}" for word in words]


def compared(a: list[str], b: list[str]) -> dict[str, dict[str, tuple[Any, Any]]]:
    """{group: {key: (value in a, value in b)}} for the keys whose values differ between the training
    configs composed from the overrides ``a`` and ``b`` (unresolved, as written: ``${..block.d_model}``
    stays a reference); groups in :data:`GROUPS` order, groups with no difference left out."""
    fa, fb = flat(compose_config(a)), flat(compose_config(b))
    by_group = differences(fa, fb, config_axis)
    return {group: {key: (fa.get(key, ABSENT), fb.get(key, ABSENT)) for key in by_group[group]}
            for group in GROUPS if group in by_group}


def _shown(value: Any) -> str:
    """A leaf as one line: a list or dict (a PerLayer pattern) in YAML's flow style."""
    if isinstance(value, (list, dict)):
        return OmegaConf.to_yaml(OmegaConf.create({"v": value})).removeprefix("v:").strip().replace("\n", " ")
    return str(value)


def table(a_name: str, b_name: str, grouped: dict[str, dict[str, tuple[Any, Any]]]) -> str:
    """The differences as text: one block per group, key | a | b, aligned."""
    if not grouped:
        return f"{a_name} and {b_name}: no difference"
    rows = [(key, _shown(va), _shown(vb)) for keys in grouped.values() for key, (va, vb) in keys.items()]
    wk = max(len("key"), *(len(r[0]) for r in rows))
    wa = max(len(a_name), *(len(r[1]) for r in rows))
    lines = [f"  {'key':<{wk}}  {a_name:<{wa}}  {b_name}"]
    for group, keys in grouped.items():
        lines.append(group)
        lines += [f"  {key:<{wk}}  {_shown(va):<{wa}}  {_shown(vb)}" for key, (va, vb) in keys.items()]
    return "\n".join(lines)


def main(cfg: DictConfig) -> None:
    """``zoo diff A B`` (conf/diff.yaml): print the grouped differences of the two sides."""
    print(table(cfg.a, cfg.b, compared(side_overrides(cfg.a), side_overrides(cfg.b))))
