"""Greedy decoding speed: the zoo against transformers' ``generate`` on the same (converted)
weights, new tokens per second, at batch 1 and 8; and how the Mistral cache grows.

    python benchmarks/decoding.py                       # gpt2, llama, mistral, t5; batch 1 and 8
    python benchmarks/decoding.py --only mistral --batches 1 --new-tokens 128
    python benchmarks/decoding.py --compile --cache-tokens 0   # compiled against compiled

Each row builds the reference from its transformers config (random weights, SDPA), converts it
with the family's own ``zoo.convert.<family>.from_transformers`` (so both sides are one
network), and times greedy decoding of exactly ``--new-tokens`` tokens after a ``--prompt``-token
prompt, in alternating rounds (median): the zoo's ``zoo.models.sampling.generate(temperature=0)``
(T5: ``zoo.models.decoding.greedy`` after encoding a source of ``--prompt`` tokens), transformers'
``generate(do_sample=False)`` with end-of-sequence switched off, both with their KV caches. Mistral's
prompt is longer than its window (``--window``), so its cache rolls from the first step. Each
row also says whether both produced the same tokens.

Then the cache: Mistral decodes ``--cache-tokens`` tokens one at a time after the prompt, and
the bytes its cache holds (keys and values of every layer) are printed at a few lengths, for the
zoo's rolling buffer and transformers' cache: flat once past the window where the buffer rolls.

``--compile``: compiled against compiled. The zoo decodes with ``compile=True`` (a static cache of
the final length, each step one ``fullgraph`` graph: ``zoo.models.static_decoding``), transformers
with ``cache_implementation="static"`` and its own compiled forward (a ``CompileConfig`` of
``fullgraph=True``, inductor's default mode, allowed on the CPU). Both sides' first call (which
compiles) is timed apart, as the first-token latency, and each row ends with
``<row>: zoo / transformers tokens/s = <ratio> (goal >= 2)`` (>= 1.2 at batch 8).
"""

from __future__ import annotations

import argparse
import importlib
import time

import torch

from common import alternate_medians, peer
from zoo.models.decoding import greedy
from zoo.models.sampling import generate

transformers = peer("transformers")
FAMILIES = ("gpt2", "llama", "mistral", "t5")


def reference(family: str, a: argparse.Namespace, context: int):
    """The transformers model of ``family`` (eval, random weights) at the benchmark's shape."""
    torch.manual_seed(0)
    decoder = dict(vocab_size=a.vocab, hidden_size=a.width, intermediate_size=a.ff, num_hidden_layers=a.layers,
                   num_attention_heads=a.heads, num_key_value_heads=a.heads // 2, max_position_embeddings=context,
                   attn_implementation="sdpa", tie_word_embeddings=False)
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=a.vocab, n_embd=a.width, n_layer=a.layers, n_head=a.heads,
                                      n_positions=context, bos_token_id=1, eos_token_id=1,
                                      attn_implementation="sdpa")
        model = transformers.GPT2LMHeadModel(cfg)
    elif family == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**decoder))
    elif family == "mistral":
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**decoder, sliding_window=a.window))
    else:
        cfg = transformers.T5Config(vocab_size=a.vocab, d_model=a.width, d_kv=a.width // a.heads, d_ff=a.ff,
                                    num_layers=a.layers, num_heads=a.heads, decoder_start_token_id=0,
                                    pad_token_id=0, eos_token_id=1, attn_implementation="sdpa")
        model = transformers.T5ForConditionalGeneration(cfg)
    return model.eval()


GOALS = {1: 2.0, 8: 1.2}  # issue 49: compiled decoding's tokens/s against transformers', by batch


def compiled_generation() -> dict:
    """transformers' ``generate`` arguments for its static cache and compiled forward on the CPU."""
    config = transformers.CompileConfig(fullgraph=True, mode="default")
    config._compile_all_devices = True  # transformers compiles on CUDA only unless told (a class attribute)
    return dict(cache_implementation="static", compile_config=config)


def decode_row(family: str, batch: int, a: argparse.Namespace) -> float:
    """Time both sides' greedy decoding of ``a.new_tokens`` tokens and print tokens/s and the ratio
    (with ``a.compile``, each side's first, compiling call apart); returns the ratio."""
    ref = reference(family, a, a.prompt + a.new_tokens + 1)
    zoo = importlib.import_module(f"zoo.convert.{family}").from_transformers(ref).eval()
    prompt = torch.randint(5, a.vocab, (batch, a.prompt))
    ones = torch.ones_like(prompt)
    never = dict(eos_token_id=None, pad_token_id=0, do_sample=False, max_new_tokens=a.new_tokens,
                 min_new_tokens=a.new_tokens, **(compiled_generation() if a.compile else {}))
    if family == "t5":
        start = torch.zeros(batch, 1, dtype=torch.long)

        def zoo_decode():  # eos -1: no id ends a row, as generate without eos
            return greedy(zoo, prompt, start, eos=-1, max_new_tokens=a.new_tokens, compile=a.compile)

        def ref_decode():
            return ref.generate(input_ids=prompt, attention_mask=ones, **never)[:, 1:]
    else:
        def zoo_decode():
            return generate(zoo, prompt, a.new_tokens, temperature=0, compile=a.compile)[:, a.prompt:]

        def ref_decode():
            return ref.generate(input_ids=prompt, attention_mask=ones, **never)[:, a.prompt:]

    sides = {"zoo": zoo_decode, "transformers": ref_decode}
    with torch.no_grad():
        torch._dynamo.reset()  # each row compiles afresh: its first call is the row's first-token latency
        first = {side: first_call(fn) for side, fn in sides.items()} if a.compile else {}
        seconds = alternate_medians(sides, a.repeats, warmup=0 if a.compile else 1)
        same = torch.equal(zoo_decode(), ref_decode())
    rate = {side: batch * a.new_tokens / s for side, s in seconds.items()}
    ratio = rate["zoo"] / rate["transformers"]
    compiling = f" {first['zoo']:.1f} | {first['transformers']:.1f} |" if a.compile else ""
    print(f"| {family} | {batch} | {rate['zoo']:.0f} | {rate['transformers']:.0f} | "
          f"**{ratio:.2f}x** | {'yes' if same else 'NO'} |{compiling}", flush=True)
    return ratio


def first_call(fn) -> float:
    """Seconds of ``fn``'s first call (a compiled side compiles in it)."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def cache_bytes(layers) -> int:
    """Bytes of the keys and values held by a list of layer caches (zoo's or transformers')."""
    return sum(t.numel() * t.element_size() for layer in layers for t in (getattr(layer, "k", None),
               getattr(layer, "v", None), getattr(layer, "keys", None), getattr(layer, "values", None))
               if isinstance(t, torch.Tensor))


@torch.no_grad()
def cache_growth(a: argparse.Namespace) -> None:
    """Mistral, one token at a time after the prompt: both caches' bytes at a few lengths."""
    ref = reference("mistral", a, a.prompt + a.cache_tokens + 1)
    zoo = importlib.import_module("zoo.convert.mistral").from_transformers(ref).eval()
    tokens = torch.randint(5, a.vocab, (1, a.prompt))
    cache, past = zoo.new_cache(), transformers.DynamicCache(config=ref.config)
    zoo(tokens, cache=cache)
    ref(input_ids=tokens, cache=past, use_cache=True)
    marks = {a.window // 2, a.window, 2 * a.window, a.cache_tokens // 2, a.cache_tokens}
    print(f"\nMistral cache (window {a.window}, prompt {a.prompt}), KiB held after n new tokens, batch 1:")
    print("| new tokens | positions | zoo rolling buffer | transformers DynamicCache |\n|---|---|---|---|")
    new = tokens[:, -1:]
    for n in range(1, a.cache_tokens + 1):
        zoo(new, cache=cache)
        ref(input_ids=new, cache=past, use_cache=True)
        if n in marks:
            print(f"| {n} | {a.prompt + n} | {cache_bytes(cache.layers) / 1024:.0f} | "
                  f"{cache_bytes(past.layers) / 1024:.0f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    p.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--heads", type=int, default=4, help="llama and mistral: half as many key/value heads")
    p.add_argument("--ff", type=int, default=688)
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--prompt", type=int, default=96, help="prompt tokens (T5: source tokens)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--window", type=int, default=64, help="mistral's sliding window (below the prompt)")
    p.add_argument("--cache-tokens", type=int, default=512, help="new tokens of the cache measurement (0: skip it)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds")
    p.add_argument("--compile", action="store_true", help="compiled against compiled: static caches, compiled steps")
    a = p.parse_args()
    print(f"greedy{', compiled, static caches' if a.compile else ''}, {a.layers} layers, {a.width} wide, {a.heads} heads, vocab {a.vocab}, prompt {a.prompt}, "
          f"{a.new_tokens} new tokens, fp32, CPU, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"median of {a.repeats}\n")
    first = " first call s (compiling): zoo | transformers |" if a.compile else ""
    print(f"| family | batch | zoo tokens/s | transformers tokens/s | zoo / transformers | same tokens |{first}")
    print("|---|---|---|---|---|---|" + ("---|---|" if a.compile else ""))
    ratios = {(family, batch): decode_row(family, batch, a) for family in a.only for batch in a.batches}
    if a.compile:
        print()
        for (family, batch), ratio in ratios.items():
            goal = f" (goal >= {GOALS[batch]})" if batch in GOALS else ""
            print(f"{family} batch {batch}: zoo / transformers tokens/s = {ratio:.2f}{goal}")
    if a.cache_tokens and "mistral" in a.only:
        cache_growth(a)


if __name__ == "__main__":
    main()
