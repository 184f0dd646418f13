"""What a file may name: the zoo's objectives by stable short name, and the exact classes and
functions a config read from a checkpoint may instantiate or call.

A checkpoint is data from anyone. It names its objective by a short name looked up here (never
an import path taken from the file), and every ``_target_`` (and ``converter``) in the configs it
stores must be one of the dotted names below, checked before anything is built
(:func:`zoo.checkpoint.check_names`). Names are allowed one by one, never whole modules: a module
such as ``zoo.data.download`` also holds functions that write files. The classes are those the
shipped configs name (:func:`config_targets`, read from conf/), so a config that names a new one
(a study's ALiBi) allows it, and nothing else does. Converters likewise: a family module of
``zoo/convert`` declares itself (:func:`family_modules`)"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hydra
import yaml

from zoo.config import CONF_DIR

YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it

# Short name -> the class. The short names are what checkpoints store: they stay the same when
# the modules move (update the paths here, never the names).
OBJECTIVES: dict[str, str] = {
    "lm": "zoo.objectives.lm.NextTokenLM",
    "mlm": "zoo.objectives.mlm.MaskedLM",
    "seq2seq": "zoo.objectives.seq2seq.Seq2Seq",
    "denoising": "zoo.objectives.denoising.Denoising",
    "asr": "zoo.objectives.asr.SpeechRecognition",
    "classification": "zoo.objectives.classification.Classification",
    "video_classification": "zoo.objectives.classification.VideoClassification",
    "vlm": "zoo.objectives.vlm.VisionLanguageLM",
    "detection": "zoo.objectives.detection.Detection",
    "distillation": "zoo.objectives.distillation.Distillation",
    "ctc": "zoo.objectives.ctc.CTCRecognition",
    "contrastive": "zoo.objectives.contrastive.Contrastive",
    "embedding": "zoo.objectives.embedding.Embedding",
    "qa": "zoo.objectives.qa.QuestionAnswering",
    "tagging": "zoo.objectives.tagging.Tagging",
}

# What checkpoints written before the short names stored: the class's dotted path at the time.
# Literal on purpose: these must keep reading after the modules move.
FORMER_NAMES: dict[str, str] = {
    "zoo.objectives.lm.NextTokenLM": "lm",
    "zoo.objectives.mlm.MaskedLM": "mlm",
    "zoo.objectives.seq2seq.Seq2Seq": "seq2seq",
    "zoo.objectives.asr.SpeechRecognition": "asr",
    "zoo.objectives.classification.Classification": "classification",
    "zoo.objectives.vlm.VisionLanguageLM": "vlm",
    "zoo.objectives.detection.Detection": "detection",  # newer than the short names: listed for the set's completeness
    "zoo.objectives.classification.VideoClassification": "video_classification",  # newer too, likewise
    "zoo.objectives.denoising.Denoising": "denoising",  # newer too, likewise
    "zoo.objectives.distillation.Distillation": "distillation",  # likewise
    "zoo.objectives.ctc.CTCRecognition": "ctc",  # likewise
    "zoo.objectives.contrastive.Contrastive": "contrastive",  # likewise
    "zoo.objectives.embedding.Embedding": "embedding",  # likewise
    "zoo.objectives.qa.QuestionAnswering": "qa",  # likewise
    "zoo.objectives.tagging.Tagging": "tagging",  # likewise
}

# Classes that checkpoints already written may name though no shipped config names them: CLIP's
# projection head was a torch.nn.Linear (2026-12-04/05); FixedMask (by a mask override) and the
# position classes were allowed while this list was kept by hand. Literal on purpose, as
# FORMER_NAMES: history, never extended (a class a config names is allowed by that alone).
STORED_TARGETS: frozenset[str] = frozenset({
    "torch.nn.Linear",
    "zoo.nn.sparse.FixedMask",
    "zoo.nn.positions.LearnedPositions",
    "zoo.nn.positions.SinusoidalPositions",
    "zoo.nn.positions.RotaryEmbedding",
})

MODEL_GROUP = "model"  # the config group an objective's arguments (what its checkpoints store) come from
# An override of a key under ``model`` held as a string (a study's base and values), and a class it names.
MODEL_OVERRIDE = re.compile(r"(?:~|\+{1,2})?model\.[\w.]+=(.*)", re.S)
TARGET_IN_OVERRIDE = re.compile(r"_target_\s*:\s*([\w.]+)")


def _strings(node: Any) -> Iterator[str]:
    """Every string in a parsed config, at any depth."""
    if isinstance(node, dict):
        node = list(node.values())
    if isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


def _targets(node: Any) -> Iterator[str]:
    """Every ``_target_`` in a parsed config, at any depth."""
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            yield node["_target_"]
        node = list(node.values())
    if isinstance(node, list):
        for value in node:
            yield from _targets(value)


def _in_model(cfg: Any) -> Iterator[str]:
    """The ``_target_``s a config outside the model's groups puts under ``model``: in its ``model:``
    node (an experiment's) and in each override of ``model.*`` it holds (a study's)."""
    if isinstance(cfg, dict):
        yield from _targets(cfg.get(MODEL_GROUP))
    for text in _strings(cfg):
        if override := MODEL_OVERRIDE.fullmatch(text):
            yield from TARGET_IN_OVERRIDE.findall(override.group(1))


def _groups(configs: dict[Path, Any]) -> set[str]:
    """The model's config group and every group its files pull in through their defaults lists
    (``- /block@net.block: llama``, ``- override /vision@net.embedder.vision: timm``), transitively."""
    found, todo = set(), [MODEL_GROUP]
    while todo:
        group = todo.pop()
        if group in found:
            continue
        found.add(group)
        for path, cfg in configs.items():
            if path.parent.as_posix() != group or not isinstance(cfg, dict):
                continue
            for entry in cfg.get("defaults") or []:
                for key in entry if isinstance(entry, dict) else ():
                    name = key.split()[-1].split("@")[0]  # "override /vision@net.embedder.vision" -> /vision
                    todo.append(name[1:] if name.startswith("/") else f"{group}/{name}")
    return found


def config_targets(conf: Path = CONF_DIR) -> frozenset[str]:
    """Every class the shipped configs under ``conf`` can put into a model's config, which is what
    a checkpoint stores and builds: the ``_target_``s of the model presets and of the groups they
    compose from (Blocks, vision towers and heads), of the experiments' ``model:`` nodes and of the
    studies' overrides of ``model.*``. Read from the YAML files (~40 ms, once per process), nothing composed or imported.
    The objectives are left out: a checkpoint names its own by short name (:data:`OBJECTIVES`), and
    one is never built from a stored ``_target_``; so are the trainers, loggers, callbacks and data
    modules, which no checkpoint stores."""
    configs = {path.relative_to(conf): yaml.load(path.read_text(), Loader=YAML_LOADER)
               for path in sorted(conf.rglob("*.yaml"))}
    groups = _groups(configs)
    found = set()
    for path, cfg in configs.items():
        found.update(_targets(cfg) if path.parent.as_posix() in groups else _in_model(cfg))
    return frozenset(found - set(OBJECTIVES.values()))


# Every class or function a stored network (or span corruption) config may instantiate: what the
# shipped configs name, and what checkpoints written before may hold.
ALLOWED_TARGETS: frozenset[str] = config_targets() | STORED_TARGETS

# What checkpoints written before zoo/ was grouped into packages store as ``_target_``: the
# class's dotted path at the time -> where it lives now. Literal on purpose, as FORMER_NAMES.
FORMER_TARGETS: dict[str, str] = {
    "zoo.model.Model": "zoo.models.model.Model",
    "zoo.encoder_decoder.EncoderDecoder": "zoo.models.encoder_decoder.EncoderDecoder",
}

CONVERT_DIR = Path(__file__).parent / "convert"  # the zoo's own converter package
CONVERTER_HOOK = "pretrained"  # the ``model.init_from`` function of each family module


def family_modules(folder: Path = CONVERT_DIR) -> tuple[str, ...]:
    """The names of the family modules in ``folder`` (``zoo/convert``): those that assign
    ``FAMILY`` at their top level (:mod:`zoo.convert.family`), read from their source (ast),
    never imported: what a checkpoint may name is known before any name it holds is imported."""
    found = []
    for file in sorted(folder.glob("*.py")):
        body = ast.parse(file.read_text(), str(file)).body
        targets = [t for node in body if isinstance(node, (ast.Assign, ast.AnnAssign))
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]
        if any(isinstance(t, ast.Name) and t.id == "FAMILY" for t in targets):
            found.append(file.stem)
    return tuple(found)


# Every function a stored ``converter`` may name (``model.init_from=DIR`` reads the directory with
# it): each family module's hook, ``zoo.convert.<family>.pretrained``, as checkpoints have always stored it.
FAMILY_MODULES: tuple[str, ...] = family_modules()  # read once per process
ALLOWED_CONVERTERS: frozenset[str] = frozenset(f"zoo.convert.{name}.{CONVERTER_HOOK}" for name in FAMILY_MODULES)


def objective_name(stored: object) -> str:
    """The registry's short name for what a checkpoint stores as its objective (a short name, or
    a former dotted path); anything else is refused, naming the value and the known names."""
    if isinstance(stored, str) and stored in OBJECTIVES:
        return stored
    if isinstance(stored, str) and stored in FORMER_NAMES:
        return FORMER_NAMES[stored]
    raise ValueError(f"unknown objective {stored!r}: a zoo checkpoint names one of {sorted(OBJECTIVES)} "
                     f"(or, written before the short names, one of {sorted(FORMER_NAMES)})")


def objective_class(name: str) -> type:
    """The objective class registered under ``name`` (a short name from :func:`objective_name`)."""
    return hydra.utils.get_class(OBJECTIVES[name])


def name_of(cls: type) -> str:
    """The short name an objective class is registered under (what its checkpoints store)."""
    path = f"{cls.__module__}.{cls.__qualname__}"
    for name, registered in OBJECTIVES.items():
        if registered == path:
            return name
    raise ValueError(f"objective {path} is not registered in zoo.registry.OBJECTIVES: give it a short name "
                     f"there so that its checkpoints can be read")
