"""The package layout holds: no import cycle between zoo's modules, and no module imports from a
layer above its own. Read from the import statements (ast), lazy imports inside functions included;
the cycle check leaves out those under ``if TYPE_CHECKING:`` (annotations only, never run), the
layer check counts them too (a type-only import still says which layer knows which).

The layers, lowest first (:data:`LAYERS`), as the code is:

- the floor: what reads and writes files and the terminal, importing nothing of the zoo above it:
  the config folder (``zoo.config``), files written whole (``zoo.files``) and caches checked by their
  content (``zoo.data.cache``), what a file may name (``zoo.registry``), the one checkpoint
  reader (``zoo.checkpoint``), paths an untrusted file names (``zoo.convert.paths``), the tokenizers
  whose state a checkpoint holds (``zoo.data.tokenizers``: the reader rebuilds them to check them),
  progress on a terminal (``zoo.terminal``) and the pictures a run leaves (``zoo.plots``);
- ``zoo.nn``, the pieces: Block, attention, masks, embedders, heads, FLOP counting, LoRA;
- ``zoo.models``, the containers built from the pieces, their sizes, presets and decoding;
- the readers, ``zoo.data`` (datasets) and ``zoo.convert`` (other libraries' folders): one layer,
  as each reads the other's settings (the T5 converter checks a tokenizer for the data's sentinels,
  Whisper's and the export read the data's audio and pixel settings; a data module takes its
  tokenizer from the source that ``zoo.convert.hub`` resolves, ``hf:``); the cycle check keeps
  their modules apart;
- ``zoo.objectives``, the Lightning modules, built on a network, its data's batches and readers,
  and how a checkpoint rebuilds one (``zoo.objectives.loading``);
- ``zoo.inference``, what runs a checkpoint's objective (answering, detecting);
- ``zoo.viz``, pictures of a checkpoint or a config (attention maps, which run the inference; the
  boxes a detector found; mask pictures);
- ``zoo.train``, the run train.py does (it builds an objective and checks a resume against it);
- ``zoo.cli``, the commands, on top of everything.

A new module belongs to its package's layer; a new top-level module, or a package, is placed here
(:func:`test_every_zoo_module_has_a_layer`). An import that must go up is listed, with why, in
:data:`UPWARD_EXCEPTIONS`; an entry whose import is gone fails, so that the list only shrinks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

# Lowest first: a module imports from its own layer and the layers below, never from one above.
# An entry is a package (its modules, unless a longer entry names one) or one module.
LAYERS: dict[str, tuple[str, ...]] = {
    "floor": ("zoo", "zoo.config", "zoo.files", "zoo.data.cache", "zoo.registry", "zoo.checkpoint", "zoo.convert.paths", "zoo.data.tokenizers",
              "zoo.terminal", "zoo.plots"),
    "nn": ("zoo.nn",),
    "models": ("zoo.models",),
    "readers": ("zoo.data", "zoo.convert"),
    "objectives": ("zoo.objectives",),
    "inference": ("zoo.inference",),
    "viz": ("zoo.viz",),
    "train": ("zoo.train",),
    "cli": ("zoo.cli", "zoo.__main__"),
}

# (importer, imported): the imports that go up, each with why. The one left is in zoo/convert, which
# issue 30's first item reorganises (one module per family); where export's engine lives is decided there.
UPWARD_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset({
    # `zoo export` reads a zoo checkpoint into its objective (to write it in another library's
    # format); its engine lives with the converters whose mappings it inverts.
    ("zoo.convert.export", "zoo.objectives.loading"),
})


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """{dotted name: file} for every module of the zoo package under ``root``."""
    return {module_name(p, root): p for p in sorted((root / "zoo").rglob("*.py"))}


def imported(path: Path, known: dict[str, Path], typing: bool = False) -> set[str]:
    """The zoo modules ``path`` imports (``from zoo.x import y`` counts as zoo.x.y when that is a
    module, else as zoo.x), anywhere in the file; under ``if TYPE_CHECKING:`` only if ``typing``."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "zoo"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "zoo":
            found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                      for a in node.names}
    return found


def import_graph(root: Path = ROOT, typing: bool = False) -> dict[str, set[str]]:
    """{module: the zoo modules it imports} (those under ``if TYPE_CHECKING:`` too if ``typing``)."""
    known = modules(root)
    return {name: imported(path, known, typing) - {name} for name, path in known.items()}


def layer_of(name: str, layers: dict[str, tuple[str, ...]] = LAYERS) -> int | None:
    """The place in ``layers`` (0: the lowest) of the longest entry that is ``name`` or a package
    above it (the top package ``zoo`` is an entry for its ``__init__`` only); None when none is."""
    found = [(len(entry), i) for i, group in enumerate(layers.values()) for entry in group
             if name == entry or (entry != "zoo" and name.startswith(entry + "."))]
    return max(found)[1] if found else None


def upward(graph: dict[str, set[str]], layers: dict[str, tuple[str, ...]] = LAYERS) -> list[tuple[str, str]]:
    """Every (importer, imported) of ``graph`` whose imported module is in a higher layer, sorted."""
    unplaced = sorted(name for name in graph if layer_of(name, layers) is None)
    if unplaced:
        raise ValueError(f"modules in no layer: {unplaced}; place them in LAYERS")
    return sorted((name, other) for name, imports in graph.items() for other in imports
                  if layer_of(other, layers) > layer_of(name, layers))


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


def test_every_zoo_module_has_a_layer():
    assert [name for name in modules() if layer_of(name) is None] == [], "modules in no layer: place them in LAYERS"


def test_no_zoo_module_imports_from_a_layer_above_its_own():
    """Lazy and type-only imports included; the exceptions are listed, and each is still needed."""
    graph = import_graph(typing=True)
    found = upward(graph)
    names = list(LAYERS)
    unlisted = [f"{a} (in {names[layer_of(a)]}) imports {b} (in {names[layer_of(b)]})"
                for a, b in found if (a, b) not in UPWARD_EXCEPTIONS]
    assert unlisted == [], "imports that go up a layer:\n" + "\n".join(unlisted)
    assert sorted(UPWARD_EXCEPTIONS - set(found)) == [], "listed exceptions whose upward import is gone"


def test_the_layer_checker_finds_lazy_and_type_only_upward_imports(tmp_path):
    (tmp_path / "zoo" / "low").mkdir(parents=True)
    (tmp_path / "zoo" / "high").mkdir()
    for init in ("zoo", "zoo/low", "zoo/high"):
        (tmp_path / init / "__init__.py").write_text("")
    (tmp_path / "zoo" / "low" / "lazy.py").write_text("def f():\n    from zoo.high.top import g\n")
    (tmp_path / "zoo" / "low" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from zoo.high import top\n")
    (tmp_path / "zoo" / "low" / "base.py").write_text("import zoo.low.lazy\n")
    (tmp_path / "zoo" / "high" / "top.py").write_text("from zoo.low.base import x\ndef g(): ...\n")
    (tmp_path / "zoo" / "floor.py").write_text("")
    layers = {"floor": ("zoo", "zoo.floor", "zoo.low.base"), "low": ("zoo.low",), "high": ("zoo.high",)}
    graph = import_graph(tmp_path, typing=True)
    assert layer_of("zoo.low.base", layers) == 0 and layer_of("zoo.low.lazy", layers) == 1
    assert layer_of("zoo.other", layers) is None  # "zoo" names the top package's __init__ only
    assert upward(graph, layers) == [("zoo.low.base", "zoo.low.lazy"), ("zoo.low.lazy", "zoo.high.top"),
                                     ("zoo.low.typed", "zoo.high.top")]
    assert upward(import_graph(tmp_path), layers) == [("zoo.low.base", "zoo.low.lazy"),
                                                      ("zoo.low.lazy", "zoo.high.top")]


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


def private_imports(root: Path = ROOT) -> list[str]:
    """``module: from zoo.x import _name`` for every zoo module that takes a name another module
    keeps to itself (a leading underscore): a helper two modules share is public, in the lower of
    them or a common one, so that changing it inside its module breaks nothing unseen."""
    found = []
    for name, path in modules(root).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "zoo":
                found += [f"{name}: from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_zoo_module_takes_another_modules_private_helper():
    assert private_imports() == []


def test_the_private_import_checker_finds_one(tmp_path):
    (tmp_path / "zoo" / "convert").mkdir(parents=True)
    (tmp_path / "zoo" / "__init__.py").write_text("")
    (tmp_path / "zoo" / "convert" / "vivit.py").write_text("def _square(x):\n    return x\n")
    (tmp_path / "zoo" / "convert" / "yolos.py").write_text("from __future__ import annotations\n"
                                                         "from zoo.convert.vivit import _square\n")
    assert private_imports(tmp_path) == ["zoo.convert.yolos: from zoo.convert.vivit import _square"]
