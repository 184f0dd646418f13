"""``python -m zoo prepare`` writes token shards (uint16 / uint32 ids and meta.json) and ``data=tokens``
trains from them by memory map: the same windows as ``data=text`` cuts in memory, a resumed run on
the same losses as one that ran through, and one-line refusals for shards that do not match."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ROOT, run_train
from test_data_text import TINY, document, killed_and_resumed, module, train_losses, write_corpus
from zoo.cli.commands import call
from zoo.data.tokens import TokenShards, shard_dtype


def prepare(corpus: Path, out: Path, *overrides: str) -> Path:
    return call("prepare", ["data=text", f"data.source={corpus}", f"out={out}",
                            f"paths.cache_dir={out.parent / 'cache'}", *overrides])


def shards(folder: Path, block_size: int = 32, batch_size: int = 4) -> TokenShards:
    data = TokenShards("unused", "unused", batch_size, block_size, source=str(folder))
    data.setup()
    return data


def test_prepare_writes_each_splits_token_stream_and_data_tokens_cuts_the_windows_data_text_does(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", files=8)
    out = prepare(corpus, tmp_path / "shards")
    meta = json.loads((out / "meta.json").read_text())
    text = module(corpus, cache=tmp_path / "cache")  # data=text on the same source, the same seed
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == text.tokenizer.vocab_size
    for split in ("train", "val", "test"):
        stream = text.streams[split][0]
        assert np.array_equal(np.fromfile(out / f"{split}.bin", dtype=np.uint16), stream.numpy())
        assert meta["tokens"][split] == len(stream)
    tokens = shards(out)
    assert tokens.tokenizer.state() == text.tokenizer.state() and tokens.dims == {"vocab_size": meta["vocab_size"]}
    windows, in_memory = tokens.dataset("train"), text.dataset("train")  # (pack=true: the stream's windows)
    assert len(windows) == len(in_memory) and all(
        torch.equal(torch.stack(windows[i]), torch.stack(in_memory[i])) for i in range(len(windows)))


def test_a_vocabulary_past_65536_ids_is_written_as_uint32():
    assert (shard_dtype(256), shard_dtype(65_536), shard_dtype(65_537)) == (np.uint16, np.uint16, np.uint32)


def test_shards_that_do_not_match_their_meta_json_are_refused_in_one_line(tmp_path):
    out = prepare(write_corpus(tmp_path / "corpus", files=6), tmp_path / "shards")
    with pytest.raises(ValueError, match=r"out=.*shards holds token shards already"):
        prepare(tmp_path / "corpus", out)
    with open(out / "val.bin", "r+b") as f:
        f.truncate(10)
    with pytest.raises(ValueError, match=r"val.bin: 10 bytes, but .*meta.json says \d+ uint16 tokens"):
        shards(out)
    (out / "meta.json").unlink()
    with pytest.raises(ValueError, match=r"data.source=.*shards holds no meta.json"):
        shards(out)


@pytest.mark.slow
def test_gpt_trains_on_prepared_shards_and_a_killed_run_resumes_to_the_same_losses(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", files=10)
    env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path), ZOO_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "zoo", "prepare", "data=text", f"data.source={corpus}",
                           "data.tokenizer=bpe", "data.vocab_size=120", f"out={tmp_path / 'shards'}"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    common = ["model=gpt", "data=tokens", f"data.source={tmp_path / 'shards'}", "model.sample_tokens=0", *TINY,
              "optim.decay_steps=30", "trainer.val_check_interval=250", "test=false"]
    straight, run = tmp_path / "straight", tmp_path / "run"
    run_train(straight, tmp_path, *common)
    losses = train_losses(straight)
    assert losses[-1] < losses[0] - 0.3, losses
    assert killed_and_resumed(run, tmp_path, *common) == pytest.approx(losses, abs=1e-6)


# --- a resumable, streaming prepare ---------------------------------------------------------------

def killed_prepare(corpus: Path, out: Path, monkeypatch, records: int) -> None:
    """A prepare of ``corpus`` into ``out`` killed once it has recorded its progress ``records`` times
    (2 documents a batch), as a kill between two batches leaves it."""
    import zoo.cli.prepare as prepare_cli

    real, calls = prepare_cli.record, []

    def record(folder: Path, state: dict) -> None:
        real(folder, state)
        calls.append(1)
        if len(calls) == records:
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(prepare_cli, "BATCH", 2)
        patch.setattr(prepare_cli, "record", record)
        with pytest.raises(KeyboardInterrupt):
            prepare(corpus, out)


def test_a_killed_prepare_rerun_continues_where_it_stopped_and_writes_the_shards_of_an_uninterrupted_one(
        tmp_path, monkeypatch):
    import zoo.cli.prepare as prepare_cli

    corpus = write_corpus(tmp_path / "corpus", files=14)  # train: 12 documents, val 1, test 1
    straight = prepare(corpus, tmp_path / "straight")
    out = tmp_path / "shards"
    killed_prepare(corpus, out, monkeypatch, records=5)  # the first record, <eod>, then 3 batches of train
    state = json.loads((out / "progress.json").read_text())
    assert state["splits"]["train"]["documents"] == 6 and not (out / "meta.json").exists()
    with open(out / "train.bin", "ab") as f:
        f.write(b"\x07\x00" * 5)  # written after the last record, before the kill: cut off on resume
    tokenized, real = [], prepare_cli.token_stream
    monkeypatch.setattr(prepare_cli, "token_stream", lambda tok, docs, eod: tokenized.extend(docs) or real(tok, docs, eod))
    prepare(corpus, out)
    assert len(tokenized) == 6 + 1 + 1  # the rest of train, then val and test: nothing tokenized twice
    for name in ("train.bin", "val.bin", "test.bin", "meta.json"):
        assert (out / name).read_bytes() == (straight / name).read_bytes(), name
    assert not (out / "progress.json").exists()


def test_an_unfinished_prepare_rerun_with_another_tokenizer_or_a_changed_source_is_refused_in_one_line(
        tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus", files=8)
    out = tmp_path / "shards"
    killed_prepare(corpus, out, monkeypatch, records=3)
    with pytest.raises(ValueError, match=r"^out=.*shards holds an unfinished prepare of other settings "
                                         r"\(data.tokenizer=char there, bpe here\): rerun it with its settings"):
        prepare(corpus, out, "data.tokenizer=bpe")
    with pytest.raises(ValueError, match=r"^zoo prepare reads files, not a stream: set data.streaming=false"):
        prepare(corpus, out, "data.streaming=true", "data.tokenizer=bpe")
    (corpus / "doc0.md").write_text("an edited document\n")
    with pytest.raises(ValueError, match=r"^out=.*shards holds an unfinished prepare of data.source=.*corpus, whose "
                                         r"files have changed since"):
        prepare(corpus, out)


def test_a_fine_tuning_tokenizer_of_another_vocabulary_is_refused_in_one_line(tmp_path):
    from zoo.data.tokenizers import train_bpe

    out = prepare(write_corpus(tmp_path / "corpus", files=6), tmp_path / "shards")
    folder = tmp_path / "pretrained"
    folder.mkdir()
    train_bpe([document(k) for k in range(6)], 90, tmp_path / "bpe.json", ["<|endoftext|>", "<unk>"]).tokenizer.save(
        str(folder / "tokenizer.json"))
    data = TokenShards("unused", "unused", 4, 32, source=str(out), tokenizer_from=str(folder))
    vocab = json.loads((out / "meta.json").read_text())["vocab_size"]
    with pytest.raises(ValueError, match=rf"meta.json: its ids are of a {vocab}-token vocabulary, but the tokenizer "
                                         rf"of .*pretrained has 90: prepare the shards with it"):
        data.setup()


def test_a_model_vocabulary_smaller_than_the_shards_is_refused_in_one_line(tmp_path):
    """An override of the model's table below the shards' vocabulary stopped training with an
    IndexError at the first id past it."""
    from zoo.config import compose_config
    from zoo.train.run import build

    out = prepare(write_corpus(tmp_path / "corpus", files=6), tmp_path / "shards")
    vocab = json.loads((out / "meta.json").read_text())["vocab_size"]
    cfg = compose_config(["model=gpt", "data=tokens", f"data.source={out}", *TINY, "model.net.embedder.vocab_size=5"])
    with pytest.raises(ValueError, match=rf"model.net.embedder.vocab_size=5 is smaller than the data's vocabulary of "
                                         rf"{vocab} ids \(data=\?: its tokenizer or token shards\)"):
        build(cfg)


@pytest.mark.slow
def test_on_two_ddp_processes_each_rank_reads_its_own_half_of_the_global_batch_of_one_process(tmp_path):
    out = prepare(write_corpus(tmp_path / "corpus", files=10), tmp_path / "shards")
    common = ["model=gpt", "data=tokens", f"data.source={out}", "model.sample_tokens=0", *TINY, "trainer.max_steps=4",
              "trainer.val_check_interval=250", "test=false", "+callbacks.record._target_=tests.record_batches.RecordBatches"]
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    run_train(single, tmp_path, *common, f"+callbacks.record.folder={single / 'batches'}")
    run_train(ddp, tmp_path, *common, "trainer=ddp_cpu", "trainer.devices=2", f"+callbacks.record.folder={ddp / 'batches'}")
    for step in range(4):
        whole = torch.load(single / "batches" / f"rank0-step{step}.pt")
        ranks = [torch.load(ddp / "batches" / f"rank{r}-step{step}.pt") for r in (0, 1)]
        assert ranks[0].shape == ranks[1].shape == (4, 32)
        assert not {tuple(row) for row in ranks[0].tolist()} & {tuple(row) for row in ranks[1].tolist()}, step
        assert torch.equal(torch.cat(ranks), whole), step  # the two halves of the same global batch
    assert train_losses(ddp) == pytest.approx(train_losses(single), rel=1e-4)
