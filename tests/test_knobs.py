"""The Block knobs of Qwen3, Gemma 2 / 3 and OLMo 2, each exact against the real transformers module.

One zoo Block (its rotary table and mask given as an attention context) against the family's
``*DecoderLayer`` with the same randomised weights copied in by hand; then a whole tiny Gemma 2 and
Gemma 3 (scaled embedding, local / global layers with their own rotary bases, soft-capped attention
and logits, tied head) against ``Gemma*ForCausalLM``. The name tables below are what a converter
reads. fp32 only: every one of these references computes its norms in float32 whatever the dtype.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch

transformers = pytest.importorskip("transformers")

from exactness import assert_matches, randomise  # noqa: E402
from text_batches import padded_tokens  # noqa: E402
from zoo.models.model import Model  # noqa: E402
from zoo.nn.block import Block, BlockConfig  # noqa: E402
from zoo.nn.context import AttentionContext  # noqa: E402
from zoo.nn.embedders import TokenEmbedder  # noqa: E402
from zoo.nn.heads import LMHead  # noqa: E402
from zoo.nn.masks import CausalMask, LocalMask, PerLayer  # noqa: E402
from zoo.nn.positions import RotaryEmbedding  # noqa: E402

D, HEADS, KV, D_HEAD, D_FF, EPS, VOCAB, CONTEXT, WINDOW = 48, 4, 2, 16, 80, 1e-6, 97, 48, 5
SHAPE = dict(hidden_size=D, num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=D_HEAD,
             intermediate_size=D_FF, rms_norm_eps=EPS, vocab_size=VOCAB, max_position_embeddings=CONTEXT,
             attn_implementation="eager")

# zoo Block name -> the reference layer's: the projections every family shares, then each family's norms
SHARED = {"attn.q": "self_attn.q_proj", "attn.k": "self_attn.k_proj", "attn.v": "self_attn.v_proj",
          "attn.out": "self_attn.o_proj", "ffn.gate": "mlp.gate_proj", "ffn.fc_in": "mlp.up_proj",
          "ffn.fc_out": "mlp.down_proj"}
QK = {"attn.q_norm": "self_attn.q_norm", "attn.k_norm": "self_attn.k_norm"}
GEMMA = {"attn_norm": "input_layernorm", "attn_out_norm": "post_attention_layernorm",
         "ffn_norm": "pre_feedforward_layernorm", "ffn_out_norm": "post_feedforward_layernorm"}
NAMES = {
    "qwen3": SHARED | QK | {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"},
    "gemma2": SHARED | GEMMA,
    "gemma3": SHARED | GEMMA | QK,
    "olmo2": SHARED | QK | {"attn_out_norm": "post_attention_layernorm", "ffn_out_norm": "post_feedforward_layernorm"},
}
SHAPE_KNOBS = dict(d_model=D, n_heads=HEADS, n_kv_heads=KV, head_dim=D_HEAD, d_ff=D_FF, norm_eps=EPS, gated=True,
                   norm_bias=False, bias_q=False, bias_k=False, bias_v=False, bias_out=False, bias_ffn=False)
SCALAR, SOFTCAP, FINAL_SOFTCAP = 20, 2.0, 3.0  # query_pre_attn_scalar != head_dim; caps low enough to bend
# the knobs of each family's Block (conf/block/<family>.yaml), from its config's fields
KNOBS = {
    "qwen3": dict(norm="rmsnorm", activation="silu", qk_norm="head"),
    "gemma2": dict(norm="rmsnorm_1p", activation="gelu_tanh", output_norm=True, attn_softcap=SOFTCAP,
                   attn_scale=SCALAR ** -0.5),
    "gemma3": dict(norm="rmsnorm_1p", activation="gelu_tanh", output_norm=True, qk_norm="head",
                   attn_scale=SCALAR ** -0.5),
    "olmo2": dict(norm="rmsnorm", activation="silu", input_norm=False, output_norm=True, qk_norm="all"),
}
GEMMA_CONFIG = dict(query_pre_attn_scalar=SCALAR, sliding_window=WINDOW, final_logit_softcapping=FINAL_SOFTCAP,
                    hidden_activation="gelu_pytorch_tanh", num_hidden_layers=2, tie_word_embeddings=True,
                    layer_types=["sliding_attention", "full_attention"])
LOCAL_BASE, GLOBAL_BASE = 10000.0, 1e6  # Gemma 3's rope_local_base_freq and rope_theta


def hf_config(family: str):
    if family == "qwen3":
        return transformers.Qwen3Config(**SHAPE, num_hidden_layers=1)
    if family == "olmo2":
        return transformers.Olmo2Config(**SHAPE, num_hidden_layers=1)
    if family == "gemma2":
        return transformers.Gemma2Config(**SHAPE, **GEMMA_CONFIG, attn_logit_softcapping=SOFTCAP)
    return transformers.Gemma3TextConfig(**SHAPE, **GEMMA_CONFIG, rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": LOCAL_BASE},
        "full_attention": {"rope_type": "default", "rope_theta": GLOBAL_BASE}})


PREFIX = {"qwen3": "Qwen3", "olmo2": "Olmo2", "gemma2": "Gemma2", "gemma3": "Gemma3"}


def reference_class(family: str, what: str) -> type:
    """The family's ``<Prefix><what>`` class of transformers (``DecoderLayer``, ``RotaryEmbedding``)."""
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    return getattr(module, PREFIX[family] + what)


def copy_block(block: Block, reference: torch.nn.Module, names: dict[str, str], strict: bool = True) -> None:
    """Load ``reference``'s weights into ``block`` through ``names``: every weight of each is used
    (``strict=False``: a norm only the Block has keeps its init)."""
    theirs, kept = reference.state_dict(), block.state_dict()
    ours = {f"{z}.weight": theirs[f"{h}.weight"] for z, h in names.items() if strict or f"{z}.weight" in kept}
    block.load_state_dict(ours, strict=strict)  # strict: no Block weight left at its init
    assert not strict or {f"{h}.weight" for h in names.values()} == set(theirs), "a reference weight was left unread"


def additive(allowed: torch.Tensor) -> torch.Tensor:
    """(B, L, L) bool -> the eager reference's (B, 1, L, L) additive mask."""
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None]


def layer_pair(family: str, layer_idx: int = 0, **changed):
    """(zoo Block, reference decoder layer) with the same randomised weights; ``changed``: knobs set
    differently on the zoo side (to show the comparison sees them)."""
    cfg = hf_config(family)
    torch.manual_seed(0)
    reference = randomise(reference_class(family, "DecoderLayer")(cfg, layer_idx).eval(), seed=layer_idx)
    block = Block(BlockConfig(**SHAPE_KNOBS, **(KNOBS[family] | changed))).eval()
    copy_block(block, reference, NAMES[family], strict=not changed)
    return block, reference, cfg


def run_pair(family: str, layer_idx: int = 0, mask=CausalMask(), base: float = 10000.0, **changed):
    """The zoo Block's and the reference layer's outputs (B, L, D) on a right-padded batch of odd length."""
    block, reference, cfg = layer_pair(family, layer_idx, **changed)
    length = 23
    _, real = padded_tokens(VOCAB, length, left=False)
    x = torch.randn(3, length, D, generator=torch.Generator().manual_seed(2))
    context = AttentionContext.build(mask, length, length, x.device, real, rope=RotaryEmbedding(D_HEAD, CONTEXT, base)(length))
    pos = torch.arange(length)
    allowed = mask.cells(pos[:, None], pos[None, :], length)[None] & real[:, None, :]
    rotary = reference_class(family, "RotaryEmbedding")(cfg)
    args = (x, pos[None]) + (("full_attention" if base == GLOBAL_BASE else "sliding_attention",) if family == "gemma3" else ())
    with torch.no_grad():
        ours = block(x, context)
        ref = reference(x, attention_mask=additive(allowed), position_embeddings=rotary(*args),
                        position_ids=pos[None])
    return ours, ref, real


@pytest.mark.parametrize("family", ["qwen3", "olmo2", "gemma2", "gemma3"])
def test_a_block_with_the_familys_knobs_is_its_decoder_layer(family):
    local = family.startswith("gemma")  # Gemma's layer 0 is a sliding-window layer
    mask = LocalMask(WINDOW) if local else CausalMask()
    ours, ref, real = run_pair(family, mask=mask, base=LOCAL_BASE)
    assert_matches(ours, ref, real[..., None], what=f"{family} layer")


def test_gemma3_global_layer_rotates_with_its_own_base():
    ours, ref, real = run_pair("gemma3", layer_idx=1, base=GLOBAL_BASE)
    assert_matches(ours, ref, real[..., None], what="gemma3 global layer")
    wrong, _, _ = run_pair("gemma3", layer_idx=1, base=LOCAL_BASE)  # the local base in a global layer: off
    with pytest.raises(AssertionError):
        assert_matches(wrong, ref, real[..., None])


@pytest.mark.parametrize("family, changed", [
    ("qwen3", dict(qk_norm=None)),  # (a norm over all heads would not even load: its weights are wider)
    ("olmo2", dict(qk_norm=None)),
    ("olmo2", dict(input_norm=True)),  # OLMo 2 has no input norm
    ("gemma2", dict(attn_softcap=None)),  # the soft-capping bends these scores
    ("gemma2", dict(norm="rmsnorm")),  # w, not 1 + w
])
def test_each_knob_is_seen_by_the_comparison(family, changed):
    """A knob set otherwise fails the comparison: the exactness above checks each knob, not a
    stretch of the Block where they do not act."""
    mask = LocalMask(WINDOW) if family.startswith("gemma") else CausalMask()
    ours, ref, real = run_pair(family, mask=mask, base=LOCAL_BASE, **changed)
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches(ours, ref, real[..., None])


def tiny_gemma(family: str) -> tuple[torch.nn.Module, Model]:
    """A randomised ``Gemma2ForCausalLM`` / ``Gemma3ForCausalLM`` and the zoo Model holding its weights."""
    cfg = hf_config(family)
    torch.manual_seed(0)
    cls = transformers.Gemma2ForCausalLM if family == "gemma2" else transformers.Gemma3ForCausalLM
    hf = randomise(cls(cfg).eval())
    net = Model(
        embedder=TokenEmbedder(VOCAB, D, CONTEXT, positions="none", scale=True),
        mask=PerLayer([LocalMask(WINDOW), CausalMask()]),  # layer_types: sliding, full
        block=BlockConfig(**SHAPE_KNOBS, **KNOBS[family]), n_layers=2,
        head=LMHead(D, VOCAB, softcap=FINAL_SOFTCAP), context=CONTEXT, tie_embeddings=True, rotary=True,
        rotary_base=[LOCAL_BASE, GLOBAL_BASE] if family == "gemma3" else cfg.rope_parameters["rope_theta"],
    ).eval()
    theirs = hf.state_dict()
    ours = {"embedder.tokens.weight": theirs["model.embed_tokens.weight"],
            "stack.norm.weight": theirs["model.norm.weight"],
            "head.proj.weight": theirs["lm_head.weight"]}
    for i in range(2):
        ours |= {f"stack.blocks.{i}.{z}.weight": theirs[f"model.layers.{i}.{h}.weight"]
                 for z, h in NAMES[family].items()}
    assert torch.equal(theirs["lm_head.weight"], theirs["model.embed_tokens.weight"])  # tied, as Gemma's
    net.load_state_dict(ours, strict=True)
    assert net.head.weight is net.embedder.tokens.weight
    return hf, net


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_a_whole_tiny_gemma_is_the_reference(family):
    hf, net = tiny_gemma(family)
    tokens, real = padded_tokens(VOCAB, 37)  # odd, longer than the window; padding on both sides
    with torch.no_grad():
        ref = hf(tokens, attention_mask=real.long()).logits
        ours = net(tokens, key_padding=real)
    assert ref.abs().max() > 0.9 * FINAL_SOFTCAP  # the final cap bends these logits
    assert_matches(ours, ref, real[..., None], what=f"{family} logits")


def test_gemma_cached_decoding_equals_recomputation():
    """Soft-capped attention and logits, a windowed layer's rolling cache: decoding one token at a
    time gives the full forward's logits."""
    _, net = tiny_gemma("gemma2")
    tokens = torch.randint(0, VOCAB, (2, 19), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = net(tokens)
        cache = net.new_cache()
        steps = [net(tokens[:, :7], cache=cache)] + [net(tokens[:, t:t + 1], cache=cache) for t in range(7, 19)]
    assert_matches(torch.cat(steps, dim=1), full, what="cached decoding")


def test_block_config_refuses_an_input_norm_off_in_a_post_ln_block():
    with pytest.raises(ValueError, match="block.input_norm=false needs pre-LN"):
        BlockConfig(prenorm=False, input_norm=False)
    with pytest.raises(ValueError, match="qk_norm='heads'"):
        Block(dataclasses.replace(BlockConfig(), qk_norm="heads"))


def test_the_embedding_scale_is_rounded_to_the_tables_dtype_as_gemmas():
    """In bfloat16 Gemma multiplies by sqrt(3072) rounded to bfloat16 (55.5, not 55.43): so does the zoo."""
    from transformers.models.gemma2.modeling_gemma2 import Gemma2TextScaledWordEmbedding

    width = 3072
    ours = TokenEmbedder(5, width, 8, positions="none", scale=True).to(torch.bfloat16)
    theirs = Gemma2TextScaledWordEmbedding(5, width, 0, embed_scale=width ** 0.5).to(torch.bfloat16)
    theirs.weight.data.copy_(ours.tokens.weight)
    tokens = torch.arange(5)[None]
    assert torch.equal(ours(tokens), theirs(tokens))
