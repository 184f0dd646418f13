"""Exactness: a tiny random Hugging Face Whisper, converted, gives the same logits; the
zoo's log-mel is WhisperFeatureExtractor's."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

from exactness import assert_matches, randomise
from zoo.data.audio import SAMPLE_RATE, LogMel
from zoo.convert.whisper import from_transformers
from zoo.nn.positions import sinusoids


def tiny_whisper(attn_implementation: str = "eager", randomised: bool = True) -> WhisperForConditionalGeneration:
    """A tiny Whisper, every parameter drawn away from its init unless ``randomised`` is false."""
    torch.manual_seed(0)
    cfg = WhisperConfig(
        vocab_size=99, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_source_positions=30, max_target_positions=40, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1, attn_implementation=attn_implementation,
    )
    hf = WhisperForConditionalGeneration(cfg).eval()
    return randomise(hf) if randomised else hf


def test_log_mel_matches_whisper_feature_extractor():
    t = torch.arange(int(1.7 * SAMPLE_RATE), dtype=torch.float64) / SAMPLE_RATE
    g = torch.Generator().manual_seed(0)
    wave = (0.3 * torch.sin(2 * math.pi * 440 * t) + 0.1 * torch.sin(2 * math.pi * 2500 * t * (1 + t))).float()
    wave = wave + 0.01 * torch.randn(wave.shape, generator=g)
    ref = WhisperFeatureExtractor()(wave.numpy(), sampling_rate=SAMPLE_RATE, return_tensors="pt",
                                    padding="longest").input_features[0]
    ours = LogMel()(wave)
    assert ours.shape == ref.shape == (80, len(wave) // 160)
    # Looser than the shared bound, on purpose: the reference is numpy's float64 STFT and mel
    # filterbank cast to float32 at the end, ours torchaudio's float32 STFT; log10 of small
    # powers magnifies that difference (the features are about 1 in size).
    assert_matches(ours, ref.to(ours.dtype), atol=1e-4, rtol=0, what="log-mel features")


@pytest.mark.parametrize("attn,dtype", [("eager", torch.float32), ("sdpa", torch.float32), ("sdpa", torch.float64)])
@pytest.mark.parametrize("side", ["right", "left"])
def test_converted_whisper_logits_match(attn, dtype, side):
    """On a randomised reference, with padded decoder targets (left and right; compared at the real
    positions) of an odd length. float64 under SDPA: the reference then computes in float64 throughout."""
    hf = tiny_whisper(attn)
    zoo = from_transformers(hf).eval()
    hf, zoo = hf.to(dtype), zoo.to(dtype)
    features = torch.randn(2, 80, 2 * hf.config.max_source_positions, dtype=dtype)
    target = torch.randint(3, 99, (2, 9))
    real = torch.ones(2, 9, dtype=torch.bool)
    real[1, 6:] = False  # the second target is 6 long, padded to 9
    if side == "left":
        real = real.flip(1)
    target = target.masked_fill(~real, 0)
    with torch.no_grad():
        ref = hf(input_features=features, decoder_input_ids=target, decoder_attention_mask=real.long()).logits
        ours = zoo(features, target, target_padding=real)
    assert ours.shape == ref.shape == (2, 9, 99)
    assert_matches(ours, ref, where=real[..., None], what=f"Whisper logits ({side} padding)")


def test_converter_copies_the_stored_position_table():
    hf = tiny_whisper(randomised=False)  # at init: its table is the formula
    with torch.no_grad():  # a table that differs from the formula must still be copied exactly
        hf.model.encoder.embed_positions.weight.add_(0.5)
    zoo = from_transformers(hf)
    torch.testing.assert_close(zoo.encoder.embedder.positions.weight, hf.model.encoder.embed_positions.weight,
                               rtol=0, atol=0)
    # and the formula (Whisper's 'concat' layout) is the one Whisper initialises with
    torch.testing.assert_close(sinusoids(30, 64, "concat"), hf.model.encoder.embed_positions.weight - 0.5,
                               rtol=0, atol=1e-5)


def test_kv_cache_decoding_matches_full_decoding():
    zoo = from_transformers(tiny_whisper()).eval()
    features = torch.randn(1, 80, 60)
    target = torch.randint(3, 99, (1, 7))
    with torch.no_grad():
        memory = zoo.encode(features)
        full = zoo.decode(target, memory)
        cache = zoo.new_cache()
        steps = [zoo.decode(target[:, i : i + 1], memory, cache=cache) for i in range(target.shape[1])]
    assert_matches(torch.cat(steps, dim=1), full, what="cached decoding")


def test_encoder_rejects_wrong_feature_shape():
    zoo = from_transformers(tiny_whisper())
    with pytest.raises(ValueError, match="expected \\(batch, 80, frames\\)"):
        zoo.encode(torch.randn(1, 64, 60))
