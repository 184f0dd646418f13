"""A zoo network back to a Hugging Face folder that ``transformers`` loads (``from_pretrained``).

No converter is written twice. Each family's import mapping (``zoo/convert/<family>.py``:
Hugging Face names -> zoo names, with splits, transposes and renames) only moves numbers, so it
is run once on a *probe*: a Hugging Face state dict whose every element holds its own index.
What comes out tells, for each zoo weight, which Hugging Face elements it was read from; the
export writes the zoo's values back there. The Hugging Face config comes from the zoo net's
config through each family's table of (Hugging Face key, zoo key) below, and is checked by the
family's own import shape (every value the import would set must be the net's). Last, the
exported model must give the zoo net's outputs on an example input, or nothing is written: a
zoo net that uses something the Hugging Face class cannot express is refused, with the
difference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from zoo.convert import bert, gpt2, llama, vit


@dataclass(frozen=True)
class Family:
    """What exporting one family needs."""

    hf_class: str  # transformers class name, e.g. "GPT2LMHeadModel"
    config_class: str  # e.g. "GPT2Config"
    keys: dict[str, str]  # Hugging Face config key -> zoo net config path
    activations: dict[str, str]  # Hugging Face activation name -> zoo's (the import's table)
    activation_key: str  # the Hugging Face config key of the activation
    shape: Callable[[dict[str, Any]], dict[str, Any]]  # the import's config -> zoo shape
    state_dict: Callable[[dict[str, Tensor], dict[str, Any]], dict[str, Tensor]]  # the import's weight map
    example: Callable[[dict[str, Any]], Tensor]  # an input for the check
    outputs: Callable[[nn.Module, Tensor], Tensor]  # the Hugging Face model's outputs (the zoo's: net(x))
    extra: Callable[[dict[str, Any]], dict[str, Any]] = lambda net: {}  # keys that are not plain copies


def _tokens(net: dict[str, Any]) -> Tensor:
    return torch.randint(0, net["embedder"]["vocab_size"], (2, min(16, net["context"])))


def _logits(hf: nn.Module, x: Tensor) -> Tensor:
    return hf(x).logits


FAMILIES: dict[str, Family] = {
    "zoo.convert.gpt2.pretrained": Family(
        "GPT2LMHeadModel", "GPT2Config",
        {"n_layer": "n_layers", "n_positions": "context", "n_embd": "block.d_model", "n_head": "block.n_heads",
         "n_inner": "block.d_ff", "layer_norm_epsilon": "block.norm_eps", "vocab_size": "embedder.vocab_size",
         "tie_word_embeddings": "tie_embeddings", "resid_pdrop": "block.dropout", "attn_pdrop": "block.attn_dropout",
         "embd_pdrop": "embedder.dropout"},
        gpt2.ACTIVATIONS, "activation_function", gpt2.gpt2_shape,
        lambda sd, net: gpt2.gpt2_state_dict(sd, net["n_layers"]), _tokens, _logits),
    "zoo.convert.bert.pretrained": Family(
        "BertForMaskedLM", "BertConfig",
        {"num_hidden_layers": "n_layers", "max_position_embeddings": "context", "hidden_size": "block.d_model",
         "num_attention_heads": "block.n_heads", "intermediate_size": "block.d_ff", "layer_norm_eps": "block.norm_eps",
         "vocab_size": "embedder.vocab_size", "type_vocab_size": "embedder.n_segments",
         "hidden_dropout_prob": "block.dropout", "attention_probs_dropout_prob": "block.attn_dropout"},
        bert.ACTIVATIONS, "hidden_act", bert.bert_shape,
        lambda sd, net: bert.bert_state_dict(sd, net["n_layers"]), _tokens, _logits),
    "zoo.convert.llama.pretrained": Family(
        "LlamaForCausalLM", "LlamaConfig",
        {"num_hidden_layers": "n_layers", "max_position_embeddings": "context", "hidden_size": "block.d_model",
         "num_attention_heads": "block.n_heads", "num_key_value_heads": "block.n_kv_heads",
         "intermediate_size": "block.d_ff", "rms_norm_eps": "block.norm_eps", "vocab_size": "embedder.vocab_size",
         "tie_word_embeddings": "tie_embeddings", "attention_dropout": "block.attn_dropout"},
        {"silu": "silu", "gelu": "gelu"}, "hidden_act", llama.llama_lm_shape,
        lambda sd, net: llama.llama_state_dict({k.removeprefix("model."): v for k, v in sd.items()}, net["n_layers"]),
        _tokens, _logits,
        extra=lambda net: {"rope_parameters": {"rope_type": "default", "rope_theta": net["rotary_base"]}}),
    "zoo.convert.vit.pretrained": Family(
        "ViTForImageClassification", "ViTConfig",
        {"num_hidden_layers": "n_layers", "hidden_size": "block.d_model", "num_attention_heads": "block.n_heads",
         "intermediate_size": "block.d_ff", "layer_norm_eps": "block.norm_eps", "qkv_bias": "block.bias_q",
         "hidden_dropout_prob": "block.dropout", "attention_probs_dropout_prob": "block.attn_dropout",
         "image_size": "embedder.image_size", "patch_size": "embedder.patch_size", "num_channels": "embedder.channels",
         "num_labels": "head.num_classes"},
        vit.HF_ACTIVATIONS, "hidden_act", vit.vit_shape,
        lambda sd, net: vit.hf_vit_state_dict(sd, net["n_layers"]),
        lambda net: torch.randn(2, net["embedder"]["channels"], net["embedder"]["image_size"],
                                net["embedder"]["image_size"]),
        _logits),
}


def hf_config(family: Family, net: dict[str, Any]):
    """The Hugging Face config of the zoo net config ``net``, checked against the import's shape."""
    import transformers

    select = OmegaConf.create(net)
    values = {key: OmegaConf.select(select, path) for key, path in family.keys.items()}
    act = OmegaConf.select(select, "block.activation")
    names = [hf for hf, zoo in family.activations.items() if zoo == act]
    if not names:
        raise ValueError(f"block.activation={act!r} has no {family.hf_class} equivalent "
                         f"(it has {sorted(set(family.activations.values()))})")
    config = getattr(transformers, family.config_class)(**values, **{family.activation_key: names[0]},
                                                        **family.extra(net))
    shape = family.shape(config.to_dict())
    differ = {k: (v, OmegaConf.select(select, k)) for k, v in shape.items() if OmegaConf.select(select, k) != v}
    if differ:
        raise ValueError(f"{family.hf_class} cannot express this net: (Hugging Face, zoo) values differ: {differ}")
    return config


def _unique(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """``state`` with the keys of tied weights (one storage under two names) kept once."""
    seen, out = set(), {}
    for key, value in state.items():
        if value.data_ptr() not in seen:
            seen.add(value.data_ptr())
            out[key] = value
    return out


@torch.no_grad()
def to_hf(net: nn.Module, net_cfg: dict[str, Any], converter: str) -> tuple[nn.Module, list[str]]:
    """(a ``transformers`` model in eval mode holding ``net``'s weights, checked on an example;
    the names of its weights the zoo net has no counterpart for, left at their initialisation,
    e.g. BERT's pooler)."""
    import transformers

    if converter not in FAMILIES:
        raise ValueError(f"no export for this network (its converter is {converter!r}); export writes "
                         f"{sorted(f.hf_class for f in FAMILIES.values())}")
    family = FAMILIES[converter]
    hf = getattr(transformers, family.hf_class)(hf_config(family, net_cfg)).eval()
    target = _unique(hf.state_dict())
    # The probe: every element of the Hugging Face weights holds its own index (exact in float64).
    sizes = [v.numel() for v in target.values()]
    offsets = torch.tensor([0, *sizes]).cumsum(0).tolist()
    probe = {k: torch.arange(offsets[i], offsets[i + 1], dtype=torch.float64).view(v.shape)
             for i, (k, v) in enumerate(target.items())}
    where = family.state_dict(probe, net_cfg)
    flat = torch.cat([v.detach().flatten().to(torch.float64) for v in target.values()])
    written = torch.zeros_like(flat, dtype=torch.bool)
    own = net.state_dict()
    for name, index in where.items():
        index = index.flatten()
        if name not in own or index.numel() != own[name].numel() or not torch.equal(index, index.round()):
            raise ValueError(f"{family.hf_class}: the import's mapping of {name} is not a move of weights")
        flat[index.long()] = own[name].flatten().to(torch.float64)
        written[index.long()] = True
    missing = sorted(set(own) - set(where) - {k for k in own if k.endswith(("rope.cos", "rope.sin"))})
    if missing:
        raise ValueError(f"{family.hf_class} has no place for the zoo weights {missing}")
    state = {k: flat[offsets[i]: offsets[i + 1]].view(v.shape).to(v.dtype) for i, (k, v) in enumerate(target.items())}
    hf.load_state_dict(state, strict=False)
    untouched = [k for i, k in enumerate(target) if not written[offsets[i]: offsets[i + 1]].any()]
    x = family.example(net_cfg)
    ours, theirs = net.eval()(x), family.outputs(hf, x)
    diff = (ours - theirs).abs().max().item()
    if diff > 1e-4 * (1 + theirs.abs().max().item()):
        raise ValueError(f"the exported {family.hf_class} gives outputs {diff:.3g} away from the zoo net's: the net "
                         f"uses something {family.hf_class} does not express")
    return hf, untouched


def export(ckpt: str | Path, out: str | Path, merge_lora: bool = True) -> list[str]:
    """Write the zoo checkpoint ``ckpt`` as a Hugging Face folder ``out`` (``config.json`` +
    ``model.safetensors``, and ``tokenizer.json`` when the tokenizer is a Hugging Face one).
    LoRA adapters (a run with ``model.lora``) are merged into the weights first; without
    ``merge_lora`` such a checkpoint is refused. Returns the names of the Hugging Face weights the
    zoo net has no counterpart for."""
    from zoo.train import lora
    from zoo.train.checkpoint import load, tokenizer_of

    objective = load(ckpt)
    net = objective.net
    if objective.hparams.get("lora"):
        if not merge_lora:
            raise ValueError(f"{ckpt} holds LoRA adapters: export them merged (merge_lora=true)")
        net = lora.merge(net)
    hf, untouched = to_hf(net, objective.hparams.net, objective.hparams.get("converter"))
    out = Path(out)
    hf.save_pretrained(out)
    tokenizer = tokenizer_of(ckpt) if objective.hparams.get("tokenizer") else None
    if tokenizer is not None and hasattr(tokenizer, "tokenizer"):  # HFTokenizer: a tokenizers.Tokenizer inside
        tokenizer.tokenizer.save(str(out / "tokenizer.json"))
    (out / "zoo_export.json").write_text(json.dumps({"from": str(ckpt), "untouched": untouched}, indent=1))
    return untouched
