"""data=text data.streaming=true: a source read as a stream through ``datasets`` (local files here; an
``hf:NAME[@config]`` source is handed to ``load_dataset(..., streaming=True)``, checked without the
network), documents held out by a seeded hash, packed into windows, each rank its share of the files;
and the combinations it does not support refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
import torch

from conftest import run_train
from test_data_text import TINY, document, killed_and_resumed, module, train_losses
from zoo.data.batches import PaddedTokens
from zoo.data.streaming import split_of
from zoo.data.text import TextData


def write_rows(folder: Path, files: int = 2, rows: int = 30) -> list[str]:
    """``files`` JSONL files of ``rows`` documents each under ``folder``; returns the documents in order."""
    folder.mkdir(parents=True)
    texts = [document(k, lines=3) for k in range(files * rows)]
    for f in range(files):
        (folder / f"part{f}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n"
                                                        for t in texts[f * rows : (f + 1) * rows]))
    return texts


def streamed(source: Path | str, tmp_path: Path, **kwargs) -> TextData:
    return module(source, cache=tmp_path / "cache", streaming=True, tokenizer=kwargs.pop("tokenizer", "bpe"),
                  vocab_size=120, **kwargs)


def test_a_stream_is_held_out_by_a_seeded_hash_of_each_document_and_packed_into_windows(tmp_path):
    texts = write_rows(tmp_path / "rows")
    data = streamed(tmp_path / "rows", tmp_path)
    fractions = {"val": 0.1, "test": 0.1}
    by_split = {split: [t for t in texts if split_of(t, 1337, fractions) == split] for split in ("train", "val", "test")}
    assert all(by_split.values()) and sum(map(len, by_split.values())) == len(texts)
    assert split_of(texts[0], 1337, fractions) == split_of(texts[0], 1337, fractions)
    assert [split_of(t, 1, fractions) for t in texts] != [split_of(t, 1337, fractions) for t in texts]
    for split, docs in by_split.items():
        assert list(data.dataset(split).documents()) == docs, split
        ids = [data.eod_id]
        for doc in docs:
            ids += [*data.tokenizer.encode(doc), data.eod_id]
        stream = torch.tensor(ids)
        windows = list(data.dataset(split))
        assert len(windows) == (len(stream) - 1) // 32
        for i, (x, y) in enumerate(windows):
            assert torch.equal(x, stream[i * 32 : i * 32 + 32]) and torch.equal(y, stream[i * 32 + 1 : i * 32 + 33])
    x, y = next(iter(data.train_dataloader()))
    assert x.shape == y.shape == (4, 32)


def test_plain_text_files_stream_one_document_each(tmp_path):
    for k in range(4):
        (tmp_path / "notes").mkdir(exist_ok=True)
        (tmp_path / "notes" / f"n{k}.txt").write_text(document(k))
    data = streamed(tmp_path / "notes", tmp_path, val=str(tmp_path / "notes" / "n0.txt"),
                    test=str(tmp_path / "notes" / "n1.txt"))
    assert list(data.dataset("val").documents()) == [document(0)]
    assert list(data.dataset("train").documents()) == [document(k) for k in range(4)]  # a given val is not held out


def test_each_rank_streams_its_own_share_of_the_files(tmp_path):
    texts = write_rows(tmp_path / "rows")
    train = streamed(tmp_path / "rows", tmp_path).dataset("train")
    shares = [list(train.for_rank(rank, 2).documents()) for rank in (0, 1)]
    assert shares[0] and shares[1] and not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == sorted(train.documents())
    assert set(shares[0]) <= set(texts[:30]) and set(shares[1]) <= set(texts[30:])  # a file each


def test_an_hf_source_is_streamed_from_the_hub_by_name_config_and_split(tmp_path, monkeypatch):
    texts = [document(k, lines=3) for k in range(40)]
    calls = []

    def load_dataset(name, config=None, split=None, streaming=False, **options):
        calls.append((name, config, split, streaming, options))
        return datasets.Dataset.from_dict({"body": texts}).to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    data = streamed("hf:someone/corpus@wiki", tmp_path, column="body", test="hf:someone/corpus")
    assert calls[:2] == [("someone/corpus", "wiki", "train", True, {}), ("someone/corpus", None, "test", True, {})]
    assert list(data.dataset("test").documents()) == texts  # its own source: nothing held out
    assert list(data.dataset("train").documents()) == [t for t in texts if split_of(t, 1337, {"val": 0.1}) == "train"]


@pytest.mark.parametrize("kwargs, expected", [
    ({"tokenizer": "char"}, r"^data.tokenizer=char with data.streaming=true: a stream's alphabet"),
    ({"pack": False}, r"^data.streaming=true packs a stream .*: data.pack=false is not supported"),
    ({"batch_type": PaddedTokens}, r"^data.streaming=true packs .*: a masked LM is not supported"),
])
def test_what_streaming_does_not_support_is_refused_in_one_line(tmp_path, kwargs, expected):
    write_rows(tmp_path / "rows", files=1)
    with pytest.raises(ValueError, match=expected):
        streamed(tmp_path / "rows", tmp_path, **kwargs)


def test_an_hf_source_without_streaming_and_a_saved_dataset_streamed_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^data.source=hf:someone/corpus: an hf: dataset is read as a stream: set "
                                         r"data.streaming=true"):
        module("hf:someone/corpus", cache=tmp_path / "cache")
    datasets.Dataset.from_dict({"text": ["a b c"] * 4}).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(ValueError, match=r"saved is a save_to_disk folder, read from disk as it is: set "
                                         r"data.streaming=false"):
        streamed(tmp_path / "saved", tmp_path)


def test_a_resumed_loader_continues_the_stream_at_the_next_batch(tmp_path):
    write_rows(tmp_path / "rows", files=2, rows=60)
    data = streamed(tmp_path / "rows", tmp_path)
    loader = data.train_dataloader()
    batches = iter(loader)
    first = [next(batches) for _ in range(3)]
    state, fourth = loader.state_dict(), next(batches)
    resumed = data.train_dataloader()
    resumed.load_state_dict(state)  # (the stream read again up to there: StatefulDataLoader fast-forwards)
    x, y = next(iter(resumed))
    assert torch.equal(x, fourth[0]) and torch.equal(y, fourth[1]) and not torch.equal(x, first[0][0])


@pytest.mark.slow
def test_gpt_trains_on_a_streamed_jsonl_source_and_a_killed_run_resumes_to_its_last_step(tmp_path):
    write_rows(tmp_path / "rows", files=2, rows=150)
    common = ["model=gpt", "data=text", f"data.source={tmp_path / 'rows'}", "data.streaming=true",
              "data.tokenizer=bpe", "data.vocab_size=120", "model.sample_tokens=0", *TINY, "optim.decay_steps=30",
              "trainer.val_check_interval=250", "trainer.limit_val_batches=2", "test=false"]
    straight, run = tmp_path / "straight", tmp_path / "run"
    run_train(straight, tmp_path, *common)
    losses = train_losses(straight)
    assert len(losses) == 30 and losses[-1] < losses[0] - 0.3, losses
    resumed = killed_and_resumed(run, tmp_path, *common)
    # (not the same losses after the kill: Lightning reads one batch ahead of a loader of unknown length,
    # and the position it saves includes that batch, so the resumed stream starts a batch later; docs/data.md)
    assert resumed[:11] == pytest.approx(losses[:11], abs=1e-6) and resumed[11] != pytest.approx(losses[11], abs=1e-6)
