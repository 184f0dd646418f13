"""``model.init_from=DIR`` for every family with a converter: a tiny random Hugging Face model
written by ``save_pretrained`` (with a tokenizer beside it where the data needs one) becomes a
zoo net with the same logits, and the folder's tokenizer keeps every token."""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers

from zoo.checkpoint import tokenizer_of


def word_level_tokenizer(words: list[str]) -> Tokenizer:
    """A whitespace word-level tokenizer over ``words`` (``<unk>`` first, so id 0)."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["<unk>", *words])}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def test_folder_tokenizer_keeps_no_truncation_or_padding(tmp_path):
    tok = word_level_tokenizer(["<pad>", *(f"w{i}" for i in range(300))])
    tok.enable_truncation(max_length=128)
    tok.enable_padding(length=128, pad_id=1, pad_token="<pad>")
    tok.save(str(tmp_path / "tokenizer.json"))
    text = " ".join(f"w{i}" for i in range(300))
    assert len(tok.encode(text).ids) == 128  # the file alone truncates ...
    loaded = tokenizer_of(tmp_path)
    assert loaded.encode(text) == [i + 2 for i in range(300)]  # ... the folder's tokenizer keeps every token
    assert loaded.encode("w0") == [2]  # and pads nothing
    assert loaded.encode_batch(["w0", text]) == [[2], [i + 2 for i in range(300)]]
