"""Exactness: Hugging Face BERT -> zoo BERT gives the same MLM logits and hidden states."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

from exactness import assert_matches, randomise
from zoo.convert.bert import load_checkpoint_dir, from_transformers


def tiny_config(**kw) -> BertConfig:
    return BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=48, max_position_embeddings=24, type_vocab_size=2,
                      attn_implementation="sdpa", **kw)


def batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids (2, 16), segments, and a padding mask whose second row ends in 5 pads (id 0).
    BERT pads on the right only (learned absolute positions from 0)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 16), generator=g)
    segments = torch.zeros_like(ids)
    segments[:, 8:] = 1
    padding = torch.ones_like(ids, dtype=torch.bool)
    padding[1, 11:] = False
    return ids.masked_fill(~padding, 0), segments, padding


def hidden_states(net: torch.nn.Module, ids, segments, padding) -> torch.Tensor:
    """The stack's output (B, L, D): what BertModel calls last_hidden_state."""
    seen = {}
    handle = net.stack.register_forward_hook(lambda m, a, out: seen.setdefault("h", out))
    net(ids, key_padding=padding, segments=segments)
    handle.remove()
    return seen["h"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@torch.no_grad()
def test_mlm_logits_match_bert_for_masked_lm(dtype):
    """float64 too: BERT under SDPA computes in float64 throughout."""
    torch.manual_seed(0)
    hf = randomise(BertForMaskedLM(tiny_config()).eval())
    net = from_transformers(hf)
    hf, net = hf.to(dtype), net.to(dtype)
    ids, segments, padding = batch(97)
    ref = hf(input_ids=ids, token_type_ids=segments, attention_mask=padding.long()).logits
    out = net(ids, key_padding=padding, segments=segments)
    # padded positions' outputs are meaningless in both models: compare the real ones
    assert_matches(out, ref, padding[:, :, None], what="BERT MLM logits")
    assert net.head.decoder.weight is net.embedder.tokens.weight  # still tied after loading


@torch.no_grad()
def test_keep_scores_only_the_kept_positions():
    torch.manual_seed(0)
    net = from_transformers(randomise(BertForMaskedLM(tiny_config()).eval()))
    ids, segments, padding = batch(97)
    keep = torch.rand(ids.shape, generator=torch.Generator().manual_seed(1)) < 0.3
    full = net(ids, key_padding=padding, segments=segments)
    assert_matches(net(ids, key_padding=padding, segments=segments, keep=keep), full[keep], what="kept logits")


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
@torch.no_grad()
def test_checkpoint_dir_reproduces_bert_model_hidden_states(tmp_path, fmt):
    torch.manual_seed(0)
    hf = randomise(BertModel(tiny_config()).eval())
    hf.save_pretrained(tmp_path, safe_serialization=fmt == "safetensors")
    with pytest.warns(UserWarning, match="no MLM head"):
        net = load_checkpoint_dir(tmp_path)
    ids, segments, padding = batch(97)
    ref = hf(input_ids=ids, token_type_ids=segments, attention_mask=padding.long()).last_hidden_state
    assert_matches(hidden_states(net, ids, segments, padding), ref, padding[:, :, None], what="hidden states")


def test_checkpoint_dir_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_checkpoint_dir(tmp_path)
    tiny_config().save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_checkpoint_dir(tmp_path)


def test_longer_than_position_table_names_lengths():
    net = from_transformers(BertForMaskedLM(tiny_config()).eval())
    with pytest.raises(ValueError, match="length 30 .* 24"):
        net(torch.zeros(1, 30, dtype=torch.long))
