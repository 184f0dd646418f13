"""data=pairs: your own source / target pairs (JSONL, CSV with quoted commas, parquet, a save_to_disk
folder) read through `datasets` into the seq2seq batches the encoder-decoders read; held-out splits,
the shared tokenizer, long rows cut with a warning, refusals naming the file and the record; and
(slow) T5 and BART training on such files as a user runs them, `zoo eval` reporting the run's numbers."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest

from conftest import run_train
from test_data_text import final_test_metrics, train_losses
from test_transformer_multi30k import sentence_pair
from zoo.config import compose_config
from zoo.data.batches import IGNORE, SequencePairs
from zoo.data.pairs import TextPairs
from zoo.data.tokenizers import tokenizer_from_state


def pairs(n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` German -> English rows (a word-by-word toy translation), commas inside some texts."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        de, en = sentence_pair(rng)
        if i % 3 == 0:
            de, en = de.replace(" ", ", ", 1), en.replace(" ", ", ", 1)
        rows.append({"id": i, "de": de, "en": en})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def write_csv(path: Path, rows: list[dict], delimiter: str = ",") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    return path


def module(source: Path | str, cache: Path | None = None, **kwargs) -> TextPairs:
    """A set-up TextPairs over ``source`` (columns de -> en; cache beside it unless given)."""
    cache = cache or Path(source).parent / "cache"
    args = {"source_column": "de", "target_column": "en", "vocab_size": 120, **kwargs}
    data = TextPairs("unused", str(cache), kwargs.pop("batch_size", 8), args.pop("block_size", 32),
                     source=str(source), **args)
    data.setup()
    return data


# --- reading ----------------------------------------------------------------------------------

def test_a_batch_is_teacher_forced_and_its_targets_decode_to_the_target_texts(tmp_path):
    rows = pairs(60)
    data = module(write_jsonl(tmp_path / "pairs.jsonl", rows))
    assert {split: len(p) for split, p in data.pairs.items()} == {"train": 48, "val": 6, "test": 6}
    batch = next(iter(data.train_dataloader()))
    assert isinstance(batch, SequencePairs) and batch.source.shape[0] == 8
    by_source = {row["de"]: row["en"] for row in rows}
    tokenizer = tokenizer_from_state(data.tokenizer.state())  # as a checkpoint stores it
    real = batch.target_out != IGNORE
    assert (batch.target_in[:, 0] == data.dims["bos_id"]).all()
    for i, reference in enumerate(batch.references):
        ids = batch.target_out[i][real[i]].tolist()
        assert ids[-1] == data.dims["eos_id"]
        assert batch.target_in[i][1 : len(ids)].tolist() == ids[:-1]  # the target, shifted right
        source = tokenizer.decode(batch.source[i][batch.source_padding[i]].tolist())
        assert tokenizer.decode(ids[:-1]) == reference == by_source[source]  # each pair stays a pair
    # one vocabulary of both sides, learnt from the training pairs and cached by their content
    assert list((tmp_path / "cache" / "pairs").glob("bpe120-*.json"))
    vocab = data.tokenizer.tokenizer.get_vocab()
    assert {"▁hund", "▁dog", "<pad>", "<s>", "</s>", "<unk>"} <= set(vocab)


def test_held_out_rows_are_drawn_by_the_seed_and_given_splits_are_read(tmp_path):
    source = write_jsonl(tmp_path / "pairs.jsonl", pairs(60))
    val = lambda **kw: module(source, **kw).pairs["val"].references  # noqa: E731
    assert val(seed=1) == val(seed=1) != val(seed=2)
    given = write_jsonl(tmp_path / "val.jsonl", pairs(5, seed=9))
    data = module(source, val=str(given))
    assert data.pairs["val"].references == [row["en"] for row in pairs(5, seed=9)]
    assert len(data.pairs["train"]) == 54 and len(data.pairs["test"]) == 6  # only test held out


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".parquet", "saved"])
def test_csv_with_quoted_commas_tsv_parquet_and_a_saved_dataset_give_the_same_pairs(tmp_path, suffix):
    import datasets

    rows = pairs(30)
    if suffix == "saved":
        source = tmp_path / "saved"
        datasets.Dataset.from_list(rows).save_to_disk(str(source))
    elif suffix == ".parquet":
        source = tmp_path / "pairs.parquet"
        datasets.Dataset.from_list(rows).to_parquet(str(source))
    else:
        source = write_csv(tmp_path / f"pairs{suffix}", rows, "," if suffix == ".csv" else "\t")
    data = module(source, tokenizer="char", val_fraction=0.5, test_fraction=0.2)
    read = sorted(r for split in data.pairs.values() for r in split.references)
    assert read == sorted(row["en"] for row in rows) and any(", " in r for r in read)


def test_long_rows_are_cut_to_the_context_with_a_warning(tmp_path):
    rows = pairs(20)
    rows[0]["de"], rows[0]["en"] = " ".join(["ein hund rennt"] * 20), " ".join(["a dog runs"] * 20)
    with pytest.warns(UserWarning, match=r"longer than 16 tokens were truncated \(the model's context, data.block_size=16\)"):
        data = module(write_jsonl(tmp_path / "pairs.jsonl", rows), tokenizer="char", block_size=16)
    for split in data.pairs.values():
        assert max(map(len, split.source)) <= 16 and max(map(len, split.target)) <= 15


def test_t5_reads_pairs_as_sequence_pairs_with_a_task_prefix(tmp_path):
    from zoo.train.compat import batch_type

    cfg = compose_config(["model=t5", "data=pairs", "data.prefix=translate German to English: "])
    assert batch_type(cfg.model, cfg.data, "t5", "pairs") is SequencePairs
    data = module(write_jsonl(tmp_path / "pairs.jsonl", pairs(30)), tokenizer="char",
                  prefix="translate German to English: ", block_size=80)
    assert all(data.tokenizer.decode(ids).startswith("translate German to English: ")
               for ids in data.pairs["train"].source)


# --- refusals -----------------------------------------------------------------------------------

def _rows_with(i: int, **values) -> list[dict]:
    rows = pairs(20)
    rows[i] = {**rows[i], **values}
    return rows


@pytest.mark.parametrize("make, expected", [
    (lambda d: write_jsonl(d / "p.jsonl", [{"text": "a", "summary": "b"}] * 10),
     r"p.jsonl has no column 'de' \(data.source_column=de\): its columns are \['text', 'summary'\]"),
    (lambda d: write_jsonl(d / "p.jsonl", [{"de": "a", "summary": "b"}] * 10),
     r"p.jsonl has no column 'en' \(data.target_column=en\): its columns are \['de', 'summary'\]"),
    (lambda d: write_jsonl(d / "p.jsonl", _rows_with(3, en="  ")),
     r"p.jsonl record 4: its 'en' is empty: every pair needs a source and a target text"),
    (lambda d: write_csv(d / "p.csv", _rows_with(6, de="")),
     r"p.csv record 7: its 'de' is empty: every pair needs a source and a target text"),
    (lambda d: write_jsonl(d / "p.jsonl", _rows_with(2, de=["ein", "hund"])),
     r"p.jsonl record 3: its 'de' is \['ein', 'hund'\], not text"),
    (lambda d: write_jsonl(d / "p.jsonl", [{"de": f"satz {i}", "en": i} for i in range(10)]),
     r"p.jsonl record 1: its 'en' is 0, not text"),
    (lambda d: (d / "p.txt").write_text("ein hund\ta dog\n") and d / "p.txt",
     r"data.source=.*p.txt: .*p.txt is not a rows file: expected .jsonl, .json, .csv, .tsv, .parquet files"),
    (lambda d: write_jsonl(d / "p.jsonl", pairs(2)),
     r"data.source=.*p.jsonl holds 2 record\(s\), too few to hold out \['test', 'val'\]"),
])
def test_bad_pairs_are_refused_in_one_line_naming_the_file_and_the_record(tmp_path, make, expected):
    source = make(tmp_path)
    with pytest.raises(ValueError) as err:
        module(source)
    assert "\n" not in str(err.value)
    assert err.match(expected)


def test_an_unset_source_and_bad_settings_are_refused_before_anything_is_read(tmp_path):
    with pytest.raises(ValueError, match=r"data.source is not set: data=pairs reads your pairs"):
        TextPairs("unused", str(tmp_path), 8, 32)
    with pytest.raises(ValueError, match=r"data.tokenizer=sentencepiece: expected one of char, bpe, wordpiece"):
        TextPairs("unused", str(tmp_path), 8, 32, source="p.jsonl", tokenizer="sentencepiece")
    with pytest.raises(ValueError, match=r"data.val_fraction=0.6 \+ data.test_fraction=0.5 leave no"):
        TextPairs("unused", str(tmp_path), 8, 32, source="p.jsonl", val_fraction=0.6, test_fraction=0.5)


# --- training, as a user runs it (slow) -----------------------------------------------------

TINY = ["trainer=cpu", "trainer.max_steps=30", "trainer.val_check_interval=15", "model.net.n_encoder_layers=1",
        "model.net.n_decoder_layers=1", "model.net.block.d_model=32", "model.net.block.n_heads=2",
        "model.net.block.d_ff=64", "model.decoding.max_new_tokens=12", "model.decoding.beam_size=2",
        "data.batch_size=16", "data.vocab_size=120", "trainer.log_every_n_steps=1", "optim.warmup_steps=2",
        "optim.lr=3e-3"]


def val_losses(run: Path) -> list[float]:
    with open(run / "metrics.csv") as f:
        return [float(row["val/loss"]) for row in csv.DictReader(f) if row.get("val/loss")]


@pytest.mark.slow
def test_t5_trains_on_a_jsonl_file_of_pairs_and_zoo_eval_reports_its_test_numbers(tmp_path, monkeypatch):
    from zoo.cli.commands import call

    source = write_jsonl(tmp_path / "pairs.jsonl", [{"source": r["de"], "target": r["en"]} for r in pairs(300)])
    run = tmp_path / "run"
    run_train(run, tmp_path, "model=t5", "data=pairs", f"data.source={source}", "model.net.context=40", *TINY)
    ckpt = run / "checkpoints" / "last.ckpt"
    assert ckpt.is_file()
    losses, val = train_losses(run), val_losses(run)
    assert losses[-1] < losses[0] - 0.3, losses
    assert len(val) == 2 and all(math.isfinite(v) for v in val) and val[1] < val[0], val
    test = final_test_metrics(run)
    assert 0 <= test["test/bleu_greedy"] <= 100 and "test/bleu_beam" in test
    out, cwd = tmp_path / "eval.json", tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    call("eval", [f"ckpt={ckpt}", "data=pairs", f"data.source={source}", f"out={out}",
                  f"paths.cache_dir={tmp_path / 'cache'}", "data.batch_size=16"])
    evaluated = json.loads(out.read_text())
    assert evaluated["loss"] == pytest.approx(test["test/loss"], rel=1e-5)
    assert evaluated["bleu_greedy"] == pytest.approx(test["test/bleu_greedy"], rel=1e-5)
    assert not list(cwd.iterdir())  # zoo eval writes its out= only (no examples.txt where it runs)


@pytest.mark.slow
def test_bart_trains_on_a_csv_file_whose_texts_hold_quoted_commas(tmp_path):
    from zoo.checkpoint import stored_tokenizer

    source = write_csv(tmp_path / "pairs.csv", pairs(300))
    assert '"' in source.read_text()  # (the commas inside texts are quoted)
    run = tmp_path / "run"
    run_train(run, tmp_path, "model=bart", "data=pairs", f"data.source={source}", "data.source_column=de",
              "data.target_column=en", *TINY)
    losses = train_losses(run)
    assert losses[-1] < losses[0] - 0.3, losses
    assert math.isfinite(final_test_metrics(run)["test/loss"])
    tokenizer = stored_tokenizer(run / "checkpoints" / "last.ckpt")
    assert tokenizer.decode(tokenizer.encode("Ein hund, rennt im park.")) == "Ein hund, rennt im park."
