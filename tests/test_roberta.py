"""RoBERTa and XLM-R: exact against tiny randomised ``RobertaForMaskedLM`` / ``XLMRobertaForMaskedLM``
with padding in the batch (right and left: the positions count from the ids, padding reads the
padding row), read from a folder, exported both ways, and the real layout of the released
checkpoints (roberta-base's and xlm-roberta-base's config.json, narrower and shallower)."""

from __future__ import annotations

import pytest
import torch
import transformers as T

from encoder_family import MLM_DIMS, check_folder, check_round_trip, check_zoo_export, real_tokens
from exactness import assert_matches, randomise
from zoo.convert import roberta
from zoo.convert.common import compose_config

VOCAB, PAD = 61, 1


def tiny(cls=T.RobertaForMaskedLM, config=T.RobertaConfig, **kw):
    settings = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=48, max_position_embeddings=24, type_vocab_size=1, pad_token_id=PAD,
                    layer_norm_eps=1e-5, attn_implementation="sdpa")
    torch.manual_seed(0)
    return randomise(cls(config(**(settings | kw))).eval())


def padded(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (3, length) and their padding (True at real tokens): full, right-padded, left-padded."""
    padding = torch.ones(3, length, dtype=torch.bool)
    padding[1, length - 5:] = False
    padding[2, :4] = False
    return real_tokens(VOCAB, (3, length)).masked_fill(~padding, PAD), padding


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("cls, config", [(T.RobertaForMaskedLM, T.RobertaConfig),
                                         (T.XLMRobertaForMaskedLM, T.XLMRobertaConfig)])
@torch.no_grad()
def test_mlm_logits_match_the_reference_with_padding_on_either_side(cls, config, dtype):
    """float64 too: RoBERTa under SDPA computes in float64 throughout. Length 13: odd; 22 = the
    whole table (24 rows) after the padding row."""
    hf = tiny(cls, config)
    net = roberta.from_transformers(hf)
    hf, net = hf.to(dtype), net.to(dtype)
    for length in (13, 22):
        ids, padding = padded(length)
        ref = hf(input_ids=ids, attention_mask=padding.long()).logits
        assert_matches(net(ids, key_padding=padding), ref, padding[..., None], what=f"{cls.__name__} logits")
    assert net.head.decoder.weight is net.embedder.tokens.weight  # still tied after loading
    with pytest.raises(ValueError, match="length 23 .* context of 22"):
        net(real_tokens(VOCAB, (1, 23)))


def test_positions_start_after_the_padding_row_and_skip_padding():
    net = roberta.from_transformers(tiny())
    ids = torch.tensor([[5, 6, 7, PAD, PAD], [PAD, PAD, 5, 6, 7]])
    assert net.embedder.position_ids(ids).tolist() == [[2, 3, 4, 1, 1], [1, 1, 2, 3, 4]]
    shape = roberta.roberta_shape(tiny().config.to_dict())
    assert (shape["context"], shape["embedder.max_len"], shape["embedder.position_offset"]) == (22, 24, 2)


@torch.no_grad()
def test_left_padding_needs_the_padding_aware_count():
    """Counting positions over the padding too (the offset alone) moves a left-padded sequence's
    tokens to other rows: the reference's logits are then missed, so the rule above is what matches."""
    hf = tiny()
    net = roberta.from_transformers(hf)
    ids, padding = padded(13)
    ref = hf(input_ids=ids, attention_mask=padding.long()).logits
    net.embedder.position_pad_id = None
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches(net(ids, key_padding=padding), ref, padding[..., None], what="offset-only positions")
    assert_matches(net(ids[:2], key_padding=padding[:2]), ref[:2], padding[:2, :, None], what="no left padding")


def test_a_padding_id_outside_the_table_is_refused():
    config = tiny().config.to_dict() | {"pad_token_id": 30}
    with pytest.raises(ValueError, match="pad_token_id=30"):
        roberta.roberta_shape(config)


def test_folder(tmp_path):
    padding = torch.ones(2, 17, dtype=torch.bool)
    padding[1, 12:] = False
    check_folder(tmp_path, tiny(), "roberta", {"vocab_size": VOCAB, "pad_id": PAD}, padding)


def test_an_encoder_only_folder_keeps_a_fresh_head(tmp_path):
    from test_init_from import objective_from

    torch.manual_seed(0)
    T.RobertaModel(tiny().config).save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="no MLM head"):
        model = objective_from("roberta", tmp_path, MLM_DIMS | {"vocab_size": VOCAB, "pad_id": PAD})
    assert model.net.head.decoder.weight is model.net.embedder.tokens.weight


@pytest.mark.parametrize("cls, config", [(T.RobertaForMaskedLM, T.RobertaConfig),
                                         (T.XLMRobertaForMaskedLM, T.XLMRobertaConfig)])
def test_export_round_trip(cls, config):
    check_round_trip(tiny(cls, config), roberta, "roberta", roberta.roberta_shape)


def test_zoo_export_writes_a_folder_auto_model_loads(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, "roberta", "RobertaForMaskedLM", {"vocab_size": 50, "pad_id": 1})
    assert (config["max_position_embeddings"], config["pad_token_id"], config["type_vocab_size"]) == (26, 1, 1)


def test_an_xlm_r_checkpoint_is_written_as_one(tmp_path, capsys):
    config = check_zoo_export(tmp_path, capsys, "roberta", "XLMRobertaForMaskedLM", {"vocab_size": 50, "pad_id": 1},
                              "model.converter=zoo.convert.xlm_roberta.pretrained")
    assert config["model_type"] == "xlm-roberta"


# roberta-base's and xlm-roberta-base's config.json, 2 layers of 2 heads of 16 (not 12 of 12 heads of 64),
# d_ff 128 (not 3072): narrow enough that the real vocabularies (50,265 and 250,002 rows) stay in the
# default suite
RELEASED = dict(architectures=["RobertaForMaskedLM"], attention_probs_dropout_prob=0.1, bos_token_id=0,
                eos_token_id=2, hidden_act="gelu", hidden_dropout_prob=0.1, hidden_size=32,
                initializer_range=0.02, intermediate_size=128, layer_norm_eps=1e-05, max_position_embeddings=514,
                num_attention_heads=2, num_hidden_layers=2, pad_token_id=1, type_vocab_size=1, vocab_size=50265)


@pytest.mark.parametrize("cls, config, vocab", [(T.RobertaForMaskedLM, T.RobertaConfig, 50265),
                                                (T.XLMRobertaForMaskedLM, T.XLMRobertaConfig, 250002)])
def test_the_released_layout_reads_to_the_reference_logits(tmp_path, cls, config, vocab):
    torch.manual_seed(0)
    hf = randomise(cls(config(**RELEASED | {"vocab_size": vocab, "architectures": [cls.__name__]})).eval())
    padding = torch.ones(2, 29, dtype=torch.bool)
    padding[0, 20:] = False
    net = check_folder(tmp_path, hf, "roberta", {"vocab_size": vocab, "pad_id": 1}, padding)
    assert net.embedder.positions.weight.shape == (514, 32) and net.embedder.max_len - 2 == 512


def test_presets_have_the_paper_shapes():
    dims = MLM_DIMS | {"vocab_size": 50265, "pad_id": 1}
    cfg = compose_config(["model=roberta_base"])
    cfg.dims = dims
    net = cfg.model.net
    assert (net.n_layers, net.block.d_model, net.block.n_heads, net.block.d_ff, net.context,
            net.embedder.max_len, net.embedder.n_segments, net.block.norm_eps) == (12, 768, 12, 3072, 512, 514, 1, 1e-5)
