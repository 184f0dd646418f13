"""zoo Whisper vs transformers WhisperForConditionalGeneration and openai-whisper's
``whisper.model.Whisper``: training step time and peak memory at the same shape; then (unless
--no-decode) transcription of one clip with the KV cache, encoder included, all from the same
(converted) weights and each decoding exactly ``--decode-tokens`` new tokens (end-of-text is an id
no logit has, so nothing stops early): greedy, the zoo's ``greedy`` against transformers'
``generate`` and a greedy loop over openai-whisper's decoder with its ``install_kv_cache_hooks``
cache; beam search (4 beams, length penalty 1, no early stop), the zoo's ``beam_search`` against
``generate(num_beams=4)``. Each prints milliseconds, new tokens/s, real-time factor (decode time /
audio seconds; medians of --steps alternating rounds), whether the tokens match the zoo's, and
zoo / peer time (below 1: the zoo faster).

    python benchmarks/whisper.py                  # Whisper tiny's Block (4+4 layers, 384 wide), 10 s audio, CPU fp32
    python benchmarks/whisper.py --layers 2 --width 192 --heads 4 --seconds 4 --batch 8
    python benchmarks/whisper.py --device cuda --layers 6 --width 512 --heads 8 --seconds 30

Hugging Face's (and openai-whisper's) encoder takes exactly ``2 x max_source_positions`` frames,
so every model gets ``--seconds`` of log-mel frames and the position tables are sized to it.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from common import add_run_args, alternate_medians, compare, make_step, peer
from zoo.convert.common import build_net, shape_overrides
from zoo.convert.whisper import from_transformers, whisper_shape
from zoo.models.decoding import beam_search, greedy

transformers = peer("transformers")
openai_whisper = peer("whisper.model")


# Hugging Face's names -> openai-whisper's, inside a layer and outside the layers.
_OPENAI_LAYER = {"self_attn.q_proj": "attn.query", "self_attn.k_proj": "attn.key",
                 "self_attn.v_proj": "attn.value", "self_attn.out_proj": "attn.out", "self_attn_layer_norm": "attn_ln",
                 "encoder_attn.q_proj": "cross_attn.query", "encoder_attn.k_proj": "cross_attn.key",
                 "encoder_attn.v_proj": "cross_attn.value", "encoder_attn.out_proj": "cross_attn.out",
                 "encoder_attn_layer_norm": "cross_attn_ln", "fc1": "mlp.0", "fc2": "mlp.2",
                 "final_layer_norm": "mlp_ln"}
_OPENAI_TOP = {"encoder.embed_positions.weight": "encoder.positional_embedding",
               "encoder.layer_norm": "encoder.ln_post", "decoder.embed_tokens": "decoder.token_embedding",
               "decoder.embed_positions.weight": "decoder.positional_embedding", "decoder.layer_norm": "decoder.ln"}


def openai_from_transformers(hf, dims) -> torch.nn.Module:
    """An openai-whisper ``Whisper`` holding the weights of Hugging Face's ``hf`` (``proj_out`` is
    tied to the token embedding in both, so it is left out)."""
    state = {}
    for name, tensor in hf.model.state_dict().items():
        for old, new in _OPENAI_TOP.items():
            name = name.replace(old, new)
        name = name.replace(".layers.", ".blocks.")
        for old, new in _OPENAI_LAYER.items():
            name = name.replace(f".{old}.", f".{new}.")
        state[name] = tensor
    model = openai_whisper.Whisper(dims)
    model.load_state_dict(state)  # strict: every weight mapped, none left over
    return model


@torch.no_grad()
def openai_greedy(model, features: torch.Tensor, prompt: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """openai-whisper's decoder, greedy with its own KV cache (``install_kv_cache_hooks``), one new
    token per step, no stopping: features (B, 80, frames), prompt (B, P) -> new ids (B, n_tokens)."""
    audio = model.encoder(features)
    cache, hooks = model.install_kv_cache_hooks()
    try:
        tokens, new = prompt, prompt
        for _ in range(n_tokens):
            new = model.decoder(new, audio, kv_cache=cache)[:, -1].argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, new], dim=1)
    finally:
        for hook in hooks:
            hook.remove()
    return tokens[:, prompt.shape[1]:]


@torch.no_grad()
def hf_generate(hf, features: torch.Tensor, prompt: torch.Tensor, n_tokens: int, never: int,
                beams: int = 1) -> torch.Tensor:
    """Hugging Face's ``generate`` (greedy, or beam search without early stopping), exactly
    ``n_tokens`` new ids (B, n_tokens): its end-of-text is ``never``, an id no logit has."""
    return hf.generate(input_features=features, decoder_input_ids=prompt, max_new_tokens=n_tokens,
                       num_beams=beams, do_sample=False, length_penalty=1.0, early_stopping=False,
                       eos_token_id=never, pad_token_id=0)[:, -n_tokens:]


def print_decoding(title: str, medians: dict[str, float], n_tokens: int, seconds: float) -> None:
    """Each decoder's median time, new tokens/s and real-time factor, then zoo / each peer."""
    print(title)
    for label, t in medians.items():
        print(f"{label:>36}: {t * 1000:8.1f} ms   {n_tokens / t:7.1f} tokens/s   real-time factor {t / seconds:.4f}")
    zoo_label, *peers = medians
    for label in peers:
        print(f"{'zoo / ' + label:>36}: time {medians[zoo_label] / medians[label]:.3f}x", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=4, help="encoder and decoder layers each")
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--seconds", type=float, default=10.0, help="audio length (log-mel frames = 100 per second)")
    p.add_argument("--target", type=int, default=32, help="target tokens per training example")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--decode-tokens", type=int, default=32, help="tokens generated in the speed test")
    p.add_argument("--no-decode", action="store_true", help="time the training step only")
    add_run_args(p)
    a = p.parse_args()
    torch.manual_seed(0)
    frames = int(a.seconds * 100) // 2 * 2
    cfg = transformers.WhisperConfig(
        vocab_size=a.vocab, num_mel_bins=80, d_model=a.width, encoder_layers=a.layers, decoder_layers=a.layers,
        encoder_attention_heads=a.heads, decoder_attention_heads=a.heads, encoder_ffn_dim=4 * a.width,
        decoder_ffn_dim=4 * a.width, max_source_positions=frames // 2, max_target_positions=448,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, attn_implementation="sdpa",
    )
    dims = openai_whisper.ModelDimensions(
        n_mels=80, n_audio_ctx=frames // 2, n_audio_state=a.width, n_audio_head=a.heads, n_audio_layer=a.layers,
        n_vocab=a.vocab, n_text_ctx=448, n_text_state=a.width, n_text_head=a.heads, n_text_layer=a.layers)
    x = torch.randn(a.batch, 80, frames, device=a.device)
    y_in = torch.randint(3, a.vocab, (a.batch, a.target), device=a.device)
    y_out = torch.randint(3, a.vocab, (a.batch, a.target), device=a.device)

    def seq2seq_step(model, logits):
        model = model.to(a.device).train()
        return make_step(model, lambda: F.cross_entropy(logits(model).flatten(0, 1), y_out.flatten()), a.dtype, compile=a.compile)

    def zoo():
        net = build_net("whisper", shape_overrides(whisper_shape(cfg.to_dict())), {"vocab_size": a.vocab})
        return seq2seq_step(net, lambda m: m(x, y_in))

    def hf():
        return seq2seq_step(transformers.WhisperForConditionalGeneration(cfg),
                            lambda m: m(input_features=x, decoder_input_ids=y_in).logits)

    def openai():
        return seq2seq_step(openai_whisper.Whisper(dims), lambda m: m(x, y_in))

    shape = (f"{a.layers}+{a.layers} layers, {a.width} wide, {a.heads} heads, {a.seconds:g} s audio ({frames} frames), "
             f"target {a.target}, batch {a.batch}")
    compare("whisper", shape, "zoo Whisper", zoo, {"WhisperForConditionalGeneration": hf,
                                                   "openai-whisper Whisper": openai}, a)
    if a.no_decode:
        return

    # Transcribing one clip with the KV cache (encoder included): seconds of compute per second of
    # audio. Every side decodes exactly --decode-tokens tokens from the same weights.
    transformers.logging.set_verbosity_error()  # generate's notes on Whisper's own generation defaults
    ref = transformers.WhisperForConditionalGeneration(cfg).to(a.device).eval()
    zoo = from_transformers(ref).to(a.device).eval()
    oai = openai_from_transformers(ref, dims).to(a.device).eval()
    clip, prompt, n = x[:1], torch.ones(1, 1, dtype=torch.long, device=a.device), a.decode_tokens
    never = a.vocab  # an id no logit has: no side stops early, none has a logit suppressed
    greedy_fns = {"zoo greedy": lambda: greedy(zoo, clip, prompt, never, max_new_tokens=n),
                  "transformers generate": lambda: hf_generate(ref, clip, prompt, n, never),
                  "openai-whisper decoder": lambda: openai_greedy(oai, clip, prompt, n)}
    tokens = {label: fn() for label, fn in greedy_fns.items()}
    same = ", ".join(f"{label} {torch.equal(tokens['zoo greedy'], t)}" for label, t in list(tokens.items())[1:])
    print_decoding(f"greedy, {n} new tokens of {a.seconds:g} s audio, KV cache (same tokens as the zoo: {same})",
                   alternate_medians(greedy_fns, a.steps, a.device), n, a.seconds)

    # Beam search, 4 beams, length penalty 1, run to the full length (no end-of-text, no early stop).
    beam_fns = {"zoo beam search": lambda: beam_search(zoo, clip, prompt, never, beam_size=4, max_new_tokens=n)[:, :n],
                "transformers generate": lambda: hf_generate(ref, clip, prompt, n, never, beams=4)}
    ours, theirs = (fn() for fn in beam_fns.values())
    print(f"zoo best beam:          {ours[0].tolist()}\ntransformers best beam: {theirs[0].tolist()}")
    print_decoding(f"beam search (4 beams), {n} new tokens of {a.seconds:g} s audio (same best beam: "
                   f"{torch.equal(ours, theirs)})", alternate_medians(beam_fns, a.steps, a.device), n, a.seconds)


if __name__ == "__main__":
    main()
