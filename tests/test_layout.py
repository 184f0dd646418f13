"""The package layout holds: no import cycle between zoo's modules, and zoo/nn (the pieces)
imports nothing of the layers built on it. Read from the import statements (ast), lazy imports
inside functions included, those under ``if TYPE_CHECKING:`` (annotations only) left out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

ABOVE_NN = ("zoo.models", "zoo.train", "zoo.cli", "zoo.viz", "zoo.objectives")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """{dotted name: file} for every module of the zoo package under ``root``."""
    return {module_name(p, root): p for p in sorted((root / "zoo").rglob("*.py"))}


def imported(path: Path, known: dict[str, Path]) -> set[str]:
    """The zoo modules ``path`` imports (``from zoo.x import y`` counts as zoo.x.y when that is a
    module, else as zoo.x), anywhere in the file but under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "zoo"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "zoo":
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                      for a in node.names}
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imported(path, known) - {name} for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles_in_zoo():
    graph = import_graph()
    assert "zoo.cli.commands" in graph and "zoo.nn.block" in graph["zoo.nn.attention"] | graph["zoo.models.model"]
    assert cycles(graph) == []


def test_the_cycle_checker_finds_a_lazy_cycle_and_skips_type_checking_imports(tmp_path):
    (tmp_path / "zoo" / "a").mkdir(parents=True)
    (tmp_path / "zoo" / "__init__.py").write_text("")
    (tmp_path / "zoo" / "a" / "__init__.py").write_text("")
    (tmp_path / "zoo" / "a" / "x.py").write_text("from zoo.a import y\n")
    (tmp_path / "zoo" / "a" / "y.py").write_text("def f():\n    from zoo.a.z import g\n")
    (tmp_path / "zoo" / "a" / "z.py").write_text("import zoo.a.x\n")
    (tmp_path / "zoo" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zoo.a.x import X\n")
    graph = import_graph(tmp_path)
    assert graph["zoo.b"] == set() and graph["zoo.a.y"] == {"zoo.a.z"}
    assert cycles(graph) == [["zoo.a.x", "zoo.a.y", "zoo.a.z"]]


@pytest.mark.parametrize("name", sorted(n for n in modules() if n.startswith("zoo.nn")))
def test_zoo_nn_imports_nothing_above_it(name):
    above = sorted(m for m in imported(modules()[name], modules()) if m.startswith(ABOVE_NN))
    assert above == [], f"{name} imports {above}: zoo/nn is the bottom layer"


@pytest.mark.parametrize("script", sorted((ROOT / "benchmarks").glob("*.py")), ids=lambda p: p.name)
def test_benchmark_scripts_import_only_names_the_zoo_has(script):
    """The benchmarks run in their own environment, outside the test suite: a name they import
    from zoo that a change renamed would only show when someone runs them. Checked here by ast
    (the scripts themselves import peer libraries the test environment may lack)."""
    import importlib

    missing = []
    for node in ast.walk(ast.parse(script.read_text(), str(script))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "zoo":
            module = importlib.import_module(node.module)
            missing += [f"{node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)]
    assert not missing, f"{script.name} imports what zoo no longer has: {missing}"
