"""zoo Whisper vs transformers WhisperForConditionalGeneration and openai-whisper's
``whisper.model.Whisper``: training step time and peak memory at the same shape; then (unless
--no-decode) greedy transcription speed (real-time factor) with the KV cache against
transformers, both decoding the same number of tokens from the same (converted) weights.

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
from zoo.inference.decoding import greedy

transformers = peer("transformers")
openai_whisper = peer("whisper.model")


@torch.no_grad()
def hf_greedy(hf, features: torch.Tensor, prompt: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """Hugging Face's model decoding greedily with its own KV cache (no stopping, ``n_tokens`` steps)."""
    memory = hf.model.encoder(features)
    cache = transformers.EncoderDecoderCache(transformers.DynamicCache(), transformers.DynamicCache())
    tokens, new = prompt, prompt
    for _ in range(n_tokens):
        out = hf(encoder_outputs=memory, decoder_input_ids=new, cache=cache, use_cache=True)
        new = out.logits[:, -1].argmax(dim=-1, keepdim=True)
        tokens = torch.cat([tokens, new], dim=1)
    return tokens


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
    x = torch.randn(a.batch, 80, frames, device=a.device)
    y_in = torch.randint(3, a.vocab, (a.batch, a.target), device=a.device)
    y_out = torch.randint(3, a.vocab, (a.batch, a.target), device=a.device)

    def seq2seq_step(model, logits):
        model = model.to(a.device).train()
        return make_step(model, lambda: F.cross_entropy(logits(model).flatten(0, 1), y_out.flatten()), a.dtype)

    def zoo():
        net = build_net("whisper", shape_overrides(whisper_shape(cfg.to_dict())), {"vocab_size": a.vocab})
        return seq2seq_step(net, lambda m: m(x, y_in))

    def hf():
        return seq2seq_step(transformers.WhisperForConditionalGeneration(cfg),
                            lambda m: m(input_features=x, decoder_input_ids=y_in).logits)

    def openai():
        dims = openai_whisper.ModelDimensions(
            n_mels=80, n_audio_ctx=frames // 2, n_audio_state=a.width, n_audio_head=a.heads, n_audio_layer=a.layers,
            n_vocab=a.vocab, n_text_ctx=448, n_text_state=a.width, n_text_head=a.heads, n_text_layer=a.layers)
        return seq2seq_step(openai_whisper.Whisper(dims), lambda m: m(x, y_in))

    shape = (f"{a.layers}+{a.layers} layers, {a.width} wide, {a.heads} heads, {a.seconds:g} s audio ({frames} frames), "
             f"target {a.target}, batch {a.batch}")
    compare("whisper", shape, "zoo Whisper", zoo, {"WhisperForConditionalGeneration": hf,
                                                   "openai-whisper Whisper": openai}, a)
    if a.no_decode:
        return

    # Greedy transcription of one clip with the KV cache: seconds of compute per second of audio.
    ref = transformers.WhisperForConditionalGeneration(cfg).to(a.device).eval()
    zoo = from_transformers(ref).to(a.device).eval()
    clip, prompt = x[:1], torch.ones(1, 1, dtype=torch.long, device=a.device)
    never = a.vocab  # an id no logit has: decode exactly --decode-tokens tokens, like the reference
    medians = alternate_medians({"zoo": lambda: greedy(zoo, clip, prompt, never, max_new_tokens=a.decode_tokens),
                                 "ref": lambda: hf_greedy(ref, clip, prompt, a.decode_tokens)}, 5, a.device)
    t_zoo, t_ref = medians["zoo"], medians["ref"]
    ours = greedy(zoo, clip, prompt, never, max_new_tokens=a.decode_tokens)
    theirs = hf_greedy(ref, clip, prompt, a.decode_tokens)[:, 1:]
    print(f"greedy, {a.decode_tokens} tokens of {a.seconds:g} s audio (same tokens: {torch.equal(ours, theirs)})")
    print(f"{'zoo Whisper':>24}: {t_zoo * 1000:8.1f} ms   real-time factor {t_zoo / a.seconds:.4f}")
    print(f"{'WhisperForConditional..':>24}: {t_ref * 1000:8.1f} ms   real-time factor {t_ref / a.seconds:.4f}")
    print(f"{'ratio zoo/reference':>24}: time {t_zoo / t_ref:.3f}x")


if __name__ == "__main__":
    main()
