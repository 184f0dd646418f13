"""GPT: exactness against Hugging Face GPT-2, causality, decoding with the KV cache."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from exactness import assert_matches, randomise
from text_batches import padded_tokens
from zoo.convert.gpt2 import from_transformers
from zoo.models.sampling import filter_logits, generate


def tiny_gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=97, n_positions=40, n_embd=48, n_layer=3, n_head=4, bos_token_id=0, eos_token_id=0,
                     attn_implementation="sdpa")
    return randomise(GPT2LMHeadModel(cfg).eval())


@pytest.fixture(scope="module")
def pair():
    hf = tiny_gpt2()
    return hf, from_transformers(hf).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_logits_match_transformers_gpt2(dtype):
    """fp32: within fp32 rounding; float64: GPT-2 under SDPA computes in float64 throughout,
    so a wrong formula could not hide under rounding noise. One row right-padded, one left-padded:
    only the real positions are compared (a pad's output is meaningless in both)."""
    hf = tiny_gpt2()
    zoo = from_transformers(hf).eval()
    hf, zoo = hf.to(dtype), zoo.to(dtype)
    x, real = padded_tokens(97, 40)
    with torch.no_grad():
        assert_matches(zoo(x, key_padding=real), hf(x, attention_mask=real.long()).logits, real[..., None],
                       what="GPT-2 logits")


def test_head_is_tied_to_the_token_embedding(pair):
    _, zoo = pair
    assert zoo.head.weight is zoo.embedder.tokens.weight


def test_causality(pair):
    """Changing token t+1 leaves the logits at positions <= t unchanged."""
    _, zoo = pair
    x = torch.randint(0, 97, (1, 20))
    y = x.clone()
    y[0, 11] = (y[0, 11] + 1) % 97
    with torch.no_grad():
        a, b = zoo(x), zoo(y)
    assert torch.equal(a[:, :11], b[:, :11])
    assert not torch.allclose(a[:, 11:], b[:, 11:])


def test_greedy_with_cache_equals_full_recomputation(pair):
    _, zoo = pair
    prompt = torch.randint(0, 97, (2, 5))
    cached = generate(zoo, prompt, 30, temperature=0, use_cache=True)
    recomputed = generate(zoo, prompt, 30, temperature=0, use_cache=False)
    assert torch.equal(cached, recomputed)


def test_generation_past_the_context_crops(pair):
    """Context 40: 50 new tokens force the cache to restart; every token is still the greedy
    choice given the last 40 tokens (recomputed from scratch on the cropped window)."""
    _, zoo = pair
    out = generate(zoo, torch.zeros(1, 3, dtype=torch.long), 50, temperature=0)
    assert out.shape == (1, 53)
    with torch.no_grad():
        for t in range(3, 53):
            window = out[:, max(0, t - 40) : t]
            assert zoo(window)[0, -1].argmax().item() == out[0, t].item(), f"token {t}"


def test_top_k_and_top_p_filtering():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    assert torch.isinf(filter_logits(logits, top_k=2)).tolist() == [[False, False, True, True]]
    probs = logits.softmax(-1)  # 0.64, 0.24, 0.09, 0.03
    assert probs[0, 0] < 0.8 < probs[0, :2].sum()
    assert torch.isinf(filter_logits(logits, top_p=0.8)).tolist() == [[False, False, True, True]]


def test_too_long_input_names_the_lengths(pair):
    _, zoo = pair
    with pytest.raises(ValueError, match="length 41 is longer than the model's context of 40"):
        zoo(torch.zeros(1, 41, dtype=torch.long))
