"""data=trec (TREC question classification, coarse 6 / fine 50) and data=stsb's scored test split (the STS
Benchmark's own sts-test.csv): small files in the real layouts made here, and the real files where
ZOO_DATA_DIR (or the shared data folder) holds them."""

from __future__ import annotations

import os
from pathlib import Path

import hydra
import pytest

from zoo.config import compose_config

TREC_TRAIN = ["DESC:manner How did serfdom develop in and then leave Russia ?",
              "ENTY:cremat What films featured the character Popeye Doyle ?",
              "HUM:ind Who was the first man on the moon ?",
              "LOC:city What city is the Eiffel Tower in ?",
              "NUM:date When did the war end ?",
              "ABBR:exp What does NASA stand for ?"] * 4
TREC_TEST = ["HUM:ind Who wrote Hamlet ?", "LOC:city Where is the Louvre ?"]


def data_module(data: str, root: Path, *overrides: str):
    cfg = compose_config(["model=bert", "task=classify", f"data={data}", f"paths.data_dir={root}",
                          f"paths.cache_dir={root / 'cache'}", "data.batch_size=2", "data.vocab_size=120", *overrides])
    module = hydra.utils.instantiate(cfg.data)
    module.setup()
    return module


def write_trec(root: Path, encoding: str = "utf-8") -> None:
    folder = root / "downstream" / "trec"
    folder.mkdir(parents=True)
    (folder / "train_5500.label").write_bytes("\n".join(TREC_TRAIN + ["ENTY:food What is crème brûlée ?"]).encode(encoding))
    (folder / "TREC_10.label").write_bytes(("\n".join(TREC_TEST) + "\n").encode(encoding))


def test_trec_reads_coarse_and_fine_labels(tmp_path):
    """Coarse: the six classes before the colon; fine: the whole COARSE:fine label, the test split TREC_10's."""
    write_trec(tmp_path)
    coarse = data_module("trec", tmp_path)
    assert coarse.dims["class_names"] == ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    assert len(coarse.splits["test"]) == 2 and coarse.splits["test"].labels.tolist() == [3, 4]
    fine = data_module("trec", tmp_path, "data.granularity=fine")
    assert fine.dims["class_names"] == sorted({line.split()[0] for line in TREC_TRAIN} | {"ENTY:food"})
    assert [fine.dims["class_names"][i] for i in fine.splits["test"].labels] == ["HUM:ind", "LOC:city"]
    with open(tmp_path / "downstream" / "trec" / "TREC_10.label", "a") as f:
        f.write("LOC:other Where is the Nile ?\n")
    with pytest.raises(ValueError, match="LOC:other"):  # a fine test label training never has: refused by name
        data_module("trec", tmp_path, "data.granularity=fine")


def test_trec_in_latin1_is_read_as_latin1_and_said(tmp_path):
    write_trec(tmp_path, "latin-1")
    from zoo.data.downstream import read_trec

    with pytest.warns(UserWarning, match="not UTF-8.*read as latin-1"):
        rows = read_trec(tmp_path / "downstream" / "trec" / "train_5500.label", "coarse")
    assert rows[-1] == ("What is crème brûlée ?", None, "ENTY")  # the bytes 0xe8, 0xfb as latin-1 has them
    with pytest.warns(UserWarning, match="not UTF-8"):
        assert data_module("trec", tmp_path).dims["num_classes"] == 6


def test_a_bad_trec_line_and_granularity_are_refused(tmp_path):
    write_trec(tmp_path)
    with pytest.raises(Exception, match="data.granularity=medium: expected one of coarse, fine"):
        data_module("trec", tmp_path, "data.granularity=medium")
    with open(tmp_path / "downstream" / "trec" / "TREC_10.label", "a") as f:
        f.write("a question without its label\n")
    with pytest.raises(ValueError, match=r"TREC_10.label line 3: expected 'COARSE:fine question'"):
        data_module("trec", tmp_path)


def write_stsb(root: Path) -> None:
    """GLUE's STS-B TSVs (header; a lone quote inside) and the STS Benchmark's test file (no header, 7
    fields, or 9 with license fields after the second sentence)."""
    folder = root / "downstream" / "stsb"
    folder.mkdir(parents=True)
    glue = ["A man plays a guitar.\tA man is playing a guitar.\t4.8", 'A "dog runs.\tA cat sleeps.\t0.4',
            "Two kids play.\tChildren are playing.\t3.9", "It rains.\tThe sun shines.\t0.6"] * 3
    for split in ("train", "dev"):
        (folder / f"{split}.tsv").write_text("sentence1\tsentence2\tscore\n" + "\n".join(glue) + "\n")
    (folder / "sts-test.csv").write_text(
        "main-captions\tMSRvid\t2012test\t0024\t2.500\tA girl is styling her hair.\tA girl is brushing her hair.\n"
        'main-forum\tdeft-forum\t2014\t0007\t1.000\tHe said "no.\tShe left.\tlicense: CC\tsource: forum\n'
        "main-news\theadlines\t2015\t0100\t4.200\tStocks fall.\tShares drop.\n")


def test_stsb_tests_on_the_sts_benchmarks_scored_test_file(tmp_path):
    """The test split is sts-test.csv: score field 5, sentences fields 6 and 7, license fields after them
    left out, quotes as characters; train and dev stay GLUE's TSVs."""
    write_stsb(tmp_path)
    module = data_module("stsb", tmp_path)
    assert module.splits["test"].labels.tolist() == pytest.approx([2.5, 1.0, 4.2])
    assert len(module.splits["train"]) == 12 and module.dims["num_classes"] == 1
    from zoo.data.downstream import read_sts
    rows = read_sts(tmp_path / "downstream" / "stsb" / "sts-test.csv")
    assert rows[1] == ('He said "no.', "She left.", 1.0)


def test_a_short_sts_line_is_refused_naming_it(tmp_path):
    write_stsb(tmp_path)
    with open(tmp_path / "downstream" / "stsb" / "sts-test.csv", "a") as f:
        f.write("main-news\theadlines\t2015\t0101\tnot a score\tA.\tB.\n")
    with pytest.raises(ValueError, match=r"sts-test.csv line 4: the score \(field 5\) 'not a score'"):
        data_module("stsb", tmp_path)


def shared_data() -> Path | None:
    """The real data folder: ZOO_DATA_DIR, else the shared one beside the checkout, if it holds downstream/."""
    here = Path(__file__).resolve().parents[1]
    for folder in (os.environ.get("ZOO_DATA_DIR"), here.parent / "shared" / "data", here.parents[1] / "shared" / "data"):
        if folder and (Path(folder) / "downstream" / "trec").is_dir() and (Path(folder) / "downstream" / "stsb").is_dir():
            return Path(folder)
    return None


@pytest.mark.skipif(shared_data() is None, reason="the real downstream files are not here (ZOO_DATA_DIR)")
def test_the_real_trec_and_sts_test_files_read_whole():
    """TREC: 5,452 training and 500 test questions, 6 coarse and 50 fine classes; STS Benchmark test: 1,379 scored pairs."""
    from zoo.data.downstream import read_sts, read_trec

    root = shared_data() / "downstream"
    train, test = (read_trec(root / "trec" / name, "fine") for name in ("train_5500.label", "TREC_10.label"))
    assert (len(train), len(test)) == (5452, 500)
    assert len({label.split(":")[0] for *_, label in train}) == 6 and len({label for *_, label in train}) == 50
    scored = read_sts(root / "stsb" / "sts-test.csv")
    assert len(scored) == 1379 and all(0 <= score <= 5 for *_, score in scored)
