"""GPT: exactness against Hugging Face GPT-2, causality, decoding with the KV cache."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from zoo.convert.gpt2 import from_transformers
from zoo.generate import filter_logits, generate


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=97, n_positions=40, n_embd=48, n_layer=3, n_head=4, bos_token_id=0, eos_token_id=0)
    hf = GPT2LMHeadModel(cfg).eval()
    return hf, from_transformers(hf).eval()


def test_logits_match_transformers_gpt2(pair):
    hf, zoo = pair
    x = torch.randint(0, 97, (3, 40))
    with torch.no_grad():
        assert (hf(x).logits - zoo(x)).abs().max() <= 1e-5


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
    _, zoo = pair  # context 40: 50 new tokens force the cache to restart
    out = generate(zoo, torch.zeros(1, 3, dtype=torch.long), 50, temperature=1.0, top_k=5)
    assert out.shape == (1, 53)


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
