"""DistilBERT: exact against a tiny randomised ``DistilBertForMaskedLM`` with padding in the batch
(learned and sinusoidal positions), read from a folder, exported both ways, and the real layout of
the released checkpoint (distilbert-base-uncased's config.json, narrower and shallower)."""

from __future__ import annotations

import pytest
import torch
import transformers as T

from encoder_family import MLM_DIMS, check_folder, check_round_trip, check_zoo_export, real_tokens
from exactness import assert_matches, randomise
from zoo.convert import distilbert
from zoo.convert.common import compose_config

VOCAB = 67


def tiny(**kw) -> T.DistilBertForMaskedLM:
    settings = dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=48, max_position_embeddings=24,
                    attn_implementation="sdpa")
    torch.manual_seed(0)
    return randomise(T.DistilBertForMaskedLM(T.DistilBertConfig(**(settings | kw))).eval())


@pytest.mark.parametrize("sinusoidal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@torch.no_grad()
def test_mlm_logits_match_the_reference_with_padding(dtype, sinusoidal):
    """float64 too: DistilBERT under SDPA computes in float64 throughout. Length 13: odd."""
    hf = tiny(sinusoidal_pos_embds=sinusoidal)
    net = distilbert.from_transformers(hf)
    assert net.embedder.segments is None and isinstance(net.embedder.positions.weight, torch.nn.Parameter) != sinusoidal
    hf, net = hf.to(dtype), net.to(dtype)
    padding = torch.ones(2, 13, dtype=torch.bool)
    padding[1, 8:] = False
    ids = real_tokens(VOCAB, (2, 13)).masked_fill(~padding, 0)
    ref = hf(input_ids=ids, attention_mask=padding.long()).logits
    assert_matches(net(ids, key_padding=padding), ref, padding[..., None], what="DistilBERT logits")
    assert net.head.decoder.weight is net.embedder.tokens.weight


def test_an_untied_head_is_refused():
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        distilbert.distilbert_shape(tiny().config.to_dict() | {"tie_word_embeddings": False})


def test_folder(tmp_path):
    padding = torch.ones(2, 17, dtype=torch.bool)
    padding[0, 9:] = False
    check_folder(tmp_path, tiny(), "distilbert", {"vocab_size": VOCAB}, padding)


def test_export_round_trip():
    check_round_trip(tiny(), distilbert, "distilbert", distilbert.distilbert_shape)


def test_zoo_export_writes_a_folder_auto_model_loads(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, "distilbert", "DistilBertForMaskedLM", {"vocab_size": 50})
    assert (config["max_position_embeddings"], config["sinusoidal_pos_embds"]) == (24, False)


def test_the_released_layout_reads_to_the_reference_logits(tmp_path):
    """distilbert-base-uncased's config.json with 2 layers of 2 heads of 16 (not 6 of 12 heads of 64),
    hidden_dim 128 (not 3072): its vocabulary (30,522 rows) kept, in the default suite."""
    released = dict(activation="gelu", architectures=["DistilBertForMaskedLM"], attention_dropout=0.1, dim=32,
                    dropout=0.1, hidden_dim=128, initializer_range=0.02, max_position_embeddings=512,
                    n_heads=2, n_layers=2, pad_token_id=0, qa_dropout=0.1, seq_classif_dropout=0.2,
                    sinusoidal_pos_embds=False, tie_weights_=True, vocab_size=30522)
    torch.manual_seed(0)
    hf = randomise(T.DistilBertForMaskedLM(T.DistilBertConfig(**released)).eval())
    padding = torch.ones(2, 29, dtype=torch.bool)
    padding[1, 21:] = False
    check_folder(tmp_path, hf, "distilbert", {"vocab_size": 30522}, padding)


def test_presets_have_the_paper_shapes():
    cfg = compose_config(["model=distilbert_base"])
    cfg.dims = MLM_DIMS | {"vocab_size": 30522}
    net = cfg.model.net
    assert (net.n_layers, net.block.d_model, net.block.n_heads, net.block.d_ff, net.context,
            net.embedder.n_segments, net.block.norm_eps) == (6, 768, 12, 3072, 512, 0, 1e-12)
    small = compose_config(["model=distilbert"]).model.net
    assert small.n_layers * small.block.d_model <= 4 * 256  # CPU-sized


def test_the_sinusoidal_table_is_the_references():
    from zoo.nn.positions import sinusoids

    fresh = T.DistilBertForMaskedLM(T.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=1, n_heads=4, hidden_dim=48,
                                                       max_position_embeddings=24, sinusoidal_pos_embds=True))
    ref = fresh.distilbert.embeddings.position_embeddings.weight.detach()
    assert_matches(sinusoids(24, 32), ref, what="sinusoidal positions")
