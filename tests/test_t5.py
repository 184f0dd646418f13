"""T5: exactness against transformers' T5ForConditionalGeneration (v1.0 and v1.1), the
checkpoint-directory loader, the relative position bias and span corruption."""

import random

import pytest
import torch

transformers = pytest.importorskip("transformers")

from exactness import assert_matches, assert_untied, randomise  # noqa: E402
from zoo.convert.t5 import from_transformers, load_pretrained  # noqa: E402
from zoo.data.batches import PaddedTokens  # noqa: E402
from zoo.data.span_corruption import SpanCorruption, noise_spans  # noqa: E402
from zoo.models.decoding import beam_search, greedy, strip_eos  # noqa: E402
from zoo.nn.relative_bias import RelativePositionBias  # noqa: E402

VOCAB = 150


def tiny_t5(feed_forward_proj: str, tied: bool, decoder_layers: int = 3):
    torch.manual_seed(0)
    cfg = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=decoder_layers, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=20, feed_forward_proj=feed_forward_proj,
        tie_word_embeddings=tied, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )
    model = transformers.T5ForConditionalGeneration(cfg).eval()
    if not tied:  # transformers 5 ties the head at construction despite tie_word_embeddings=False
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
        model.config.tie_word_embeddings = False
        assert_untied(model)
    return randomise(model)


def batch():
    g = torch.Generator().manual_seed(1)
    source = torch.randint(2, VOCAB, (3, 25), generator=g)  # longer than max_distance: far buckets
    padding = torch.ones(3, 25, dtype=torch.bool)
    padding[1, 17:] = False
    padding[2, 4:] = False
    return source.masked_fill(~padding, 0), padding, torch.randint(2, VOCAB, (3, 23), generator=g)


def target_padding() -> torch.Tensor:
    """(3, 23): True at real target positions; rows 0 and 2 end in pads (T5 pads targets right)."""
    real = torch.ones(3, 23, dtype=torch.bool)
    real[0, 15:] = False
    real[2, 6:] = False
    return real


@pytest.mark.parametrize("ff,tied", [("relu", True), ("gated-gelu", False), ("gelu", True), ("gated-silu", False)],
                         ids=["v1.0", "v1.1", "exact-gelu", "gated-silu"])  # "gelu" is erf GELU, "gated-gelu" tanh
def test_logits_match_transformers(ff, tied):
    hf = tiny_t5(ff, tied)
    net = from_transformers(hf)
    if not tied:
        assert net.head.proj.weight is not net.decoder.embedder.tokens.weight
    source, padding, target = batch()
    real = target_padding()
    target = target.masked_fill(~real, 0)
    with torch.no_grad():
        ref = hf(input_ids=source, attention_mask=padding.long(), decoder_input_ids=target,
                 decoder_attention_mask=real.long()).logits
        out = net(source, target, padding, real)
    # source and targets padded: compare the real target positions. fp32 only: transformers'
    # T5LayerNorm computes its variance in float32 whatever the dtype.
    assert_matches(out, ref, real[..., None], what=f"T5 {ff} logits")


def test_greedy_matches_transformers_generate():
    hf = tiny_t5("relu", True, decoder_layers=2)  # generate's cache wants equal depths
    net = from_transformers(hf)
    source, padding, _ = batch()
    ref = hf.generate(input_ids=source, attention_mask=padding.long(), max_new_tokens=10, do_sample=False,
                      num_beams=1, min_length=0)
    out = greedy(net, source, torch.zeros(3, 1, dtype=torch.long), 1, padding, max_new_tokens=10)
    for r, o in zip(ref[:, 1:].tolist(), out.tolist()):  # ref: start token, ids, then pad (0) after eos
        r = r[: r.index(1) + 1] if 1 in r else r
        assert o[: len(r)] == r


@pytest.mark.parametrize("length_penalty", [1.0, 0.0])
def test_beam_search_matches_transformers_generate(length_penalty):
    hf = tiny_t5("relu", True, decoder_layers=2)
    with torch.no_grad():
        hf.shared.weight[1] *= 3  # make eos likely, so that hypotheses finish at different lengths
    net = from_transformers(hf)
    source, padding, _ = batch()
    ref = hf.generate(input_ids=source, attention_mask=padding.long(), num_beams=4, max_new_tokens=10,
                      do_sample=False, length_penalty=length_penalty, early_stopping=False)
    out = beam_search(net, source, torch.zeros(3, 1, dtype=torch.long), 1, padding, beam_size=4,
                      length_penalty=length_penalty, max_new_tokens=10)
    ref_rows = [r[: r.index(1)] if 1 in r else [t for t in r if t != 0] for r in ref[:, 1:].tolist()]
    assert strip_eos(out, 1) == ref_rows


def test_loader_reads_a_checkpoint_directory(tmp_path):
    hf = tiny_t5("gated-gelu", False)
    hf.config.tie_word_embeddings = False
    state = {k: v.clone().contiguous() for k, v in hf.state_dict().items()}
    state["lm_head.weight"] = torch.randn_like(state["lm_head.weight"])  # a real v1.1: its own head
    hf.lm_head.weight = torch.nn.Parameter(state["lm_head.weight"].clone())
    from safetensors.torch import save_file

    save_file(state, str(tmp_path / "model.safetensors"))
    config = hf.config.to_dict()
    config.pop("scale_decoder_outputs", None)
    for derived in ("dense_act_fn", "is_gated_act"):  # a released v1.1 config.json gives feed_forward_proj alone
        config.pop(derived)
    config["tie_word_embeddings"] = False  # what a v1.1 config.json says
    import json

    (tmp_path / "config.json").write_text(json.dumps(config))
    net = load_pretrained(tmp_path)
    assert net.head.weight is not net.decoder.embedder.tokens.weight
    source, padding, target = batch()
    with torch.no_grad():
        # the reference: T5 v1.1's forward with its own head, no d_model^-0.5 scaling
        h = hf.model.decoder(input_ids=target, encoder_hidden_states=hf.model.encoder(
            input_ids=source, attention_mask=padding.long()).last_hidden_state,
            encoder_attention_mask=padding.long()).last_hidden_state if hasattr(hf, "model") else None
        if h is None:
            enc = hf.encoder(input_ids=source, attention_mask=padding.long()).last_hidden_state
            h = hf.decoder(input_ids=target, encoder_hidden_states=enc, encoder_attention_mask=padding.long()).last_hidden_state
        ref = h @ state["lm_head.weight"].t()
        assert_matches(net(source, target, padding), ref, what="T5 v1.1 logits (own head)")


def test_loader_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained(tmp_path)


def test_relative_bias_incremental_rows_equal_full():
    torch.manual_seed(0)
    bias = RelativePositionBias(4, bidirectional=False, num_buckets=8, max_distance=20)
    full = bias(30, 30, 0)
    assert full.shape == (1, 4, 30, 30)
    assert torch.equal(bias(1, 13, 12), full[:, :, 12:13, :13])
    enc = RelativePositionBias(4, bidirectional=True)
    assert enc(5, 5).shape == (1, 4, 5, 5)


def test_span_corruption_reconstructs_the_text():
    sc = SpanCorruption(vocab_size=1000, noise_density=0.15, mean_span_length=3.0, seed=0)
    tokens = torch.randint(0, 1000, (4, 64))
    padding = torch.ones(4, 64, dtype=torch.bool)
    padding[3, 40:] = False
    out = sc(PaddedTokens(tokens, padding))
    noise = 0
    for i in range(4):
        src = out.source[i][out.source_padding[i]].tolist()
        tgt = out.target_out[i][out.target_out[i] != -100].tolist()
        assert src[-1] == tgt[-1] == sc.eos_id
        assert out.target_in[i, 0] == sc.start_id
        assert out.target_in[i, 1 : len(tgt)].tolist() == tgt[:-1]  # shifted right
        # Put the spans back into the gaps: the original tokens come back.
        spans, current = {}, None
        for t in tgt[:-1]:
            if t >= 1000:
                current = t
                spans[current] = []
            else:
                spans[current].append(t)
        rebuilt = [t for s in src[:-1] for t in (spans[s] if s >= 1000 else [s])]
        n = int(padding[i].sum())
        assert rebuilt == tokens[i, :n].tolist()
        noise += sum(len(v) for v in spans.values())
        assert sorted(spans) == list(range(1000, 1000 + len(spans)))  # sentinels in order
    assert noise == sum(round(0.15 * n) for n in (64, 64, 64, 40))


def test_noise_spans_have_the_configured_statistics():
    rng = random.Random(0)
    lengths = [e - s for _ in range(500) for s, e in noise_spans(rng, 512, 0.15, 3.0)]
    assert sum(lengths) == 500 * round(512 * 0.15)
    assert abs(sum(lengths) / len(lengths) - 3.0) < 0.05


def test_t5_trains_on_text_blocks_through_span_corruption():
    """model=t5 on plain text (e.g. data=wikitext: PaddedTokens batches)."""
    import hydra
    from omegaconf import open_dict

    from zoo.convert.common import compose_config
    from zoo.train.run import objective

    cfg = compose_config(["model=t5", "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1",
                          "model.net.block.d_model=32", "model.net.block.n_heads=2", "model.net.block.d_ff=64"])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": 300, "pad_id": 0}
    torch.manual_seed(0)
    model = objective(cfg)
    assert model.net.head.proj.out_features == 300 + 102
    tokens = torch.randint(1, 300, (4, 48))
    padding = torch.ones(4, 48, dtype=torch.bool)
    padding[2, 30:] = False
    batch = model.on_before_batch_transfer(PaddedTokens(tokens, padding), 0)
    assert batch.target_in[:, 0].eq(300 + 101).all() and batch.source.max() < 402
    loss, n = model.loss(batch)
    assert torch.isfinite(loss) and n > 0
    model.eval()  # no dropout: the loss of the one batch is a deterministic function of the weights
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(10):  # a few steps on the one batch: the loss the objective reports falls
        optimiser.zero_grad()
        model.loss(batch)[0].backward()
        optimiser.step()
    assert model.loss(batch)[0] < loss - 0.5  # ~6.0 (ln 402) -> ~5.2
