"""Decoding over a static cache (zoo.models.static_decoding): eager, its logits are the dynamic
cache's (GPT-2, Llama, Mistral with a window shorter than the prompt, T5's decoder over a padded
source); compiled (slow: torch.compile on the CPU takes tens of seconds), ``generate(compile=True)``
and ``greedy(compile=True)`` give the eager path's and transformers' greedy tokens in one graph."""

from __future__ import annotations

import importlib

import pytest
import torch

from exactness import assert_matches, randomise
from test_export_clients import TEXT, TINY_LM, checkpoint
from zoo.cli.commands import call
from zoo.data.tokenizers import CharTokenizer
from zoo.models.decoding import greedy, static_decoder
from zoo.models.sampling import generate
from zoo.models.static_decoding import StaticDecoder

transformers = pytest.importorskip("transformers")
VOCAB, PROMPT, NEW = 64, 11, 9


def reference(family: str) -> torch.nn.Module:
    """A tiny transformers model of ``family``, its weights drawn away from init."""
    torch.manual_seed(0)
    decoder = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=32, tie_word_embeddings=False)
    if family == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                                                     n_positions=32))
    elif family == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**decoder))
    elif family == "mistral":  # a window shorter than the prompt: the dynamic cache rolls, the static one masks
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**decoder, sliding_window=4))
    else:
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
            relative_attention_max_distance=20, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
    return randomise(model.eval())


def converted(family: str, ref: torch.nn.Module) -> torch.nn.Module:
    return importlib.import_module(f"zoo.convert.{family}").from_transformers(ref).eval()


def tokens() -> torch.Tensor:
    return torch.randint(2, VOCAB, (2, PROMPT + NEW), generator=torch.Generator().manual_seed(1))


def source() -> tuple[torch.Tensor, torch.Tensor]:
    """A source batch of 2, the second row padded after 5 of its 13 tokens."""
    padding = torch.ones(2, 13, dtype=torch.bool)
    padding[1, 5:] = False
    ids = torch.randint(2, VOCAB, (2, 13), generator=torch.Generator().manual_seed(3))
    return ids.masked_fill(~padding, 0), padding


def fed(decode, ids: torch.Tensor) -> torch.Tensor:
    """The logits of a prompt of PROMPT tokens, then of each later token fed one at a time."""
    return torch.cat([decode(ids[:, :PROMPT])] + [decode(ids[:, t:t + 1]) for t in range(PROMPT, ids.shape[1])], 1)


@torch.no_grad()
@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral"])
def test_static_cache_logits_equal_the_dynamic_cache(family):
    net = converted(family, reference(family))
    ids = tokens()
    cache = net.new_cache()
    static = StaticDecoder(net, net.head, ids.shape[1], ids.device, lambda t, c: net(t, cache=c))
    assert_matches(fed(static, ids), fed(lambda t: net(t, cache=cache), ids), what="static-cache decoding")
    assert static.cache.layers[0]._buffers[0].shape[2] == ids.shape[1]  # one buffer of the final length


@torch.no_grad()
def test_static_cache_t5_decoder_equals_the_dynamic_cache():
    net = converted("t5", reference("t5"))
    ids, padding = source()
    memory = net.encode(ids, padding)
    target = tokens()
    cache = net.new_cache()
    static = static_decoder(net, memory, padding, target.shape[1], compile=False)
    assert_matches(fed(static, target), fed(lambda t: net.decode(t, memory, padding, cache=cache), target),
                   what="static-cache T5 decoding")


def test_compile_refuses_a_length_past_the_context_naming_it():
    net = converted("llama", reference("llama"))
    with pytest.raises(ValueError, match=r"compile=true .* prompt \+ max_new_tokens = 40, more than the model's "
                                         r"context of 32: lower max_new_tokens"):
        generate(net, tokens()[:, :PROMPT], 29, temperature=0, compile=True)


@pytest.mark.slow
@torch.no_grad()
@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral"])
def test_compiled_generate_gives_the_eager_and_transformers_tokens_in_one_graph(family):
    ref = reference(family)
    net = converted(family, ref)
    prompt = tokens()[:, :PROMPT]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = generate(net, prompt, NEW, temperature=0, compile=True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1  # every step ran the one graph
    assert torch.equal(compiled, generate(net, prompt, NEW, temperature=0))
    theirs = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    assert torch.equal(compiled, theirs)


@pytest.mark.slow
@torch.no_grad()
def test_compiled_t5_greedy_gives_the_eager_and_transformers_tokens():
    ref = reference("t5")
    net = converted("t5", ref)
    ids, padding = source()
    start = torch.zeros(2, 1, dtype=torch.long)
    compiled = greedy(net, ids, start, -1, padding, max_new_tokens=NEW, compile=True)  # eos -1: never stops
    assert torch.equal(compiled, greedy(net, ids, start, -1, padding, max_new_tokens=NEW))
    theirs = ref.generate(input_ids=ids, attention_mask=padding.long(), max_new_tokens=NEW, min_new_tokens=NEW,
                          do_sample=False, eos_token_id=None)
    assert torch.equal(compiled, theirs[:, 1:])


@pytest.mark.slow
def test_zoo_generate_compile_true_prints_the_eager_continuation(tmp_path, capsys):
    tok = CharTokenizer.from_text(TEXT)
    checkpoint(tmp_path / "lm.ckpt", "llama", {"vocab_size": tok.vocab_size}, *TINY_LM, tokenizer=tok)
    outputs = []
    for compile in ("false", "true"):
        call("generate", [f"ckpt={tmp_path / 'lm.ckpt'}", "prompt=First", "max_new_tokens=12", "temperature=0",
                          f"compile={compile}"])
        outputs.append(capsys.readouterr().out)
    assert outputs[0].startswith("First") and outputs[0] == outputs[1]
