"""Multi30k data (official layout, BPE, buckets, bad input) and an end-to-end tiny
translation run: train.py -> test BLEU -> translate from the checkpoint."""

import gzip
import random

import pytest
import torch
from omegaconf import open_dict

from zoo.convert.common import compose_config
from zoo.data.batches import SequencePairs
from zoo.data.multi30k import Multi30k
from zoo.data.tokenizers import tokenizer_from_state
from zoo.train.run import build, train

WORDS = {"ein": "a", "hund": "dog", "mann": "man", "rennt": "runs", "sitzt": "sits", "im": "in the",
         "schnee": "snow", "park": "park", "eine": "a", "frau": "woman", "liest": "reads", "auf": "on",
         "der": "the", "bank": "bench", "kind": "child", "spielt": "plays"}


def sentence_pair(rng: random.Random) -> tuple[str, str]:
    subject = rng.choice(["ein hund", "ein mann", "eine frau", "ein kind"])
    verb = rng.choice(["rennt", "sitzt", "spielt", "liest"])
    place = rng.choice(["im schnee", "im park", "auf der bank"])
    de = f"{subject} {verb} {place}."
    en = " ".join(WORDS[w] for w in de[:-1].split()) + "."
    return de.capitalize(), en.capitalize()


def write_corpus(root, sizes=None, lines=None):
    raw = root / "multi30k" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for split, n in (sizes or {"train": 300, "val": 24, "test_2016_flickr": 24}).items():
        pairs = [sentence_pair(rng) for _ in range(n)]
        for lang, k in (("de", 0), ("en", 1)):
            text = lines.get((split, lang)) if lines and (split, lang) in lines else [p[k] for p in pairs]
            with gzip.open(raw / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(text) + "\n")
    return root


def module(tmp_path, **kwargs):
    args = {"batch_size": 16, "vocab_size": 120, "max_len": 32, **kwargs}
    return Multi30k(str(tmp_path / "data"), str(tmp_path / "cache"), **args)


def test_batches_tokenizer_and_direction(tmp_path):
    write_corpus(tmp_path / "data")
    dm = module(tmp_path)
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, SequencePairs) and batch.samples == len(batch.references)
    b, t = batch.target_in.shape
    assert b == 16 and batch.target_out.shape == (b, t)
    assert (batch.target_in[:, 0] == dm.dims["bos_id"]).all()
    real = batch.target_out != -100
    last = batch.target_out.gather(1, (real.sum(1) - 1)[:, None])
    assert (last == dm.dims["eos_id"]).all()
    # teacher forcing: target_in is target_out shifted right by one
    assert torch.equal(batch.target_in[:, 1:][real[:, 1:]], batch.target_out[:, :-1][real[:, 1:]])
    # detokenized target == raw reference; the state round-trips through a checkpoint dict
    tok = tokenizer_from_state(dm.tokenizer.state())
    ids = batch.target_out[0][real[0]].tolist()[:-1]
    assert tok.decode(ids) == batch.references[0]
    assert (tmp_path / "cache" / "multi30k").is_dir() and list((tmp_path / "cache" / "multi30k").glob("bpe120-*.json"))
    # length buckets keep padding small
    assert batch.source_padding.float().mean() > 0.7
    # en -> de
    rev = module(tmp_path, src="en", tgt="de")
    rev.setup()
    assert rev.pairs["train"].references[0].split()[0] in {"Ein", "Eine"}


def test_empty_line_and_misaligned_files_name_the_file(tmp_path):
    write_corpus(tmp_path / "data", lines={("val", "en"): ["A dog runs.", "", "A man sits."]})
    with pytest.raises(ValueError, match=r"val\.en\.gz: 1 empty line"):
        module(tmp_path).setup()
    write_corpus(tmp_path / "data2", lines={("val", "en"): ["A dog runs.", "A man sits."]})
    dm = Multi30k(str(tmp_path / "data2"), str(tmp_path / "cache"), 16, vocab_size=120)
    with pytest.raises(ValueError, match=r"val\.de\.gz has 24 lines but .*val\.en\.gz has 2"):
        dm.setup()


def test_long_sentences_are_truncated_with_a_warning(tmp_path):
    write_corpus(tmp_path / "data")
    dm = module(tmp_path, max_len=6)
    with pytest.warns(UserWarning, match="truncated"):
        dm.setup()
    assert max(len(s) for s in dm.pairs["train"].source) <= 6
    assert max(len(t) for t in dm.pairs["train"].target) <= 5  # + start/end token = 6


def test_missing_files_fail_with_the_url_offline(tmp_path, monkeypatch):
    import urllib.request

    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(urllib.request, "urlretrieve", offline)
    with pytest.raises(RuntimeError, match=r"raw\.githubusercontent\.com/multi30k/dataset.*train\.de\.gz"):
        module(tmp_path).prepare_data()


def tiny_run_config(tmp_path, model="transformer", extra=()):
    cfg = compose_config([
        f"model={model}", "data=multi30k", "trainer=cpu", f"paths.data_dir={tmp_path / 'data'}",
        f"paths.cache_dir={tmp_path / 'cache'}", f"paths.output_dir={tmp_path / 'out'}",
        "data.batch_size=16", "data.vocab_size=120", "trainer.max_steps=40", "trainer.val_check_interval=20",
        "optim.warmup_steps=5", "optim.lr=3e-3", "model.decoding.max_new_tokens=12", "model.decoding.beam_size=2",
        "logger={}", *extra,
    ])
    with open_dict(cfg):
        del cfg.callbacks.progress_bar
        cfg.trainer.enable_progress_bar = False
    return cfg


def test_train_test_bleu_and_translate_from_checkpoint(tmp_path, capsys):
    write_corpus(tmp_path / "data")
    cfg = tiny_run_config(tmp_path, extra=[
        "model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", "model.net.block.d_model=32",
        "model.net.block.n_heads=2", "model.net.block.d_ff=64", "model.net.context=32", "model.net.block.dropout=0.0"])
    metrics = train(cfg)
    assert metrics["test/loss"] < 3.0  # from ln(120) = 4.8 at the start
    assert 0.0 <= metrics["test/bleu_greedy"] <= 100.0 and "test/bleu_beam" in metrics
    from zoo.cli.commands import call

    call("translate", [f"ckpt={tmp_path / 'out' / 'checkpoints' / 'last.ckpt'}", "text=Ein Hund rennt im Schnee.",
                       "beam=false"])
    assert capsys.readouterr().out.strip()  # some English-like text, decoded from the checkpoint
    examples = (tmp_path / "out" / "examples.txt").read_text()  # translations next to their references
    assert all(f"{key}:" in examples for key in ("source", "reference", "greedy", "beam"))
    att = tmp_path / "att"
    call("attention-maps", [f"ckpt={tmp_path / 'out' / 'checkpoints' / 'last.ckpt'}", "text=Ein Hund rennt.",
                            f"out={att}"])
    assert {"encoder_layer00.png", "decoder_layer00.png", "cross_layer00.png", "alignment.png"} <= {
        p.name for p in att.iterdir()}


def test_decoder_only_model_on_pairs_fails_naming_both(tmp_path):
    write_corpus(tmp_path / "data")
    cfg = compose_config(["model=gpt", "data=multi30k", f"paths.data_dir={tmp_path / 'data'}",
                          f"paths.cache_dir={tmp_path / 'cache'}", "paths.output_dir=x"])
    with pytest.raises(ValueError, match=r"model=.* \(NextTokenLM\) reads TokenWindows batches, but data=.* "
                                         r"\(Multi30k\) yields SequencePairs: pick a matching pair"):
        build(cfg)


def test_t5_fine_tunes_on_pairs_with_a_task_prefix_and_init_from(tmp_path):
    write_corpus(tmp_path / "data")
    small = ["model.net.n_encoder_layers=1", "model.net.n_decoder_layers=1", "model.net.block.d_model=32",
             "model.net.block.n_heads=2", "model.net.block.d_ff=64", "model.net.context=40",
             "data.prefix=translate German to English: ", "trainer.max_steps=4", "test=false"]
    cfg = tiny_run_config(tmp_path, "t5", small)
    train(cfg)
    ckpt = tmp_path / "out" / "checkpoints" / "last.ckpt"
    cfg2 = tiny_run_config(tmp_path, "t5", [*small, f"model.init_from={ckpt}", "trainer.max_steps=1"])
    _, model = build(cfg2)
    state = torch.load(ckpt, weights_only=True)["state_dict"]
    assert torch.equal(model.net.encoder.blocks[0].attn.q.weight, state["net.encoder.stack.blocks.0.attn.q.weight"])
