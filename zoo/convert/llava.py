"""Hugging Face LLaVA (``LlavaForConditionalGeneration``: CLIP vision tower, 2-layer
projector, Llama language model) -> zoo LLaVA (conf/model/llava.yaml)."""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.convert.common import build_net, load_mapped, shape_overrides
from zoo.convert.llama import llama_shape, llama_state_dict

VISION = "model.net.embedder.vision"


def clip_vision_overrides(v, feature_layer: int, strategy: str) -> list[str]:
    """Hydra overrides that give the zoo vision tower a CLIP vision config's shape."""
    if v.hidden_act not in ("quick_gelu", "gelu"):
        raise ValueError(f"CLIP hidden_act={v.hidden_act!r} is not supported")
    if strategy not in ("default", "full"):
        raise ValueError(f"vision_feature_select_strategy={strategy!r}: expected 'default' or 'full'")
    if not isinstance(feature_layer, int):
        raise ValueError(f"vision_feature_layer={feature_layer!r}: only a single layer is supported")
    m = f"{VISION}.model"
    return [
        f"{VISION}.image_size={v.image_size}",
        f"{VISION}.feature_layer={feature_layer}",
        f"{VISION}.keep_cls={strategy == 'full'}",
        f"{m}.n_layers={v.num_hidden_layers}",
        f"{m}.embedder.patch_size={v.patch_size}",
        f"{m}.embedder.channels={v.num_channels}",
        f"{m}.embedder.norm_eps={v.layer_norm_eps}",
        f"{m}.block.d_model={v.hidden_size}",
        f"{m}.block.n_heads={v.num_attention_heads}",
        f"{m}.block.d_ff={v.intermediate_size}",
        f"{m}.block.norm_eps={v.layer_norm_eps}",
        f"{m}.block.activation={v.hidden_act}",
    ]


def clip_vision_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename a CLIPVisionTransformer's weights (no prefix) to a zoo ViT Model's."""
    out = {
        "embedder.cls": hf["embeddings.class_embedding"].view(1, 1, -1),
        "embedder.patchify.weight": hf["embeddings.patch_embedding.weight"],
        "embedder.positions.weight": hf["embeddings.position_embedding.weight"],
        "embedder.norm.weight": hf["pre_layrnorm.weight"], "embedder.norm.bias": hf["pre_layrnorm.bias"],
        "stack.norm.weight": hf["post_layernorm.weight"], "stack.norm.bias": hf["post_layernorm.bias"],
    }
    for i in range(n_layers):
        h, z = f"encoder.layers.{i}.", f"stack.blocks.{i}."
        for ours, theirs in [("attn.q", "self_attn.q_proj"), ("attn.k", "self_attn.k_proj"),
                             ("attn.v", "self_attn.v_proj"), ("attn.out", "self_attn.out_proj"),
                             ("attn_norm", "layer_norm1"), ("ffn_norm", "layer_norm2"),
                             ("ffn.fc_in", "mlp.fc1"), ("ffn.fc_out", "mlp.fc2")]:
            out[z + ours + ".weight"], out[z + ours + ".bias"] = hf[h + theirs + ".weight"], hf[h + theirs + ".bias"]
    return out


def _under(sd: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k.removeprefix(prefix): v for k, v in sd.items() if k.startswith(prefix)}


@torch.no_grad()
def from_transformers(hf_model) -> torch.nn.Module:
    """A zoo LLaVA (built from conf/model/llava.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config
    if cfg.projector_hidden_act != "gelu" or not getattr(cfg, "multimodal_projector_bias", True):
        raise ValueError("only LLaVA's projector (Linear + exact GELU + Linear, with biases) is supported")
    overrides = [
        *shape_overrides(llama_shape(cfg.text_config.to_dict())),
        *clip_vision_overrides(cfg.vision_config, cfg.vision_feature_layer, cfg.vision_feature_select_strategy),
        "model.net.embedder.projector=mlp2x_gelu",
    ]
    dims = {"vocab_size": cfg.text_config.vocab_size, "image_token_id": cfg.image_token_id}
    net = build_net("llava", overrides, dims)
    sd = hf_model.state_dict()
    lm = _under(sd, "model.language_model.") | {"lm_head.weight": sd["lm_head.weight"]}
    state = llama_state_dict(lm, cfg.text_config.num_hidden_layers, embed="embedder.text.tokens.weight")
    vision = clip_vision_state_dict(_under(sd, "model.vision_tower."), cfg.vision_config.num_hidden_layers)
    state |= {f"embedder.vision.model.{k}": v for k, v in vision.items()}
    projector = _under(sd, "model.multi_modal_projector.")
    for ours, theirs in [("0", "linear_1"), ("2", "linear_2")]:
        for p in ("weight", "bias"):
            state[f"embedder.projector.{ours}.{p}"] = projector[f"{theirs}.{p}"]
    load_mapped(net, state)
    return net
