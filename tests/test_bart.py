"""BART and mBART: exactness against transformers' BartForConditionalGeneration and
MBartForConditionalGeneration (tiny randomised references, fp32 and float64), a checkpoint folder
(``model.init_from``, and one written by ``save_pretrained`` in the released checkpoints' layouts),
the export both ways, and cached decoding."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from exactness import assert_matches, randomise  # noqa: E402
from test_export import resolved_net, saved_checkpoint  # noqa: E402
from test_init_from import objective_from  # noqa: E402
from zoo.convert import bart, mbart  # noqa: E402
from zoo.convert.common import shape_overrides  # noqa: E402
from zoo.convert.export import to_hf  # noqa: E402
from zoo.models.decoding import greedy  # noqa: E402

VOCAB = 99
KINDS = {"bart": (transformers.BartConfig, transformers.BartForConditionalGeneration, bart),
         "mbart": (transformers.MBartConfig, transformers.MBartForConditionalGeneration, mbart)}


def tiny(kind: str, **config):
    """A tiny randomised reference: every parameter away from its init, ``final_logits_bias`` (a
    buffer, which ``randomise`` leaves alone) too; its decoder deeper than its encoder."""
    config_class, model_class, _ = KINDS[kind]
    torch.manual_seed(0)
    cfg = config_class(**{"vocab_size": VOCAB, "d_model": 32, "encoder_layers": 2, "decoder_layers": 3,
                          "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 48,
                          "decoder_ffn_dim": 48, "max_position_embeddings": 40, "scale_embedding": kind == "mbart",
                          "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2,
                          "forced_bos_token_id": None, "forced_eos_token_id": None, **config})
    hf = randomise(model_class(cfg)).eval()
    with torch.no_grad():
        hf.final_logits_bias.normal_(generator=torch.Generator().manual_seed(5))
    return hf


def batch():
    """Source (3, 17) with rows 1 and 2 padded, target (3, 13) with rows 0 and 2 padded: odd lengths."""
    g = torch.Generator().manual_seed(1)
    source, target = torch.randint(3, VOCAB, (3, 17), generator=g), torch.randint(3, VOCAB, (3, 13), generator=g)
    source_real, target_real = torch.ones(3, 17, dtype=torch.bool), torch.ones(3, 13, dtype=torch.bool)
    source_real[1, 11:], source_real[2, 4:] = False, False
    target_real[0, 9:], target_real[2, 5:] = False, False
    return source.masked_fill(~source_real, 1), source_real, target.masked_fill(~target_real, 1), target_real


def reference(hf, source, source_real, target, target_real):
    return hf(input_ids=source, attention_mask=source_real.long(), decoder_input_ids=target,
              decoder_attention_mask=target_real.long()).logits


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
@pytest.mark.parametrize("kind", ["bart", "mbart"])
@torch.no_grad()
def test_logits_match_transformers(kind, dtype):
    hf = tiny(kind)
    net = KINDS[kind][2].from_transformers(hf).eval()
    assert net.head.weight is net.encoder.embedder.tokens.weight is net.decoder.embedder.tokens.weight
    assert (net.encoder.stack.norm is None) == (kind == "bart")
    hf, net = hf.to(dtype), net.to(dtype)
    source, source_real, target, target_real = batch()
    # BART computes in float64 throughout: the float64 bound (1e-10) holds
    assert_matches(net(source, target, source_real, target_real), reference(hf, source, source_real, target, target_real),
                   target_real[..., None], what=f"{kind} logits ({dtype})")


@pytest.mark.parametrize("kind", ["bart", "mbart"])
@torch.no_grad()
def test_cached_decoding_equals_recomputation_and_transformers_generate(kind):
    hf = tiny(kind, decoder_layers=2)
    net = KINDS[kind][2].from_transformers(hf).eval()
    source, source_real, target, _ = batch()
    memory, cache = net.encode(source, source_real), net.new_cache()
    # one token at a time through the cache (positions start..: the offset table read at start + 2)
    steps = torch.cat([net.decode(target[:, i:i + 1], memory, source_real, cache=cache) for i in range(13)], 1)
    assert_matches(steps, net.decode(target, memory, source_real), what="cached step logits")
    prompt = torch.full((3, 1), 2)  # the decoder starts from eos (decoder_start_token_id, both kinds here)
    out = greedy(net, source, prompt, 2, source_real, max_new_tokens=10)
    assert torch.equal(out, greedy(net, source, prompt, 2, source_real, max_new_tokens=10, use_cache=False))
    ref = hf.generate(input_ids=source, attention_mask=source_real.long(), max_new_tokens=10, do_sample=False,
                      num_beams=1, min_length=0, no_repeat_ngram_size=0)
    for r, o in zip(ref[:, 1:].tolist(), out.tolist()):  # ref: the start token, ids, pads (1) after eos
        r = r[: r.index(2) + 1] if 2 in r else r
        assert o[: len(r)] == r


@pytest.mark.parametrize("kind", ["bart", "mbart"])
@torch.no_grad()
def test_init_from_a_folder(tmp_path, kind):
    hf = tiny(kind)
    hf.save_pretrained(tmp_path)
    model = objective_from(kind, tmp_path, {"vocab_size": VOCAB})
    source, source_real, target, target_real = batch()
    assert_matches(model.net.eval()(source, target, source_real, target_real),
                   reference(hf, source, source_real, target, target_real), target_real[..., None],
                   what=f"{kind} logits from a folder")
    with pytest.raises(ValueError, match="vocab_size=99"):
        objective_from(kind, tmp_path, {"vocab_size": VOCAB + 1})


def test_a_folder_of_the_other_kind_is_refused(tmp_path):
    tiny("mbart").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="mbart"):
        objective_from("bart", tmp_path, {"vocab_size": VOCAB})


@pytest.mark.parametrize("kind", ["bart", "mbart"])
@torch.no_grad()
def test_export_round_trip(kind):
    hf = tiny(kind)
    module = KINDS[kind][2]
    net_cfg = resolved_net(kind, shape_overrides(bart.bart_shape(hf.config.to_dict(), kind == "mbart")),
                           {"vocab_size": VOCAB})
    zoo = module.from_transformers(hf).eval()
    source, source_real, target, target_real = batch()
    back, untouched = to_hf(zoo, net_cfg, module.FAMILY.hf_class)
    assert untouched == []
    assert_matches(reference(back, source, source_real, target, target_real),
                   reference(hf, source, source_real, target, target_real), target_real[..., None],
                   what=f"{kind}: HF -> zoo -> HF logits")
    again = module.from_transformers(back).state_dict()
    assert all(torch.equal(again[k], v) for k, v in zoo.state_dict().items()), "zoo -> HF -> zoo weights"


def test_export_refuses_a_net_of_the_other_kind():
    from zoo.convert.common import build_net

    small = ["model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", "model.net.block.d_model=16",
             "model.net.block.n_heads=2", "model.net.block.d_ff=32", "model.net.context=24"]
    net, net_cfg = build_net("mbart", small, {"vocab_size": 50}), resolved_net("mbart", small, {"vocab_size": 50})
    with pytest.raises(ValueError, match="BartForConditionalGeneration cannot express this net"):
        to_hf(net, net_cfg, "BartForConditionalGeneration")


@pytest.mark.parametrize("kind", ["bart", "mbart"])
@torch.no_grad()
def test_zoo_export_loads_in_transformers(tmp_path, capsys, kind):
    from zoo.cli.commands import call

    model = saved_checkpoint(tmp_path / "m.ckpt", kind, {"vocab_size": 50}, "model.net.n_encoder_layers=1",
                             "model.net.n_decoder_layers=2", "model.net.block.d_model=32", "model.net.block.d_ff=64",
                             "model.net.context=24")
    call("export", [f"ckpt={tmp_path / 'm.ckpt'}", f"out={tmp_path / 'out'}"])
    hf_class = KINDS[kind][2].FAMILY.hf_class
    assert f"({hf_class})" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == [hf_class]
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    g = torch.Generator().manual_seed(3)
    source, target = torch.randint(0, 50, (2, 19), generator=g), torch.randint(0, 50, (2, 11), generator=g)
    assert_matches(hf(input_ids=source, decoder_input_ids=target).logits, model.net(source, target),
                   what=f"exported {kind} checkpoint's logits")


# The released checkpoints' config.json (facebook/bart-base, facebook/mbart-large-cc25), keys as the
# Hub holds them (the fairseq-era ones, normalize_before and add_final_layer_norm, that the
# transformers classes ignore, included), scaled down in width and depth only.
RELEASED = {
    "bart": {"activation_dropout": 0.1, "activation_function": "gelu", "add_bias_logits": False,
             "add_final_layer_norm": False, "architectures": ["BartModel"], "attention_dropout": 0.1,
             "bos_token_id": 0, "classif_dropout": 0.1, "classifier_dropout": 0.0, "d_model": 768,
             "decoder_attention_heads": 12, "decoder_ffn_dim": 3072, "decoder_layerdrop": 0.0, "decoder_layers": 6,
             "decoder_start_token_id": 2, "dropout": 0.1, "early_stopping": True, "encoder_attention_heads": 12,
             "encoder_ffn_dim": 3072, "encoder_layerdrop": 0.0, "encoder_layers": 6, "eos_token_id": 2,
             "forced_bos_token_id": 0, "forced_eos_token_id": 2, "init_std": 0.02, "is_encoder_decoder": True,
             "max_position_embeddings": 1024, "model_type": "bart", "no_repeat_ngram_size": 3,
             "normalize_before": False, "normalize_embedding": True, "num_beams": 4, "num_hidden_layers": 6,
             "pad_token_id": 1, "scale_embedding": False, "use_cache": True, "vocab_size": 50265},
    "mbart": {"activation_dropout": 0.0, "activation_function": "gelu", "add_bias_logits": False,
              "add_final_layer_norm": True, "architectures": ["MBartForConditionalGeneration"],
              "attention_dropout": 0.0, "bos_token_id": 0, "d_model": 1024, "decoder_attention_heads": 16,
              "decoder_ffn_dim": 4096, "decoder_layerdrop": 0.0, "decoder_layers": 12, "dropout": 0.1,
              "encoder_attention_heads": 16, "encoder_ffn_dim": 4096, "encoder_layerdrop": 0.0,
              "encoder_layers": 12, "eos_token_id": 2, "init_std": 0.02, "is_encoder_decoder": True,
              "max_position_embeddings": 1024, "model_type": "mbart", "normalize_before": True,
              "normalize_embedding": True, "num_hidden_layers": 12, "pad_token_id": 1, "scale_embedding": True,
              "static_position_embeddings": False, "vocab_size": 250027},
}


@pytest.mark.parametrize("kind", ["bart", "mbart"])
@torch.no_grad()
def test_a_released_layout_loads(tmp_path, kind):
    config_class, model_class, _ = KINDS[kind]
    released = RELEASED[kind]
    heads = released["encoder_attention_heads"]
    small = released | {"d_model": 2 * heads, "encoder_ffn_dim": 48, "decoder_ffn_dim": 48, "encoder_layers": 1,
                        "decoder_layers": 2, "num_hidden_layers": 1}
    torch.manual_seed(0)
    hf = randomise(model_class(config_class(**small))).eval()
    hf.save_pretrained(tmp_path)
    model = objective_from(kind, tmp_path, {"vocab_size": released["vocab_size"]})
    g = torch.Generator().manual_seed(2)
    source, target = torch.randint(3, 1000, (2, 21), generator=g), torch.randint(3, 1000, (2, 9), generator=g)
    real = torch.ones(2, 21, dtype=torch.bool)
    real[1, 15:] = False
    assert_matches(model.net.eval()(source, target, real),
                   hf(input_ids=source, attention_mask=real.long(), decoder_input_ids=target).logits,
                   what=f"{kind} logits from a folder of the released layout")
