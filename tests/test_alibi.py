"""ALiBi: BLOOM's slopes and attention, exact against a tiny randomised BloomForCausalLM on a padded
batch; decoding with the cache equals recomputation; the backends that cannot add a bias refuse."""

import pytest
import torch
from transformers import BloomConfig, BloomForCausalLM
from transformers.models.bloom.modeling_bloom import _get_alibi_slopes, build_alibi_tensor

from exactness import assert_matches, randomise
from text_batches import padded_tokens
from zoo.models.model import Model
from zoo.models.sampling import generate
from zoo.nn.alibi import ALiBi, alibi_slopes
from zoo.nn.block import BlockConfig
from zoo.nn.embedders import TokenEmbedder
from zoo.nn.heads import LMHead
from zoo.nn.masks import CausalMask

V, D, H, LAYERS, L = 61, 48, 6, 2, 24  # 6 heads: not a power of two (BLOOM's extra slopes)


def zoo_bloom(attention_backend: str = "sdpa") -> Model:
    """BLOOM's architecture from the zoo's parts: tokens + LayerNorm, no position vectors, pre-LN
    GELU (tanh) Blocks, ALiBi inside attention, a final norm, a tied head."""
    return Model(TokenEmbedder(V, D, L, positions="none", norm_eps=1e-5), CausalMask(),
                 BlockConfig(d_model=D, n_heads=H, d_ff=4 * D, activation="gelu_tanh"), LAYERS, LMHead(D, V), L,
                 tie_embeddings=True, bias=ALiBi(H), attention_backend=attention_backend)


def bloom_pair() -> tuple[BloomForCausalLM, Model]:
    torch.manual_seed(0)
    hf = randomise(BloomForCausalLM(BloomConfig(vocab_size=V, hidden_size=D, n_layer=LAYERS, n_head=H)).eval())
    zoo = zoo_bloom().eval()
    sd = hf.state_dict()
    tokens = sd["transformer.word_embeddings.weight"]
    ours = {"embedder.tokens.weight": tokens, "head.proj.weight": tokens}  # tied: the same matrix
    names = {"word_embeddings_layernorm": "embedder.norm", "ln_f": "stack.norm"}
    for theirs, mine in names.items():
        ours |= {f"{mine}.{p}": sd[f"transformer.{theirs}.{p}"] for p in ("weight", "bias")}
    for i in range(LAYERS):
        h, z = f"transformer.h.{i}.", f"stack.blocks.{i}."
        for p in ("weight", "bias"):  # BLOOM's fused projection is (heads, q/k/v, d_head) along its rows
            fused = sd[h + f"self_attention.query_key_value.{p}"].view(H, 3, D // H, *([D] if p == "weight" else []))
            ours |= {z + f"attn.{part}.{p}": fused[:, j].reshape(D, *fused.shape[3:]) for j, part in enumerate("qkv")}
            ours |= {z + f"attn.out.{p}": sd[h + f"self_attention.dense.{p}"],
                     z + f"attn_norm.{p}": sd[h + f"input_layernorm.{p}"],
                     z + f"ffn_norm.{p}": sd[h + f"post_attention_layernorm.{p}"],
                     z + f"ffn.fc_in.{p}": sd[h + f"mlp.dense_h_to_4h.{p}"],
                     z + f"ffn.fc_out.{p}": sd[h + f"mlp.dense_4h_to_h.{p}"]}
    zoo.load_state_dict(ours)
    return hf, zoo


@pytest.mark.parametrize("n_heads", [1, 2, 3, 4, 5, 6, 8, 12, 16, 20])
def test_slopes_are_blooms(n_heads):
    """Powers of two and the others (the odd terms of the next power's sequence), bit for bit."""
    assert torch.equal(alibi_slopes(n_heads), _get_alibi_slopes(n_heads, torch.device("cpu")))


def test_bias_is_blooms_alibi_up_to_a_constant_per_query():
    """BLOOM adds slope * (the key's position among the real tokens, from the mask's cumsum); the
    zoo adds slope * (key - query). On a padded batch the two differ, at every query and every real
    key, by one constant per query row, which softmax does not see."""
    _, real = padded_tokens(V, L)
    theirs = build_alibi_tensor(real.long(), H, torch.float64).view(3, H, 1, L)
    ours = ALiBi(H).double()(L, L)
    rows = torch.arange(L)
    for b in range(3):
        first = int(real[b].long().argmax())  # the row's first real key
        gap = ours - theirs[b : b + 1]
        shifted = gap - gap[..., first : first + 1]  # 0 at every real key if the gap is one constant a row
        seen = real[b][None, :] & real[b][:, None] & (rows[None, :] <= rows[:, None])  # (query, key) both real, causal
        assert_matches(shifted, torch.zeros_like(shifted), seen[None, None], what=f"row {b}: ALiBi - BLOOM's")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logits_match_bloom(dtype):
    """Row 0 unpadded, row 1 right-padded, row 2 left-padded; only real positions compared.
    float64: BLOOM computes its slopes, its alibi and its softmax in float32 whatever the dtype
    (and rounds the GELU constant to 0.79788456), so the bound is float32's, not float64's; and
    row 2 is right-padded too, as BLOOM's float64 gives NaN at a left-padded row's real tokens
    (its fully hidden pad queries' NaN reaches them through the next layer's values)."""
    hf, zoo = bloom_pair()
    hf, zoo = hf.to(dtype), zoo.to(dtype)
    x, real = padded_tokens(V, L, left=dtype == torch.float32)
    with torch.no_grad():
        assert_matches(zoo(x, key_padding=real), hf(x, attention_mask=real.long()).logits, real[..., None],
                       atol=1e-5, rtol=1e-6, what="BLOOM logits")


def test_cached_decoding_equals_recomputation():
    """float64: the logits of each position decoded one at a time over the cache equal the full
    forward's (the bias of a query after ``start`` cached keys), and greedy decoding agrees."""
    _, zoo = bloom_pair()
    zoo = zoo.double()
    x = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(3))
    cache = zoo.new_cache()
    with torch.no_grad():
        full = zoo(x)
        stepped = torch.cat([zoo(x[:, :5], cache=cache)] + [zoo(x[:, t : t + 1], cache=cache) for t in range(5, 16)], 1)
    assert_matches(stepped, full, what="cached ALiBi logits")
    prompt = x[:, :4]
    assert torch.equal(generate(zoo, prompt, 12, temperature=0, use_cache=True),
                       generate(zoo, prompt, 12, temperature=0, use_cache=False))


def test_alibi_runs_past_the_trained_length_with_no_table():
    """Nothing ALiBi holds depends on the length: the bias of a longer window is the shorter's, extended."""
    alibi = ALiBi(H)
    assert torch.equal(alibi(64, 64)[..., :L, :L], alibi(L, L))
    assert list(alibi.state_dict()) == []  # derived from n_heads alone: no checkpoint entry


@pytest.mark.parametrize("backend", ["blocks", "flex"])
def test_backends_without_a_bias_refuse_in_one_line(backend):
    with pytest.raises(ValueError, match=f"attention_backend={backend}: an additive attention bias \\(ALiBi"):
        zoo_bloom(backend)
