"""LoRA adapters out: a zoo run's adapters (``model.lora``) as a ``peft`` adapter folder against its
exported base, ``PeftModel.from_pretrained(base, folder)`` computing what the zoo net did.

The adapters are named for the Hugging Face model's own modules, found where the export's probe
(:func:`zoo.convert.export.places`) puts each adapted zoo layer's weight: a layer the family keeps
whole (Llama's ``q_proj``) gets the adapter as it is; layers the family fuses into one (GPT-2's q,
k and v in ``c_attn``, a ``Conv1D`` that stores (in, out)) share one adapter on the fused module,
each zoo adapter a block of its rank, its B rows at the rows its layer holds there (q's first, v's
last: a q, v LoRA of rank r is a ``c_attn`` LoRA of rank 2r whose B is zero at k's rows).
"""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

Adapter = tuple[Tensor, Tensor, float]  # A (r, in), B (out, r), scaling: the update is scaling * B @ A


def _module_axes(module: nn.Module, rows: Tensor, cols: Tensor, name: str) -> tuple[Tensor, Tensor]:
    """(out, in) coordinates, in ``module``'s features, of weight elements at (rows, cols) of its
    weight: an ``nn.Linear`` stores (out, in), a ``transformers`` ``Conv1D`` (in, out)."""
    if isinstance(module, nn.Linear):
        return rows, cols
    if type(module).__name__ == "Conv1D":
        return cols, rows
    raise ValueError(f"{name} is a {type(module).__name__}: a LoRA adapter folder holds adapters of linear layers")


@torch.no_grad()
def hf_adapters(adapters: dict[str, Adapter], hf: nn.Module, target: dict[str, Tensor], offsets: list[int],
                where: dict[str, Tensor]) -> dict[str, Adapter]:
    """The zoo net's ``adapters`` (layer name -> adapter) as adapters of ``hf``'s modules (module
    name -> adapter), through the export's placement of each layer's weight (``target``,
    ``offsets``, ``where``: :func:`zoo.convert.export.places`)."""
    names = list(target)
    parts: dict[str, list[tuple[Tensor, Tensor, float]]] = {}
    for layer, (a, b, scaling) in adapters.items():
        index = where[f"{layer}.weight"].long()  # (out, in) flat indices into hf's weights
        j = bisect.bisect_right(offsets, int(index.min())) - 1
        weight = names[j]
        if int(index.max()) >= offsets[j + 1] or not weight.endswith(".weight"):
            raise ValueError(f"{layer}.weight is not read from one weight of the Hugging Face model: its adapter "
                             f"has no module there")
        module_name = weight.removesuffix(".weight")
        local = index - offsets[j]
        width = target[weight].shape[1]
        out, inp = _module_axes(hf.get_submodule(module_name), local // width, local % width, module_name)
        if not (torch.equal(out, out[:, :1].expand_as(out)) and torch.equal(inp, inp[:1].expand_as(inp))):
            raise ValueError(f"{layer}.weight is not a block of {module_name}'s rows and columns: its adapter "
                             f"cannot be one of {module_name}")
        module = hf.get_submodule(module_name)
        n_out, n_in = (module.out_features, module.in_features) if isinstance(module, nn.Linear) else \
            (module.weight.shape[1], module.weight.shape[0])
        a_hf, b_hf = a.new_zeros(a.shape[0], n_in), b.new_zeros(n_out, b.shape[1])
        a_hf[:, inp[0]] = a
        b_hf[out[:, 0]] = b
        parts.setdefault(module_name, []).append((a_hf, b_hf, scaling))
    fused = {}
    for module_name, blocks in parts.items():
        scaling = blocks[0][2]  # the others' scaling folds into their B
        fused[module_name] = (torch.cat([a for a, _, _ in blocks]),
                              torch.cat([b * (s / scaling) for _, b, s in blocks], dim=1), scaling)
    return fused


@torch.no_grad()
def write(adapters: dict[str, Adapter], hf: nn.Module, folder: Path, base: Path, dropout: float,
          check: Callable[[nn.Module], None]) -> None:
    """Write the ``hf`` modules' ``adapters`` (:func:`hf_adapters`) as a ``peft`` LoRA folder at
    ``folder`` naming ``base`` (the exported model's folder) as its base model, after ``check``
    (which raises) has passed on the adapted model. ``hf`` is adapted in place."""
    from peft import LoraConfig, get_peft_model

    ranks = {name: a.shape[0] for name, (a, _, _) in adapters.items()}
    conv1d = {type(hf.get_submodule(name)).__name__ == "Conv1D" for name in adapters}
    if len(conv1d) > 1:
        raise ValueError("the adapted modules are both Conv1D and Linear layers: one peft LoRA config holds one kind")
    r = max(ranks.values())
    config = LoraConfig(r=r, lora_alpha=r * next(iter(adapters.values()))[2], lora_dropout=dropout,
                        target_modules=sorted(adapters), fan_in_fan_out=conv1d == {True},
                        # each module's rank and alpha (alpha / rank is its scaling)
                        rank_pattern={re.escape(n): k for n, k in ranks.items()},
                        alpha_pattern={re.escape(n): ranks[n] * s for n, (_, _, s) in adapters.items()})
    adapted = get_peft_model(hf, config).eval()
    for name, (a, b, _) in adapters.items():
        layer = adapted.base_model.model.get_submodule(name)
        layer.lora_A["default"].weight.copy_(a)
        layer.lora_B["default"].weight.copy_(b)
    check(adapted)
    adapted.save_pretrained(folder)
    settings: dict[str, Any] = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps(settings | {"base_model_name_or_path": str(base)},
                                                           indent=1))
