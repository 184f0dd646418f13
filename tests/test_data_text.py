"""data=text: your own files (plain text, folders, globs, JSONL / CSV / TSV / parquet rows, a
save_to_disk folder) read through `datasets`, documents kept apart, tokenizers trained on the
training split and cached by its content, refusals that name the file and the line or record;
and (slow) GPT, Llama with BPE and BERT on JSONL training on such files as a user runs them."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, run_train
from zoo.data.batches import IGNORE, PaddedTokens, TokenWindows
from zoo.data.text import DocumentWindows, TextData, hold_out, read_documents

WORDS = "the quick brown fox jumps over a lazy dog while café naïve bees hum".split()


def document(k: int, lines: int = 20) -> str:
    """Document k: lines of words in an order of its own (non-ASCII included: bytes != characters)."""
    return "".join(f"{k}: " + " ".join(WORDS[(k + i + j) % len(WORDS)] for j in range(6)) + ".\n"
                   for i in range(lines))


def write_corpus(folder: Path, files: int = 6, lines: int = 20) -> Path:
    """``files`` plain text documents under ``folder``, some in a sub-folder, .txt and .md; returns ``folder``."""
    for k in range(files):
        path = folder / ("notes" if k % 2 else "") / f"doc{k}.{'md' if k % 3 == 0 else 'txt'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(document(k, lines), encoding="utf-8")
    return folder


def module(source: Path | str, batch_type: type = TokenWindows, cache: Path | None = None, **kwargs) -> TextData:
    """A set-up TextData over ``source`` (cache beside it unless given)."""
    cache = cache or Path(source).parent / "cache"
    data = TextData("unused", str(cache), kwargs.pop("batch_size", 4), kwargs.pop("block_size", 32),
                    source=str(source), **kwargs)
    data.serve(batch_type)
    data.setup()
    return data


# --- sources --------------------------------------------------------------------------------

def test_a_folder_is_read_recursively_a_glob_picks_its_files_and_hidden_files_are_left_out(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", files=6)
    (corpus / ".git").mkdir()
    (corpus / ".git" / "HEAD").write_bytes(b"\xff\xfe not text")  # would be refused if read
    (corpus / "empty.txt").write_text("")  # an empty document is left out
    cache = tmp_path / "cache"
    docs = read_documents(str(corpus), "data.source", "text", cache)
    assert sorted(docs) == sorted(document(k) for k in range(6))
    md = read_documents(str(corpus / "**" / "*.md"), "data.source", "text", cache)
    assert sorted(md) == sorted(document(k) for k in (0, 3))
    assert read_documents(str(corpus / "notes" / "doc1.txt"), "data.source", "text", cache) == [document(1)]


def test_rows_of_jsonl_csv_tsv_parquet_and_a_saved_dataset_are_documents_of_their_column(tmp_path):
    import datasets

    texts = [document(k, lines=2) for k in range(3)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(texts)))
    for name, delimiter in (("rows.csv", ","), ("rows.tsv", "\t")):
        with open(tmp_path / name, "w", newline="") as f:
            writer = csv.writer(f, delimiter=delimiter)
            writer.writerows([["id", "body"], *[[i, t] for i, t in enumerate(texts)]])
    rows = datasets.Dataset.from_dict({"id": [0, 1, 2], "body": texts})
    rows.to_parquet(str(tmp_path / "rows.parquet"))
    rows.save_to_disk(str(tmp_path / "saved"))
    for source in ("rows.jsonl", "rows.csv", "rows.tsv", "rows.parquet", "saved"):
        assert read_documents(str(tmp_path / source), "data.source", "body", tmp_path / "cache") == texts, source
    assert not list(tmp_path.glob("*.arrow")) and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["rows.jsonl", "rows.csv", "rows.tsv", "rows.parquet", "saved", "cache"])  # nothing written beside the data


@pytest.mark.parametrize("make, expected", [
    (lambda d: d.mkdir(), r"data.source=.*src is an empty folder"),
    (lambda d: d.with_suffix(".txt").write_text(""), r"holds no text: every document in it is empty"),
    (lambda d: None, r"data.source=.*src: no such file or folder"),
    (lambda d: d.with_suffix(".jsonl").write_text('{"body": "hi"}\n{"body": "there"}\n'),
     r"src.jsonl has no column 'text' \(data.column=text\): its columns are \['body'\]"),
    (lambda d: d.with_suffix(".jsonl").write_text('{"text": "hi"}\n{"text": 7}\n{"text": "x"}\n'),
     r"src.jsonl record 2: its 'text' is 7, not text"),
    (lambda d: d.with_suffix(".txt").write_bytes("line one\nline two é\n".encode("latin-1")),
     r"src.txt is not UTF-8 text: byte 18 \(line 2\)"),
    (lambda d: d.with_suffix(".jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n'),
     r"src.jsonl is not UTF-8 text: .*\(line 2\)"),
])
def test_bad_sources_are_refused_in_one_line_naming_the_file_and_the_line_or_record(tmp_path, make, expected):
    make(tmp_path / "src")
    source = next(iter(sorted(tmp_path.glob("src*"))), tmp_path / "src")
    with pytest.raises(ValueError, match=expected) as err:
        read_documents(str(source), "data.source", "text", tmp_path / "cache")
    assert "\n" not in str(err.value)


def test_a_glob_that_matches_nothing_and_a_source_of_two_kinds_are_refused(tmp_path):
    write_corpus(tmp_path / "c", files=2)
    with pytest.raises(ValueError, match=r"data.source=.*\*.rst matches no file"):
        read_documents(str(tmp_path / "c" / "*.rst"), "data.source", "text", tmp_path / "cache")
    (tmp_path / "c" / "rows.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(ValueError, match=r"holds files of 2 kinds \(.*\): point it at one kind"):
        read_documents(str(tmp_path / "c"), "data.source", "text", tmp_path / "cache")


# --- splits and windows ---------------------------------------------------------------------

def test_val_and_test_are_whole_documents_held_out_by_the_seed():
    docs = [document(k) for k in range(20)]
    split = hold_out(docs, {"val": 0.1, "test": 0.1}, seed=1, source="s")
    assert {k: len(v) for k, v in split.items()} == {"train": 16, "val": 2, "test": 2}
    assert sorted(sum(split.values(), [])) == sorted(docs)  # each document in one split, whole
    assert split == hold_out(docs, {"val": 0.1, "test": 0.1}, seed=1, source="s")
    assert split["val"] != hold_out(docs, {"val": 0.1, "test": 0.1}, seed=2, source="s")["val"]


def test_one_document_is_held_out_by_its_last_lines():
    doc = document(0, lines=20)
    split = hold_out([doc], {"val": 0.1, "test": 0.1}, seed=1, source="s")
    assert split["train"][0] + split["val"][0] + split["test"][0] == doc
    assert [s.count("\n") for s in (split["train"][0], split["val"][0], split["test"][0])] == [16, 2, 2]
    with pytest.raises(ValueError, match="too little text to hold out"):
        hold_out(["one line"], {"val": 0.1, "test": 0.1}, seed=1, source="s")


def _eod(data: TextData) -> int:
    return data.tokenizer.token_id("<|endoftext|>")


def test_with_pack_false_no_training_window_holds_two_documents(tmp_path):
    data = module(write_corpus(tmp_path / "c", files=8, lines=7), pack=False, block_size=16)
    eod, windows = _eod(data), data.dataset("train")
    assert isinstance(windows, DocumentWindows)
    predicted = []
    for i in range(len(windows)):
        inputs, targets = windows[i]
        real = targets != IGNORE
        assert eod not in inputs[1:][real[1:]].tolist()  # an <eod> is read only first: the document's start
        assert eod not in targets[real][:-1].tolist()  # and predicted only last: its end
        predicted += targets[real].tolist()
    assert predicted == windows.stream[1:].tolist()  # every token predicted once, in order
    packed = module(tmp_path / "c", pack=True, block_size=16).dataset("train")
    crossing = [i for i in range(len(packed)) if eod in packed[i].inputs[1:].tolist()]
    assert crossing  # (packed windows do hold two documents: the check above can fail)


def test_a_masked_lm_reads_sequences_of_one_document_each_with_pack_false(tmp_path):
    data = module(write_corpus(tmp_path / "c", files=6, lines=5), PaddedTokens, pack=False, block_size=24)
    sep, pad = data.dims["sep_id"], data.dims["pad_id"]
    assert data.tokenizer.token_id("[SEP]") == sep and {pad, data.dims["mask_id"], sep} <= set(data.dims["special_ids"])
    sequences = data.dataset("train")
    ends = 0
    for i in range(len(sequences)):
        tokens, padding = sequences[i]
        real = tokens[padding].tolist()
        assert sep not in real[:-1] and pad not in real  # at most one document's end, only last
        ends += real[-1] == sep
    assert ends == 4  # one per training document (6 less the val and test ones)


def test_evaluation_windows_count_every_token_and_the_texts_utf8_bytes(tmp_path):
    corpus = write_corpus(tmp_path / "c", files=10)
    data = module(corpus, pack=True)
    documents = read_documents(str(corpus), "data.source", "text", tmp_path / "cache")
    val, held_out = data.dataset("val"), hold_out(documents, {"val": 0.1, "test": 0.1}, seed=1337, source="s")
    assert isinstance(val, DocumentWindows)
    assert val.text_bytes == sum(len(d.encode("utf-8")) for d in held_out["val"]) > sum(map(len, held_out["val"]))
    assert val.predicted_tokens == sum(len(d) + 1 for d in held_out["val"])  # characters, and each one's <eod>
    assert val.predicted_tokens == sum(int((val[i].targets != IGNORE).sum()) for i in range(len(val)))


def test_a_trained_tokenizer_is_cached_by_the_texts_hash_so_an_edited_file_trains_a_new_one(tmp_path):
    corpus = write_corpus(tmp_path / "c", files=6)
    first = module(corpus, tokenizer="bpe", vocab_size=120)
    cached = sorted((tmp_path / "cache" / "text").glob("bpe*.json"))
    assert len(cached) == 1 and not any("zyzzyva" in t for t in first.tokenizer.tokenizer.get_vocab())
    assert module(corpus, tokenizer="bpe", vocab_size=120).tokenizer.tokenizer.get_vocab() == \
        first.tokenizer.tokenizer.get_vocab()  # read back, not trained again
    for path in corpus.rglob("doc*"):
        path.write_text(path.read_text() + "zyzzyva " * 100)
    edited = module(corpus, tokenizer="bpe", vocab_size=120)
    assert len(sorted((tmp_path / "cache" / "text").glob("bpe*.json"))) == 2
    assert any("zyzzyva" in token for token in edited.tokenizer.tokenizer.get_vocab())  # learnt from the files


def test_bad_settings_are_refused_before_anything_is_read(tmp_path):
    for kwargs, expected in (({"source": None}, "data.source is not set"),
                             ({"tokenizer": "sentencepiece"}, "data.tokenizer=sentencepiece: expected one of"),
                             ({"val_fraction": 0.6, "test_fraction": 0.5}, "leave nothing to train on")):
        with pytest.raises(ValueError, match=expected):
            TextData("unused", str(tmp_path), 4, 32, **({"source": "x"} | kwargs))


def test_too_little_text_for_one_batch_is_refused_naming_the_source(tmp_path):
    with pytest.raises(ValueError, match=r"data.source=.*c: its training split makes \d+ windows of 32 tokens, "
                                         r"fewer than one batch of data.batch_size=64"):
        module(write_corpus(tmp_path / "c", files=4, lines=3), batch_size=64)


# --- training, as a user runs it (slow) -----------------------------------------------------

TINY = ["trainer=cpu", "trainer.max_steps=30", "trainer.val_check_interval=15", "model.net.n_layers=2",
        "model.net.context=32", "model.net.block.d_model=32", "model.net.block.n_heads=2", "data.batch_size=8",
        "trainer.log_every_n_steps=1", "optim.warmup_steps=2", "optim.lr=3e-3"]


def train_losses(run: Path) -> list[float]:
    with open(run / "metrics.csv") as f:
        return [float(row["train/loss"]) for row in csv.DictReader(f) if row.get("train/loss")]


def killed_and_resumed(run: Path, data_dir: Path, *overrides: str, steps: int = 30) -> list[float]:
    """The train losses of ``python train.py *overrides`` sent SIGTERM after step 11 (as a cluster
    would), then resumed from its last.ckpt into the same folder; each of ``steps`` logged once."""
    env = dict(os.environ, ZOO_DATA_DIR=str(data_dir), ZOO_CACHE_DIR=str(run.parent / "cache"))
    killed = subprocess.run([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}", *overrides,
                             "+callbacks.sigterm._target_=tests.sigterm_at.SigtermAt", "+callbacks.sigterm.step=11"],
                            env=env, cwd=ROOT, capture_output=True, timeout=300)
    assert killed.returncode == 143, killed.stderr[-3000:]
    run_train(run, data_dir, *overrides, f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    with open(run / "metrics.csv") as f:
        logged = [int(row["step"]) for row in csv.DictReader(f) if row.get("train/loss")]
    assert logged == list(range(steps))  # both segments, each step once
    return train_losses(run)


def final_test_metrics(run: Path) -> dict[str, float]:
    with open(run / "metrics.csv") as f:
        row = next(row for row in csv.DictReader(f) if row.get("test/loss"))
    return {k: float(v) for k, v in row.items() if k.startswith("test/") and v}



@pytest.mark.slow
def test_gpt_trains_on_a_folder_of_text_files_and_its_test_reports_bits_per_byte(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", files=10)
    run = tmp_path / "run"
    run_train(run, tmp_path, "model=gpt", "data=text", f"data.source={corpus}", "model.sample_tokens=20", *TINY)
    losses = train_losses(run)
    assert losses[-1] < losses[0] - 0.3, losses
    test = final_test_metrics(run)
    assert test["test/ppl"] == pytest.approx(math.exp(test["test/loss"]), rel=1e-5)
    windows = module(corpus, cache=tmp_path / "cache").dataset("test")  # the run's test split, rebuilt
    expected = test["test/loss"] * windows.predicted_tokens / math.log(2) / windows.text_bytes
    assert test["test/bpb"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.slow
def test_llama_trains_with_a_bpe_tokenizer_learnt_from_the_files(tmp_path):
    from zoo.checkpoint import stored_tokenizer

    corpus = write_corpus(tmp_path / "corpus", files=10)
    run = tmp_path / "run"
    run_train(run, tmp_path, "model=llama", "data=text", f"data.source={corpus}", "data.tokenizer=bpe",
              "data.vocab_size=150", "+model.sample_tokens=0", *TINY)
    losses = train_losses(run)
    assert losses[-1] < losses[0] - 0.3, losses
    vocab = stored_tokenizer(run / "checkpoints" / "last.ckpt").tokenizer.get_vocab()
    assert len(vocab) == 150 and {"▁quick", "▁café", "<|endoftext|>"} <= set(vocab)


@pytest.mark.slow
def test_bert_trains_on_the_text_column_of_a_jsonl_file(tmp_path):
    from zoo.checkpoint import stored_tokenizer

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": k, "text": document(k, lines=4)}) + "\n" for k in range(40)))
    run = tmp_path / "run"
    run_train(run, tmp_path, "model=bert", "data=text", f"data.source={rows}", "data.column=text", *TINY)
    losses = train_losses(run)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, losses
    tokenizer = stored_tokenizer(run / "checkpoints" / "last.ckpt")
    assert set(tokenizer.chars) == set("".join(document(k, lines=4) for k in range(40)))
    assert tokenizer.specials == ("[PAD]", "[MASK]", "[SEP]")
    assert 0 <= final_test_metrics(run)["test/acc"] <= 1
