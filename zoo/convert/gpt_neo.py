"""Hugging Face GPT-Neo (``GPTNeoForCausalLM``) -> zoo GPT-Neo (conf/model/gpt_neo.yaml).

GPT-Neo names its embeddings and LayerNorms as GPT-2 does (shared: ``gpt2_layout``); its
attention and MLP are plain ``nn.Linear`` (no Conv1D transpose, no fused q/k/v). A local
layer's ``window_size=w`` lets query i see keys ``i - w < j <= i`` (its causal bias minus
``tril(bias, -w)``), which is the zoo's ``LocalMask(window=w)`` as is; its logits are not
scaled (``attn_scale=1.0``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.convert.common import build_net, layer_pattern, load_mapped
from zoo.convert.gpt2 import gpt2_layout

MASKS = {"global": "{_target_:zoo.nn.masks.CausalMask}",
         "local": "{_target_:zoo.nn.masks.LocalMask,window:%d,causal:true}"}


def gpt_neo_config_overrides(hf_config) -> list[str]:
    """Hydra overrides that give ``model=gpt_neo`` the shape and layer pattern of ``hf_config``."""
    if hf_config.activation_function != "gelu_new":
        raise ValueError(f"activation_function={hf_config.activation_function!r} is not supported (gelu_new)")
    if not hf_config.tie_word_embeddings:
        raise ValueError("tie_word_embeddings=False is not supported: the zoo's GPT-Neo ties its head")
    unknown = sorted(set(hf_config.attention_layers) - set(MASKS))
    if unknown:
        raise ValueError(f"attention types {unknown} are not supported (global or local)")
    masks = [MASKS[kind] % hf_config.window_size if kind == "local" else MASKS[kind]
             for kind in layer_pattern(hf_config.attention_layers)]
    return [
        f"model.net.n_layers={hf_config.num_layers}",
        f"model.net.context={hf_config.max_position_embeddings}",
        f"model.net.mask.masks=[{','.join(masks)}]",
        f"model.net.block.d_model={hf_config.hidden_size}",
        f"model.net.block.n_heads={hf_config.num_heads}",
        f"model.net.block.d_ff={hf_config.intermediate_size or 4 * hf_config.hidden_size}",
        f"model.net.block.norm_eps={hf_config.layer_norm_epsilon}",
    ]


def gpt_neo_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename GPT-Neo's weights (``GPTNeoForCausalLM.state_dict()``) to the zoo's."""
    sd = {k.removeprefix("transformer."): v for k, v in hf.items()}
    out = gpt2_layout(sd, n_layers)
    for i in range(n_layers):
        h, z = f"h.{i}.", f"stack.blocks.{i}."
        a = h + "attn.attention."
        out |= {
            z + "attn.q.weight": sd[a + "q_proj.weight"], z + "attn.k.weight": sd[a + "k_proj.weight"],
            z + "attn.v.weight": sd[a + "v_proj.weight"],
            z + "attn.out.weight": sd[a + "out_proj.weight"], z + "attn.out.bias": sd[a + "out_proj.bias"],
            z + "ffn.fc_in.weight": sd[h + "mlp.c_fc.weight"], z + "ffn.fc_in.bias": sd[h + "mlp.c_fc.bias"],
            z + "ffn.fc_out.weight": sd[h + "mlp.c_proj.weight"], z + "ffn.fc_out.bias": sd[h + "mlp.c_proj.bias"],
        }
    return out


@torch.no_grad()
def from_transformers(hf_model) -> torch.nn.Module:
    """A zoo GPT-Neo (built from conf/model/gpt_neo.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config
    net = build_net("gpt_neo", gpt_neo_config_overrides(cfg), {"vocab_size": cfg.vocab_size})
    load_mapped(net, gpt_neo_state_dict(hf_model.state_dict(), cfg.num_layers))
    return net
