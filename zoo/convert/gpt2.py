"""Hugging Face GPT-2 (``GPT2LMHeadModel``) -> zoo GPT: one short, shape-checked mapping."""

from __future__ import annotations

import torch
from torch import Tensor

from zoo.convert.common import build_net, load_mapped


def gpt_config_overrides(hf_config) -> list[str]:
    """Hydra overrides that give ``model=gpt`` the shape of a Hugging Face GPT-2 config."""
    return [
        f"model.net.n_layers={hf_config.n_layer}",
        f"model.net.context={hf_config.n_positions}",
        f"model.net.block.d_model={hf_config.n_embd}",
        f"model.net.block.n_heads={hf_config.n_head}",
        f"model.net.block.d_ff={hf_config.n_inner or 4 * hf_config.n_embd}",
        f"model.net.block.norm_eps={hf_config.layer_norm_epsilon}",
    ]


def gpt2_layout(sd: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """What GPT-2 and GPT-Neo name alike (keys without ``transformer.``): token and learned
    position embeddings, the two LayerNorms of each block, the final LayerNorm, the tied head."""
    out = {
        "embedder.tokens.weight": sd["wte.weight"],
        "embedder.positions.weight": sd["wpe.weight"],
        "stack.norm.weight": sd["ln_f.weight"],
        "stack.norm.bias": sd["ln_f.bias"],
        "head.proj.weight": sd["wte.weight"],  # tied
    }
    for i in range(n_layers):
        h, z = f"h.{i}.", f"stack.blocks.{i}."
        out |= {
            z + "attn_norm.weight": sd[h + "ln_1.weight"], z + "attn_norm.bias": sd[h + "ln_1.bias"],
            z + "ffn_norm.weight": sd[h + "ln_2.weight"], z + "ffn_norm.bias": sd[h + "ln_2.bias"],
        }
    return out


def gpt2_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename GPT-2's weights to the zoo's. GPT-2 stores Conv1D weights as (in, out)
    and q, k, v as one matrix: transpose and split them."""
    sd = {k.removeprefix("transformer."): v for k, v in hf.items()}
    out = gpt2_layout(sd, n_layers)
    for i in range(n_layers):
        h, z = f"h.{i}.", f"stack.blocks.{i}."
        q, k, v = sd[h + "attn.c_attn.weight"].t().chunk(3, dim=0)
        qb, kb, vb = sd[h + "attn.c_attn.bias"].chunk(3)
        out |= {
            z + "attn.q.weight": q, z + "attn.k.weight": k, z + "attn.v.weight": v,
            z + "attn.q.bias": qb, z + "attn.k.bias": kb, z + "attn.v.bias": vb,
            z + "attn.out.weight": sd[h + "attn.c_proj.weight"].t(), z + "attn.out.bias": sd[h + "attn.c_proj.bias"],
            z + "ffn.fc_in.weight": sd[h + "mlp.c_fc.weight"].t(), z + "ffn.fc_in.bias": sd[h + "mlp.c_fc.bias"],
            z + "ffn.fc_out.weight": sd[h + "mlp.c_proj.weight"].t(), z + "ffn.fc_out.bias": sd[h + "mlp.c_proj.bias"],
        }
    return out


@torch.no_grad()
def from_transformers(hf_model) -> torch.nn.Module:
    """A zoo GPT (built from conf/model/gpt.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config
    net = build_net("gpt", gpt_config_overrides(cfg), {"vocab_size": cfg.vocab_size})
    load_mapped(net, gpt2_state_dict(hf_model.state_dict(), cfg.n_layer))
    return net
