"""The ModernBERT preset: exact against a tiny random ``ModernBertForMaskedLM`` whose local
window cuts, with a global layer every third, each layer kind on its own rotary base, and
padding in the batch; read from a folder; the preset's pattern tiles and cuts like the paper's."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from exactness import assert_matches, randomise  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.convert.modernbert import from_transformers, modernbert_shape  # noqa: E402
from zoo.nn.masks import LocalMask, NoMask  # noqa: E402

WINDOW = 8  # local_attention: |i - j| <= 4
VOCAB = 101
DIMS = {"vocab_size": VOCAB, "mask_id": 3, "special_ids": [0, 1, 2, 3]}  # what data=wikitext gives an MLM


def tiny_modernbert(**overrides):
    torch.manual_seed(0)
    settings = dict(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=5, num_attention_heads=4,
        max_position_embeddings=64, local_attention=WINDOW, global_attn_every_n_layers=3,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
        attn_implementation="sdpa",
    )
    cfg = transformers.ModernBertConfig(**(settings | overrides))
    return randomise(transformers.ModernBertForMaskedLM(cfg).eval())


@pytest.mark.parametrize("length", [37, 5])  # not a multiple of the window of 8; shorter than one
def test_modernbert_logits_match_transformers_with_padding_and_a_window_that_cuts(length):
    hf = tiny_modernbert()
    net = from_transformers(hf)
    local = LocalMask(WINDOW, causal=False)
    assert net.stack.layer_masks == [NoMask(), local, local, NoMask(), local]  # 5 layers: the pattern cut
    tables = list(net.rope)  # one per layer; layers of a kind share theirs
    assert tables[0] is tables[3] and tables[1] is tables[2] is tables[4] and tables[0] is not tables[1]
    d_head = 16  # the slowest angle of a position, 1 / base ** ((d_head - 2) / d_head), tells the base
    for table, base in ((tables[0], 160000.0), (tables[1], 10000.0)):
        assert table.cos[1, d_head // 2 - 1].item() == pytest.approx(torch.tensor(base ** (2 / d_head - 1)).cos().item())
    tokens = torch.randint(3, VOCAB, (2, length))
    padding = torch.ones(2, length, dtype=torch.bool)
    padding[1, length * 3 // 4:] = False  # the second sequence is right-padded (ModernBERT pads right)
    tokens[1, length * 3 // 4:] = 0
    with torch.no_grad():
        ref = hf(tokens, attention_mask=padding.long()).logits
        ours = net(tokens, key_padding=padding)
    # fp32 only: ModernBERT's rotary computes in float32 whatever the dtype (q.float() inside).
    assert_matches(ours, ref, where=padding[..., None], what="ModernBERT logits")


def test_the_window_and_the_per_layer_rotary_bases_matter():
    """The same weights with no window, or one rotary base for all layers, give other logits:
    both are exercised by the exactness test above."""
    hf = tiny_modernbert()
    tokens = torch.randint(3, VOCAB, (1, 40))
    with torch.no_grad():
        ref = hf(tokens).logits
        wide = tiny_modernbert(local_attention=128)
        wide.load_state_dict(hf.state_dict())
        one_base = tiny_modernbert(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
        one_base.load_state_dict(hf.state_dict())
        assert (wide(tokens).logits - ref).abs().max() > 1e-3
        assert (one_base(tokens).logits - ref).abs().max() > 1e-3
    shape = modernbert_shape(hf.config.to_dict())
    assert shape["rotary_base"] == [160000.0, 10000.0, 10000.0]


def test_modernbert_preset_tiles_its_pattern_and_has_the_paper_shape():
    net = compose_config(["model=modernbert"]).model.net
    assert [m._target_.rsplit(".", 1)[1] for m in net.mask.masks] == ["NoMask", "LocalMask", "LocalMask"]
    assert net.mask.masks[1].window < net.context and not net.first_attn_norm
    base = compose_config(["model=modernbert_base"]).model.net
    assert (base.n_layers, base.block.d_model, base.mask.masks[1].window, base.context) == (22, 768, 128, 8192)
    from zoo.nn.masks import tile
    kinds = tile(["g", "l", "l"], base.n_layers)  # 22 layers: global at 0, 3, ..., 21
    assert [i for i, k in enumerate(kinds) if k == "g"] == list(range(0, 22, 3))


def test_a_pattern_of_rotary_bases_longer_than_the_stack_is_refused():
    from zoo.nn.positions import rotary_tables

    with pytest.raises(ValueError, match="pattern of 4 rotary bases for a stack of 3 layers"):
        rotary_tables(8, 16, [1.0, 2.0, 3.0, 4.0], 3)


@torch.no_grad()
def test_modernbert_folder_gives_the_hf_logits(tmp_path):
    """model.init_from=DIR: a save_pretrained folder through the shared reader."""
    from test_init_from import objective_from

    hf = tiny_modernbert()
    hf.save_pretrained(tmp_path)
    model = objective_from("modernbert", tmp_path, DIMS)
    tokens = torch.randint(3, VOCAB, (2, 40))
    assert_matches(model.net.eval()(tokens), hf(tokens).logits, what="ModernBERT logits from a folder")


def test_an_encoder_only_folder_keeps_a_fresh_head(tmp_path):
    hf = transformers.ModernBertModel(tiny_modernbert().config)
    hf.save_pretrained(tmp_path)
    from test_init_from import objective_from

    with pytest.warns(UserWarning, match="no MLM head"):
        model = objective_from("modernbert", tmp_path, DIMS)
    assert model.net.head.decoder.weight is model.net.embedder.tokens.weight  # still tied
