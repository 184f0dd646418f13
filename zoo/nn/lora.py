"""LoRA (Hu et al. 2021) through ``peft``: low-rank adapters on the Block's own linear layers,
the rest of the network frozen.

``model.lora={r: 8, alpha: 16, dropout: 0.0, targets: [q, v]}`` names the layers by their name
in the Block: ``q``, ``k``, ``v``, ``out`` (self- and cross-attention), ``gate``, ``fc_in``,
``fc_out`` (the feed-forward). peft's adapters are injected in place
(``peft.inject_adapter_in_model``), so the network keeps its type and its forward; the adapter
weights are ordinary parameters of it, saved in the checkpoint and restored on resume (the
objective rebuilds the same adapters from ``lora`` before loading). :func:`merge` folds them into
the base weights for export; :func:`unload` takes them out, for an adapter folder of their own
(:mod:`zoo.convert.adapters`).
"""

from __future__ import annotations

import re
from typing import Any

from torch import Tensor, nn

# The Block's linear layers, by the name each has in its parent (zoo.nn.attention, zoo.nn.feedforward).
TARGETS = {"q": "attn", "k": "attn", "v": "attn", "out": "attn", "gate": "ffn", "fc_in": "ffn", "fc_out": "ffn"}


def _pattern(targets: list[str]) -> str:
    """A regex over module names matching the targets inside Blocks only (a head's ``out`` is not one)."""
    attn = [t for t in targets if TARGETS[t] == "attn"]
    ffn = [t for t in targets if TARGETS[t] == "ffn"]
    parts = ([rf"(cross_)?attn\.({'|'.join(attn)})"] if attn else []) + ([rf"ffn\.({'|'.join(ffn)})"] if ffn else [])
    return rf"(.*\.)?blocks\.\d+\.({'|'.join(parts)})"


def apply(net: nn.Module, r: int = 8, alpha: float = 16, dropout: float = 0.0, targets: list[str] = ("q", "v"),
          ) -> nn.Module:
    """Inject LoRA adapters of rank ``r`` (scaled ``alpha / r``) into ``net``'s ``targets`` and
    freeze everything else. Returns ``net`` (changed in place)."""
    from peft import LoraConfig, inject_adapter_in_model

    targets = list(targets)
    unknown = sorted(set(targets) - set(TARGETS))
    if not targets or unknown:
        raise ValueError(f"model.lora.targets={targets}: {unknown or 'none given'}; LoRA targets the Block's "
                         f"linear layers: {sorted(TARGETS)}")
    pattern = _pattern(targets)
    matched = [name for name, m in net.named_modules() if isinstance(m, nn.Linear) and re.fullmatch(pattern, name)]
    missing = [t for t in targets if not any(name.endswith(f".{t}") for name in matched)]
    if missing:
        present = sorted({name.rsplit(".", 1)[-1] for name, m in net.named_modules()
                          if isinstance(m, nn.Linear) and ".blocks." in f".{name}"} & set(TARGETS))
        raise ValueError(f"model.lora.targets {missing} match no layer of this network (it has {present})")
    inject_adapter_in_model(LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=pattern), net)
    for name, param in net.named_parameters():
        param.requires_grad = "lora_" in name
    return net


def counts(net: nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    params = list(net.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def _unwrap(net: nn.Module, fold: bool) -> nn.Module:
    """Put the plain ``nn.Linear`` back in place of every adapted layer, its adapter folded into
    it first (``fold``) or dropped."""
    from peft.tuners.lora import LoraLayer

    for name, module in list(net.named_modules()):
        if isinstance(module, LoraLayer):
            if fold:
                module.merge()
            parent_name, _, child = name.rpartition(".")
            setattr(net.get_submodule(parent_name) if parent_name else net, child, module.get_base_layer())
    for param in net.parameters():
        param.requires_grad = True
    return net


def merge(net: nn.Module) -> nn.Module:
    """Fold every adapter into its base layer and put the plain ``nn.Linear`` back: the network
    then has its original structure and state-dict names, and computes what the adapted one did."""
    return _unwrap(net, fold=True)


def unload(net: nn.Module) -> tuple[nn.Module, dict[str, tuple[Tensor, Tensor, float]]]:
    """(``net`` with its base layers back and the adapters taken out, in place; the adapters:
    adapted layer's name -> (A (r, in), B (out, r), scaling), whose update of the layer's
    weight (out, in) is ``scaling * B @ A``)."""
    from peft.tuners.lora import LoraLayer

    adapters = {name: (m.lora_A["default"].weight.detach().clone(), m.lora_B["default"].weight.detach().clone(),
                       float(m.scaling["default"]))
                for name, m in net.named_modules() if isinstance(m, LoraLayer)}
    return _unwrap(net, fold=False), adapters


def settings(lora: Any) -> dict[str, Any] | None:
    """``model.lora`` as plain keyword arguments of :func:`apply` (None: no LoRA)."""
    if lora is None:
        return None
    allowed = {"r", "alpha", "dropout", "targets"}
    lora = dict(lora)
    if set(lora) - allowed:
        raise ValueError(f"model.lora has unknown keys {sorted(set(lora) - allowed)}; it takes {sorted(allowed)}")
    return lora
