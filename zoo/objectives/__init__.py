"""Lightning modules, one per training objective (not per model)."""

from zoo.objectives.lm import NextTokenLM

__all__ = ["NextTokenLM"]
