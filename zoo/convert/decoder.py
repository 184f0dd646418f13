"""The decoders built like Llama (``<Family>ForCausalLM``: pre-RMSNorm, SwiGLU, rotary, grouped-query
attention, Llama's weight names): one mapping both ways, each family a small table of its names
and knobs (:class:`Decoder`): Llama, Mistral, Qwen2, Qwen3, OLMo 2, Phi-3, Gemma 2 and 3.

:data:`KEYS` is the one table of plain copies, read by the import (Hugging Face config -> the
net's shape) and written by the export (the net's config -> the Hugging Face config); the
rotary table, the activation, the biases and the mask are the knobs around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, head_tied, init_net, load_mapped,
                               read_checkpoint_dir, shape_overrides)
from zoo.convert.bert import classifier_family, classifier_state, load_classifier, without_head
from zoo.convert.family import REQUIRED, Family, at, config_only, copies, is_classifier, plain

# Hugging Face config key -> (zoo net config path, its value when config.json omits it): the plain copies
KEYS: dict[str, tuple[str, Any]] = {
    "num_hidden_layers": ("n_layers", REQUIRED),
    "max_position_embeddings": ("context", REQUIRED),
    "hidden_size": ("block.d_model", REQUIRED),
    "num_attention_heads": ("block.n_heads", REQUIRED),
    "num_key_value_heads": ("block.n_kv_heads", None),  # None: one per head (plain multi-head attention)
    "intermediate_size": ("block.d_ff", REQUIRED),
    "rms_norm_eps": ("block.norm_eps", 1e-6),
    "tie_word_embeddings": ("tie_embeddings", False),
    "attention_dropout": ("block.attn_dropout", 0.0),
}
# What every Llama-like converter reads beyond the plain copies (the vocabulary, the head width, the
# rotary table in either spelling: :func:`rope_table`) and ignores (Llama's pretraining_tp: a split of
# the same matmuls, gone from transformers 5's forward)
READS = frozenset({"vocab_size", "head_dim", "rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor"})
IGNORES = frozenset({"pretraining_tp"})
ACTIVATIONS = {"silu": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh"}  # Hugging Face's -> the Block's
PROJECTIONS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "out": "o_proj"}  # zoo attention part -> Hugging Face's
FFN = {"gate": "gate_proj", "fc_in": "up_proj", "fc_out": "down_proj"}  # SwiGLU: silu(gate) * up
PRE_NORMS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}  # Llama's: each sublayer's input
# Gemma's norms before and after each sublayer: its post_attention_layernorm is on the attention's
# output (Llama's same name is the feed-forward's input norm)
SANDWICH_NORMS = {"attn_norm": "input_layernorm", "attn_out_norm": "post_attention_layernorm",
                  "ffn_norm": "pre_feedforward_layernorm", "ffn_out_norm": "post_feedforward_layernorm"}
QK_NORMS = {"attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"}  # Qwen3's, OLMo 2's
# a fused Hugging Face weight -> the Llama weights it stacks along its rows, in order (Phi-3's)
FUSED = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
         "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}
# a part of a fused weight as wide as another weight's input (the queries: as many as o_proj reads);
# the parts not named here share the rest equally (keys and values: n_kv_heads each; gate and up)
WIDTH_OF = {"self_attn.q_proj": "self_attn.o_proj"}


def rope_table(config: dict[str, Any]) -> dict[str, Any]:
    """The rotary table transformers 5 builds of a config: an old-style ``rope_scaling`` replaces
    ``rope_parameters`` (configuration_utils' ``convert_rope_params_to_dict``: ``rope_scaling or
    rope_parameters``), its ``type`` read as ``rope_type``."""
    rope = dict(config.get("rope_scaling") or config.get("rope_parameters") or {})
    return rope | {"rope_type": rope.get("rope_type", rope.get("type", "default"))}


def rotary(config: dict[str, Any], base_key: str = "rope_theta",
           fraction_key: str = "partial_rotary_factor") -> tuple[float, float, float]:
    """(the rotary base, the fraction of each head that rotates, the linear position scale) of a
    Hugging Face config's rotary table (:func:`rope_table`), else the config's own keys (``base_key``,
    ``fraction_key``: GPT-NeoX's ``rotary_emb_base``, ``rotary_pct``); a table other than the plain
    one or the linearly scaled one is refused, naming it."""
    rope = rope_table(config)
    kind = rope["rope_type"]
    if kind not in ("default", "linear"):
        raise ValueError(f"{config.get('model_type', 'this')} config: rope_parameters.rope_type={kind!r} is not "
                         f"implemented by the zoo; it rotates with the plain table or a linearly scaled one "
                         f"(rope_type default or linear)")
    return (rope.get("rope_theta", config.get(base_key, 10000.0)),
            rope.get("partial_rotary_factor", config.get(fraction_key, 1.0)),
            float(rope["factor"]) if kind == "linear" else 1.0)


def plain_rotary(config: dict[str, Any]) -> dict[str, Any]:
    """The positions' part of the shape: one rotary base and linear scale (:func:`rotary`), whole
    heads rotating."""
    base, fraction, scale = rotary(config)
    if fraction != 1:
        raise ValueError(f"partial_rotary_factor={fraction} is not supported: this reader rotates whole heads "
                         f"(partial_rotary_factor 1)")
    return {"rotary_base": base, "rotary_scale": scale}


def plain_rotary_config(net: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face config's rotary table of the zoo net's one base (transformers 5 keeps it in
    ``rope_parameters``)."""
    scale = at(net, "rotary_scale") or 1.0
    linear = {"rope_type": "linear", "factor": scale} if scale != 1 else {"rope_type": "default"}
    return {"rope_parameters": linear | {"rope_theta": at(net, "rotary_base")}}


def unfused(hf: dict[str, Tensor], layer: str, fused: dict[str, tuple[str, ...]]) -> dict[str, Tensor]:
    """The weights (and biases) of ``layer`` (a name prefix) named in ``fused``, cut along their rows
    into the Llama weights they stack (views: the export's probe sees where each part comes from)."""
    out = {}
    for name, parts in fused.items():
        rows = hf[f"{layer}{name}.weight"].shape[0]
        known = {part: hf[f"{layer}{WIDTH_OF[part]}.weight"].shape[1] for part in parts if part in WIDTH_OF}
        rest = (rows - sum(known.values())) // (len(parts) - len(known))
        widths = [known.get(part, rest) for part in parts]
        for kind in ("weight", "bias"):
            if f"{layer}{name}.{kind}" in hf:
                pieces = hf[f"{layer}{name}.{kind}"].split(widths)
                out |= {f"{layer}{part}.{kind}": piece for part, piece in zip(parts, pieces)}
    return out


CAUSAL, LOCAL, PER_LAYER = "zoo.nn.masks.CausalMask", "zoo.nn.masks.LocalMask", "zoo.nn.masks.PerLayer"


def uncut(mask: dict[str, Any], context: int) -> dict[str, Any]:
    """The mask's part of a shape with every causal window wider than the context made the causal
    mask: it cuts nothing within the context (transformers runs it so; the zoo's ``LocalMask``
    refuses a window it would never use). A ``PerLayer`` pattern left all causal becomes one mask."""
    if "mask" not in mask:
        return mask

    def one(m: dict[str, Any]) -> dict[str, Any]:
        wide = m["_target_"] == LOCAL and m.get("causal") and isinstance(m.get("window"), int) and m["window"] > context
        return {"_target_": CAUSAL} if wide else m

    if mask["mask"]["_target_"] != PER_LAYER:
        return {"mask": one(mask["mask"])}
    masks = [one(m) for m in mask["mask"]["masks"]]
    return {"mask": masks[0] if all(m == masks[0] for m in masks) else mask["mask"] | {"masks": masks}}


# A mixture-of-experts layer in memory (transformers 5): mlp.gate.weight (E, D) the router,
# mlp.experts.gate_up_proj (E, 2F, D) gate and up stacked, mlp.experts.down_proj (E, D, F)
MOE_STACKED = ("mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def _no_keys(config: dict[str, Any]) -> dict[str, Any]:
    return {}


# task=classify: the zoo ClassifierHead's linear layer <- ``*ForSequenceClassification``'s ``score``
SCORE = {"proj": ("score",)}


def last_score(hf: nn.Module, x: Tensor) -> Tensor:
    """(B, num_labels): a ``*ForSequenceClassification``'s ``score`` on the last position of ``x``, which
    has no padding (the export's random example may hold the pad id anywhere: Hugging Face would
    read it as padding)."""
    return hf.score(hf.model(x).last_hidden_state[:, -1])


@dataclass(frozen=True)
class Decoder:
    """One Llama-like family: what differs from Llama is stated here, nothing else."""

    model: str  # its conf/model/<model>.yaml
    model_types: tuple[str, ...]  # the config.json model_type values its reader takes
    hf_class: str  # e.g. "LlamaForCausalLM"
    config_class: str  # e.g. "LlamaConfig"
    biases: tuple[str, ...] = ()  # the attention projections with a bias (of q, k, v, out): Qwen2's q, k, v
    expected: dict[str, Any] = field(default_factory=dict)  # config keys whose one value the zoo expresses
    reads: frozenset[str] = frozenset()  # config keys the mask, positions and own knobs read (beyond :data:`READS`)
    ignores: frozenset[str] = frozenset()  # config keys that do not change the logits (beyond :data:`IGNORES`)
    keys: dict[str, tuple[str, Any]] = field(default_factory=dict)  # plain copies beyond :data:`KEYS`
    mask: Callable[[dict[str, Any]], dict[str, Any]] = _no_keys  # config -> the mask's part of the shape
    mask_config: Callable[[dict[str, Any]], dict[str, Any]] = _no_keys  # net config -> the mask's config keys
    positions: Callable[[dict[str, Any]], dict[str, Any]] = plain_rotary  # config -> the rotary tables' part
    positions_config: Callable[[dict[str, Any]], dict[str, Any]] = plain_rotary_config  # net config -> their keys
    # config -> further values that are no plain copy (Gemma's attention scale), and back (net config -> keys)
    own: Callable[[dict[str, Any]], dict[str, Any]] = _no_keys
    own_config: Callable[[dict[str, Any]], dict[str, Any]] = _no_keys
    activation_key: str = "hidden_act"  # the config key of the activation (Gemma's hidden_activation)
    default_activation: str = "silu"  # the config class's, where config.json omits it (Gemma's tanh-GELU)
    # zoo Block norm -> the Hugging Face layer's (OLMo 2: on each sublayer's output, and on q and k)
    norms: dict[str, str] = field(default_factory=lambda: dict(PRE_NORMS))
    # the Block takes the config's head_dim (Qwen3-0.6B: 16 heads of 128 in 1024 wide), this one where
    # config.json omits it (Qwen3Config's default; 0: d_model / heads); None: the family needs
    # d_model = heads x head_dim
    head_dim: int | None = None
    fused: dict[str, tuple[str, ...]] = field(default_factory=dict)  # weights stored fused (Phi-3: :data:`FUSED`)
    knobs: dict[str, Any] = field(default_factory=dict)  # zoo values the family always has (Mixtral: norm_topk)
    aliases: dict[str, str] = field(default_factory=dict)  # config key -> its other spelling a config.json may use
    # A mixture of experts (the config's block.n_experts > 0) as a saved folder holds it: the layer's
    # module (Mixtral's block_sparse_moe) and each expert's weights (zoo part -> name, Mixtral's w1, w3, w2)
    moe_module: str = "mlp"
    experts: dict[str, str] = field(default_factory=lambda: dict(FFN))
    classifier: str | None = None  # its sequence classifier (task=classify), e.g. "LlamaForSequenceClassification"

    @property
    def config_keys(self) -> ConfigKeys:
        """Every config key this family's converter implements, ignores or fixes (:func:`check_keys`)."""
        return ConfigKeys(reads=READS | self.reads | set(KEYS) | set(self.keys) | set(self.aliases.values())
                          | {self.activation_key}, ignores=IGNORES | self.ignores, fixed=self.expected)

    def shape(self, config: dict[str, Any]) -> dict[str, Any]:
        """The values, keyed by their path under the language model's net, that give the family's
        preset the shape of a Hugging Face config (as a dict); refuses what the zoo Block does not
        express (a key it does not implement at another value, a scaled rotary table other than the
        linear one, d_model != heads x head_dim), naming the key."""
        check_keys(config, self.config_keys, config.get("model_type", self.model_types[0]))
        spelt = {key: config[other] for key, other in self.aliases.items() if key not in config and other in config}
        out = copies(config | spelt, KEYS | self.keys)  # a key of self.keys replaces KEYS' for the same path
        d, heads = out["block.d_model"], out["block.n_heads"]
        head_dim = config.get("head_dim") or self.head_dim or d // heads
        if head_dim * heads != d and self.head_dim is None:
            raise ValueError(f"head_dim={head_dim} x {heads} heads != hidden_size={d}: the zoo Block needs "
                             f"d_model = heads x d_head")
        own = {"block.head_dim": head_dim} if self.head_dim is not None else {}
        act = config.get(self.activation_key, self.default_activation)
        if act not in ACTIVATIONS:
            raise ValueError(f"{self.activation_key}={act!r} is not supported ({' or '.join(ACTIVATIONS)})")
        mask = uncut(self.mask(config), out["context"])
        return out | own | mask | self.positions(config) | self.own(config) | self.knobs | {
            "tie_embeddings": bool(out["tie_embeddings"]),
            "block.n_kv_heads": out["block.n_kv_heads"] or heads,
            "block.activation": ACTIVATIONS[act],
            **{f"block.bias_{part}": part in self.biases for part in PROJECTIONS},
        }

    def lm_shape(self, config: dict[str, Any]) -> dict[str, Any]:
        """:meth:`shape` plus the keys of ``model=<model>`` that depend on it (for a resolved config)."""
        vocab = config["vocab_size"]
        return self.shape(config) | {
            "embedder.vocab_size": vocab, "embedder.max_len": config["max_position_embeddings"],
            "head.vocab_size": vocab,
        }

    def tied(self, config: dict[str, Any], hf: dict[str, Tensor], folder: str | None = None) -> bool:
        """Whether the head is the token embedding as transformers 5 loads ``hf`` (:func:`head_tied`)."""
        default = dict(KEYS | self.keys)["tie_word_embeddings"][1]
        return head_tied(config, hf["embed_tokens.weight"], hf.get("lm_head.weight"), default, folder)

    def state_dict(self, hf: dict[str, Tensor], n_layers: int, embed: str = "embedder.tokens.weight",
                   n_experts: int = 0) -> dict[str, Tensor]:
        """Rename a ``<Family>Model``'s weights (keys without the ``model.`` prefix) plus
        ``lm_head.weight`` to the zoo's; ``embed``: where the token embedding sits in the zoo net;
        ``n_experts``: each layer's feed-forward is a mixture of that many (:meth:`experts_of`)."""
        out = {embed: hf["embed_tokens.weight"], "stack.norm.weight": hf["norm.weight"],
               "head.proj.weight": hf.get("lm_head.weight", hf["embed_tokens.weight"])}  # absent when tied
        hf = hf | {k: v for i in range(n_layers) for k, v in unfused(hf, f"layers.{i}.", self.fused).items()}
        for i in range(n_layers):
            h, z = f"layers.{i}.", f"stack.blocks.{i}."
            out |= {f"{z}{norm}.weight": hf[f"{h}{name}.weight"] for norm, name in self.norms.items()}
            for part, name in PROJECTIONS.items():
                out[f"{z}attn.{part}.weight"] = hf[f"{h}self_attn.{name}.weight"]
                if part in self.biases:
                    out[f"{z}attn.{part}.bias"] = hf[f"{h}self_attn.{name}.bias"]
            if n_experts:
                out |= self.experts_of(hf, h, f"{z}ffn.", n_experts)
            else:
                out |= {f"{z}ffn.{part}.weight": hf[f"{h}mlp.{name}.weight"] for part, name in FFN.items()}
        return out

    def experts_of(self, hf: dict[str, Tensor], h: str, z: str, n_experts: int) -> dict[str, Tensor]:
        """One mixture-of-experts layer's router and experts (Hugging Face layer prefix ``h``, zoo
        feed-forward prefix ``z``), from either layout: transformers 5's in memory (:data:`MOE_STACKED`,
        split here into views) or a saved folder's, one tensor per expert and part."""
        router, gate_up, down = (f"{h}{name}" for name in MOE_STACKED)
        if gate_up in hf:
            gate, up = hf[gate_up].chunk(2, dim=1)
            parts = {"gate": gate, "fc_in": up, "fc_out": hf[down]}
            return {f"{z}router.weight": hf[router]} | {
                f"{z}experts.{e}.{part}.weight": w[e] for part, w in parts.items() for e in range(n_experts)}
        m = f"{h}{self.moe_module}."
        return {f"{z}router.weight": hf[f"{m}gate.weight"]} | {
            f"{z}experts.{e}.{part}.weight": hf[f"{m}experts.{e}.{name}.weight"]
            for part, name in self.experts.items() for e in range(n_experts)}

    @torch.no_grad()
    def from_transformers(self, hf_model) -> nn.Module:
        """A zoo net (built from conf/model/<model>.yaml) holding ``hf_model``'s weights."""
        cfg = hf_model.config.to_dict()
        hf = {k.removeprefix("model."): v for k, v in hf_model.state_dict().items()}
        shape = self.shape(cfg) | {"tie_embeddings": self.tied(cfg, hf)}
        net = build_net(self.model, shape_overrides(shape), {"vocab_size": cfg["vocab_size"]})
        load_mapped(net, self.state_dict(hf, cfg["num_hidden_layers"], n_experts=shape.get("block.n_experts", 0)))
        return net

    def pretrained(self, net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
        """``model.init_from`` hook: (``net_cfg`` reshaped to the folder at ``path``, the net holding
        its weights). The data's vocabulary must be the checkpoint's."""
        config, state = read_checkpoint_dir(path, self.model_types)
        hf = {k.removeprefix("model."): v for k, v in state.items()}
        check_vocab(net_cfg, "embedder.vocab_size", config["vocab_size"], path)
        if is_classifier(net_cfg):  # task=classify: the folder's score (a *ForCausalLM's: from scratch)
            encoder = self.state_dict(hf, config["num_hidden_layers"])
            head = classifier_state(state, encoder, SCORE, net_cfg["head"]["num_classes"])
            shape = without_head(self.lm_shape(config)) | {"tie_embeddings": False}
            return init_net(net_cfg, shape, head, partial(load_classifier, source=path))
        shape = self.lm_shape(config) | {"tie_embeddings": self.tied(config, hf, path)}
        return init_net(net_cfg, shape, self.state_dict(hf, shape["n_layers"], n_experts=shape.get("block.n_experts", 0)))

    def export_keys(self, prefix: str = "") -> dict[str, str]:
        """Hugging Face config key (under ``prefix``, e.g. ``text_config.``) -> zoo path: the plain copies
        (and the head width where the Block takes it: the export states it as a number)."""
        width = {f"{prefix}head_dim": "block.head_dim"} if self.head_dim is not None else {}
        return plain(KEYS | self.keys, prefix) | width

    def config_extra(self, net: dict[str, Any]) -> dict[str, Any]:
        """The Hugging Face config keys that are not plain copies: the rotary tables', the mask's
        and the family's own."""
        return self.positions_config(net) | self.mask_config(net) | self.own_config(net)

    def family(self) -> Family:
        """The export of this family (``FAMILY`` of its module)."""
        return Family(hf_class=self.hf_class, config_class=self.config_class,
                      keys=self.export_keys() | {"vocab_size": "embedder.vocab_size"}, activations=ACTIVATIONS,
                      activation_key=self.activation_key, shape=config_only(self.lm_shape),
                      state_dict=lambda sd, net: self.state_dict({k.removeprefix("model."): v for k, v in sd.items()},
                                                                 net["n_layers"], n_experts=net["block"].get("n_experts", 0)),
                      extra=self.config_extra, classifier=self.classifier)

    def classifier_family(self) -> Family:
        """The export under task=classify: :attr:`classifier` (its ``score`` the head's linear layer),
        ``FAMILY`` of the family's ``<family>_classifier`` module."""
        rename = lambda hf, n_layers: self.state_dict({k.removeprefix("model."): v for k, v in hf.items()}, n_layers)
        return replace(classifier_family(self.family(), self.classifier, SCORE, self.lm_shape, rename),
                       outputs=last_score)
