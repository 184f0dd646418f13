"""WikiText: official layouts, article-respecting packing, padding, the cached tokenizer, errors."""

from __future__ import annotations

import pytest
import torch

from bert_wikitext_files import write_wikitext
from zoo.data.batches import ImageLabels, PaddedTokens, TokenWindows
from zoo.data.tokenizers import tokenizer_from_state
from zoo.data.wikitext import WikiText, pack, read_articles


def datamodule(tmp_path, name="wikitext-2", batch_type=PaddedTokens, **kw) -> WikiText:
    dm = WikiText(str(tmp_path / "data"), str(tmp_path / "cache"), batch_size=4, name=name, seq_len=32,
                  vocab_size=120, **kw)
    dm.serve(batch_type)
    dm.prepare_data()
    dm.setup("fit")
    return dm


@pytest.mark.parametrize("name", ["wikitext-2", "wikitext-103-raw"])
def test_batches_tokens_padding_and_dims(tmp_path, name):
    write_wikitext(tmp_path / "data", name)
    dm = datamodule(tmp_path, name)
    batch = next(iter(dm.train_dataloader()))
    assert batch.tokens.shape == batch.padding.shape == (4, 32) and batch.padding.dtype == torch.bool
    d = dm.dims
    assert d["vocab_size"] == dm.tokenizer.vocab_size <= 120 and set(d["special_ids"]) == {0, 1, 2, 3, 4}
    for split in ("train", "val", "test"):
        ds = dm.splits[split]
        assert (ds.tokens[:, 0] == d["cls_id"]).all()
        rows = torch.arange(len(ds))
        assert (ds.tokens[rows, ds.lengths.long() - 1] == d["sep_id"]).all()
        assert ((ds.tokens == d["pad_id"]) == ~(torch.arange(32)[None] < ds.lengths[:, None])).all()
    assert (dm.splits["train"].lengths < 32).any()  # an article's last sequence is padded


def test_a_language_model_reads_windows_of_the_whole_token_stream(tmp_path):
    """Word-level WikiText LM: each split's articles as one stream ([SEP] after each), cut in order
    into windows; every token but the first is predicted exactly once."""
    write_wikitext(tmp_path / "data")
    dm = datamodule(tmp_path, batch_type=TokenWindows)
    sep = dm.dims["sep_id"]
    for split in ("train", "val", "test"):
        windows = dm.splits[split]
        articles = dm._articles(split)
        stream = [t for ids in dm.tokenizer.encode_batch(articles) for t in (*ids, sep)]
        assert len(windows) == (len(stream) - 1) // 32 and (torch.tensor(stream) == sep).sum() == len(articles)
        inputs = torch.cat([w.inputs for w in windows])
        targets = torch.cat([w.targets for w in windows])
        assert inputs.tolist() == stream[: len(inputs)] and targets.tolist() == stream[1 : len(inputs) + 1]
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, TokenWindows) and batch.inputs.shape == batch.targets.shape == (4, 32)
    assert batch.samples == 4 and batch.items == 4 * 32


def test_a_type_the_data_cannot_yield_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"WikiText yields \['PaddedTokens', 'TokenWindows'\], not ImageLabels"):
        datamodule(tmp_path, batch_type=ImageLabels)


def test_unk_becomes_one_special_token(tmp_path):
    write_wikitext(tmp_path / "data")
    dm = datamodule(tmp_path)
    unk = dm.tokenizer.token_id("[UNK]")
    assert dm.tokenizer.encode("[UNK]") == [unk] and dm.tokenizer.encode("the [UNK] the").count(unk) == 1
    assert "<unk>" not in "".join(read_articles(tmp_path / "data/wikitext-2/wiki.train.tokens"))


def test_articles_split_at_titles_and_sequences_never_span_two():
    ids = [[10, 11, 12, 13, 14], [20, 21]]
    tokens, lengths = pack(ids, 5, pad_id=0, cls_id=2, sep_id=3)
    assert tokens.tolist() == [[2, 10, 11, 12, 3], [2, 13, 14, 3, 0], [2, 20, 21, 3, 0]]
    assert lengths.tolist() == [5, 4, 4]


def test_read_articles_groups_lines_by_title(tmp_path):
    f = tmp_path / "wiki.valid.tokens"
    f.write_text(" \n = A = \n \n x y \n = = Sec = = \n z \n = B = \n w \n")
    assert read_articles(f) == ["= A =\nx y\n= = Sec = =\nz", "= B =\nw"]


def test_tokenizer_is_cached_reused_and_travels_in_checkpoints(tmp_path):
    write_wikitext(tmp_path / "data")
    dm = datamodule(tmp_path)
    cached = list((tmp_path / "cache" / "wikitext").glob("*.json"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    again = datamodule(tmp_path)
    assert cached[0].stat().st_mtime_ns == stamp and again.tokenizer.state() == dm.tokenizer.state()
    text = "the king of the north"
    restored = tokenizer_from_state(dm.tokenizer.state())
    assert restored.encode(text) == dm.tokenizer.encode(text)
    assert restored.decode(restored.encode(text)) == text


def test_truncated_file_is_named(tmp_path):
    folder = write_wikitext(tmp_path / "data")
    valid = folder / "wiki.valid.tokens"
    valid.write_bytes(valid.read_bytes()[:-7])  # cut inside the last line
    with pytest.raises(RuntimeError, match=r"wiki\.valid\.tokens .*truncated"):
        datamodule(tmp_path)


def test_missing_file_offline_names_url_and_folder(tmp_path, monkeypatch):
    folder = write_wikitext(tmp_path / "data")
    (folder / "wiki.test.tokens").unlink()

    def offline(url, filename):
        raise OSError("network is unreachable")

    monkeypatch.setattr("urllib.request.urlretrieve", offline)
    with pytest.raises(RuntimeError, match=r"wiki\.test\.tokens.*wikitext\.smerity\.com/wikitext-2-v1\.zip") as err:
        datamodule(tmp_path)
    assert str(folder) in str(err.value)


def test_unknown_variant_is_named(tmp_path):
    with pytest.raises(ValueError, match="wikitext-3"):
        WikiText(str(tmp_path), str(tmp_path), 4, name="wikitext-3")
