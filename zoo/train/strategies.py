"""Distributed strategies that need Python objects a YAML file cannot name directly."""

from __future__ import annotations

from lightning.pytorch.strategies import FSDPStrategy

from zoo.nn.block import Block


def fsdp(activation_checkpointing: bool = False, sharding_strategy: str = "FULL_SHARD") -> FSDPStrategy:
    """Lightning's FSDP with every Block wrapped as its own unit (the natural shard of a
    Transformer), optional activation checkpointing per Block, and full (unsharded)
    state-dict checkpoints that load anywhere."""
    return FSDPStrategy(
        auto_wrap_policy={Block},
        activation_checkpointing_policy={Block} if activation_checkpointing else None,
        sharding_strategy=sharding_strategy,
        state_dict_type="full",
    )
