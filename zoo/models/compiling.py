"""``compile=true``: ``torch.compile`` of a network, set up once for every family.

Dynamo is allowed to trace operators whose output shape depends on the data, instead of stopping
the graph there: a mixture-of-experts layer gathers each expert's tokens with ``torch.where``
(zoo/nn/moe.py, as transformers does), which would otherwise break the graph at every expert of
every layer (Mixtral's preset: 7 breaks, 8 graphs). The setting is dynamo's, for the whole
process: dynamo reads it when it traces, at a compiled network's first call, not at
``torch.compile``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

DYNAMO_SETTINGS = {"capture_dynamic_output_shape_ops": True}


def configure_dynamo() -> None:
    """Apply :data:`DYNAMO_SETTINGS` to this process's dynamo."""
    for name, value in DYNAMO_SETTINGS.items():
        setattr(torch._dynamo.config, name, value)


def compile_net(net: nn.Module, backend: str | Callable = "inductor") -> nn.Module:
    """``torch.compile(net, backend=backend)`` under :data:`DYNAMO_SETTINGS`."""
    configure_dynamo()
    return torch.compile(net, backend=backend)


def compile_step(step: Callable, device: torch.device) -> Callable:
    """``step`` compiled into one graph (``fullgraph=True``: a break would bring back the Python
    per layer that compiling removes) of static shapes (``dynamic=False``: another model or batch
    size gets a graph of its own, not a symbolic one); on CUDA with ``mode="reduce-overhead"`` (CUDA
    graphs: the step's launches replayed at once), which has no meaning on the CPU."""
    configure_dynamo()
    mode = "reduce-overhead" if torch.device(device).type == "cuda" else None
    return torch.compile(step, fullgraph=True, dynamic=False, mode=mode)
