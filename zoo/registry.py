"""What a file may name: the zoo's objectives by stable short name, and the exact classes and
functions a config read from a checkpoint may instantiate or call.

A checkpoint is data from anyone. It names its objective by a short name looked up here (never
an import path taken from the file), and every ``_target_`` (and ``converter``) in the configs it
stores must be one of the dotted names below, checked before anything is built
(:func:`zoo.checkpoint.check_names`). Names are listed one by one, never whole modules: a module
such as ``zoo.data.download`` also holds functions that write files. A new module a config
targets is added here (tests/test_bad_input_checkpoints.py fails until it is). Converters are the
one exception: a family module of ``zoo/convert`` declares itself (:func:`family_modules`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import hydra

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
}

# Every class a stored network (or span corruption) config may instantiate: the zoo's own
# containers, Block config, embedders, heads, masks, positions and vision towers, and the one
# library class the configs use.
ALLOWED_TARGETS: frozenset[str] = frozenset({
    "zoo.models.model.Model",
    "zoo.models.encoder_decoder.EncoderDecoder",
    "zoo.models.two_tower.TwoTower",
    "zoo.nn.block.BlockConfig",
    "zoo.nn.embedders.TokenEmbedder",
    "zoo.nn.embedders.PatchEmbedder",
    "zoo.nn.embedders.TubeletEmbedder",
    "zoo.nn.embedders.AudioEmbedder",
    "zoo.nn.audio_conv.WaveEmbedder",
    "zoo.nn.detection.DetectionEmbedder",
    "zoo.nn.multimodal.MultimodalEmbedder",
    "zoo.nn.heads.LMHead",
    "zoo.nn.heads.MLMHead",
    "zoo.nn.heads.ClassifierHead",
    "zoo.nn.heads.DistilledHead",
    "zoo.nn.heads.CTCHead",
    "zoo.nn.heads.ProjectionHead",
    "zoo.nn.detection.DetectionHead",
    "zoo.nn.attention_pool.AttentionPoolHead",
    "zoo.nn.masks.NoMask",
    "zoo.nn.masks.CausalMask",
    "zoo.nn.masks.PrefixLMMask",
    "zoo.nn.masks.LocalMask",
    "zoo.nn.masks.GridWindowMask",
    "zoo.nn.masks.PerLayer",
    "zoo.nn.sparse.StridedMask",
    "zoo.nn.sparse.FixedMask",
    "zoo.nn.sparse.BigBirdMask",
    "zoo.nn.positions.LearnedPositions",
    "zoo.nn.positions.SinusoidalPositions",
    "zoo.nn.positions.RotaryEmbedding",
    "zoo.nn.relative_bias.RelativePositionBias",
    "zoo.nn.relative_bias.relative_biases",
    "zoo.models.staged.Staged",
    "zoo.nn.vision_towers.VisionTower",
    "zoo.nn.vision_towers.TimmVisionTower",
    "zoo.data.span_corruption.SpanCorruption",
    "torch.nn.Identity",
    "torch.nn.Linear",
})

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
