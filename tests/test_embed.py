"""Hidden states on request (every container's ``features``) against the references'
``output_hidden_states``, the head never run; and ``zoo embed`` on zoo checkpoints, Hugging Face
folders and sentence-transformers folders the tests write themselves."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, T5Config, T5ForConditionalGeneration

from exactness import assert_matches
from test_tower import _llava
from zoo.convert import bert, gpt2, t5


def no_head(net: torch.nn.Module) -> None:
    """Make running ``net``'s head an error: ``features`` must not call it."""
    def refuse(*_):
        raise AssertionError("the head ran")

    net.head.register_forward_pre_hook(refuse)


def tiny_bert_config(**kw) -> BertConfig:
    return BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                      max_position_embeddings=24, attn_implementation="sdpa", **kw)


def padded_ids(vocab: int, pad_from: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (2, 16) and a padding mask (True = real) whose second row ends in pads."""
    ids = torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    real = torch.ones_like(ids, dtype=torch.bool)
    real[1, pad_from:] = False
    return ids, real


@torch.no_grad()
def test_bert_features_are_the_reference_hidden_states_at_every_layer():
    torch.manual_seed(0)
    hf = BertModel(tiny_bert_config()).eval()
    with pytest.warns(UserWarning, match="no MLM head"):
        net = bert._from_config_and_state(hf.config.to_dict(), hf.state_dict(), "BertModel")
    no_head(net)
    ids, real = padded_ids(97)
    ref = hf(input_ids=ids, attention_mask=real.long(), output_hidden_states=True)
    where = real[:, :, None]  # padded positions' states are meaningless in both
    assert_matches(net.features(ids, real), ref.last_hidden_state, where, what="last hidden state")
    for layer, states in enumerate(ref.hidden_states):
        assert_matches(net.features(ids, real, layer=layer), states, where, what=f"hidden state {layer}")
    assert_matches(net.features(ids, real, layer=-2), ref.hidden_states[-2], where, what="hidden state -2")


@torch.no_grad()
def test_gpt2_features_are_the_reference_hidden_states_and_the_model_is_left_as_it_was():
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=97, n_positions=40, n_embd=48, n_layer=3, n_head=4,
                                    attn_implementation="sdpa")).eval()
    net = gpt2.from_transformers(hf).eval()
    x = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(1))
    logits = net(x)
    ref = hf(x, output_hidden_states=True).hidden_states  # the last entry is after GPT-2's final norm
    no_head(net)
    assert_matches(net.features(x), ref[-1], what="last hidden state")
    for layer in range(3):
        assert_matches(net.features(x, layer=layer), ref[layer], what=f"hidden state {layer}")
    net.head._forward_pre_hooks.clear()
    assert torch.equal(net(x), logits)  # every layer and the final norm run again


@torch.no_grad()
def test_t5_features_of_either_tower():
    torch.manual_seed(0)
    hf = T5ForConditionalGeneration(T5Config(vocab_size=60, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                             num_decoder_layers=3, num_heads=4, decoder_start_token_id=0)).eval()
    net = t5.from_transformers(hf)
    no_head(net)
    source, real = padded_ids(60)
    target = torch.randint(0, 60, (2, 7), generator=torch.Generator().manual_seed(2))
    ref = hf(input_ids=source, attention_mask=real.long(), decoder_input_ids=target, output_hidden_states=True)
    where = real[:, :, None]
    assert_matches(net.features(source, real), ref.encoder_last_hidden_state, where, what="encoder output")
    assert_matches(net.features(source, real, layer=1), ref.encoder_hidden_states[1], where, what="encoder layer 1")
    assert_matches(net.features(source, real, target), ref.decoder_hidden_states[-1], what="decoder output")
    assert_matches(net.features(source, real, target, layer=2), ref.decoder_hidden_states[2], what="decoder layer 2")


@torch.no_grad()
def test_llava_features_are_what_its_head_reads():
    net = _llava().eval()
    tokens = torch.tensor([[9] + [3] * net.embedder.n_image_tokens + [5, 6, 7]] * 2)
    images = torch.randn(2, 3, 32, 32)
    seen = {}
    handle = net.head.register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    net(tokens, images=images)
    handle.remove()
    no_head(net)
    assert_matches(net.features(tokens, images=images), seen["x"], what="LLaVA last hidden state")
    inner = net.features(tokens, images=images, layer=1)
    assert inner.shape == seen["x"].shape and not torch.allclose(inner, seen["x"])


def test_a_layer_outside_the_tower_names_its_depth():
    torch.manual_seed(0)
    net = gpt2.from_transformers(GPT2LMHeadModel(GPT2Config(vocab_size=20, n_positions=8, n_embd=16, n_layer=2,
                                                            n_head=2)))
    with pytest.raises(ValueError, match=r"layer=5: the decoder tower has 2 layers; give 0..2"):
        net.features(torch.zeros(1, 4, dtype=torch.long), layer=5)
