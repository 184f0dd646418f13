"""`train.py model=bert data=wikitext` end to end (a few steps on generated files), fine-tuning
from a Hugging Face checkpoint directory (model.init_from), and mismatched model/data pairs."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from bert_wikitext_files import WORDS, write_wikitext
from exactness import assert_matches, randomise
from zoo.objectives.loading import load
from zoo.convert.common import compose_config
from zoo.data.tokenizers import tokenizer_from_state
from zoo.train.run import build, train

TINY = ["model.net.n_layers=2", "model.net.block.d_model=32", "model.net.block.n_heads=2", "model.net.context=32"]


def config(tmp_path, *overrides: str):
    return compose_config([
        "model=bert", "data=wikitext", f"paths.data_dir={tmp_path / 'data'}",
        f"paths.cache_dir={tmp_path / 'cache'}", f"paths.output_dir={tmp_path / 'out'}",
        "data.batch_size=4", "data.seq_len=32", "data.vocab_size=120", "trainer.accelerator=cpu",
        "trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.limit_val_batches=2",
        "optim.warmup_steps=1", *overrides,
    ])


def test_train_bert_on_wikitext(tmp_path):
    write_wikitext(tmp_path / "data")
    metrics = train(config(tmp_path, *TINY))
    for key in ("train/loss", "val/loss", "val/acc", "val/ppl", "test/loss", "test/acc", "test/ppl"):
        assert key in metrics and metrics[key] == metrics[key], key  # present and not NaN
    assert 0 <= metrics["test/acc"] <= 1 and metrics["test/ppl"] > 1
    restored = load(tmp_path / "out" / "checkpoints" / "last.ckpt")  # rebuilt from the file alone
    assert type(restored).__name__ == "MaskedLM" and restored.hparams.mask_id == 4
    assert tokenizer_from_state(restored.hparams.tokenizer).vocab_size == restored.net.embedder.tokens.num_embeddings


def write_hf_checkpoint(path) -> BertForMaskedLM:
    """A tiny random BertForMaskedLM with a WordPiece vocab.txt covering the generated text."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted({w.lower() for w in WORDS} - {"<unk>"}),
             *"abcdefghijklmnopqrstuvwxyz0123456789=@-,.", *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789")]
    vocab = list(dict.fromkeys(vocab))
    torch.manual_seed(0)
    hf = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=40, max_position_embeddings=40)).eval()
    randomise(hf)  # norms and biases away from 1 and 0: the folder's every tensor must land in its place
    hf.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return hf


def test_fine_tune_from_hf_checkpoint_dir(tmp_path):
    write_wikitext(tmp_path / "data")
    hf = write_hf_checkpoint(tmp_path / "hf")
    cfg = config(tmp_path, f"model.init_from={tmp_path / 'hf'}")
    datamodule, model = build(cfg)
    assert datamodule.dims["vocab_size"] == hf.config.vocab_size  # the data uses the checkpoint's tokenizer
    assert model.hparams.net["n_layers"] == 1 and model.hparams.net["block"]["d_model"] == 24
    batch = next(iter(datamodule.val_dataloader()))
    with torch.no_grad():
        ref = hf(input_ids=batch.tokens, attention_mask=batch.padding.long()).logits
        out = model.eval().net(batch.tokens, key_padding=batch.padding)
    assert_matches(out, ref, batch.padding[:, :, None], what="MLM logits")
    metrics = train(cfg)
    assert metrics["test/loss"] == metrics["test/loss"]
    ckpt = torch.load(tmp_path / "out" / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["hyper_parameters"]["net"]["block"]["d_model"] == 24  # reloads in the checkpoint's shape


def test_bert_on_audio_data_fails_at_start_up_naming_both_sides(tmp_path):
    cfg = compose_config(["model=bert", "data=fsdd", f"paths.data_dir={tmp_path / 'data'}",
                          f"paths.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(ValueError, match=r"^model=\? \(MaskedLM\) reads PaddedTokens batches, but data=\? \(FSDD\) "
                                         r"yields AudioText or WaveText: pick a matching pair"):
        build(cfg)


def test_bert_lacking_what_the_data_must_tell_it_fails_naming_both_sides(tmp_path):
    """The data's facts the model config reads (${dims.*}) must all be there: a character corpus
    serving a language model has no [MASK] (with model=bert it serves PaddedTokens, which have one)."""
    (tmp_path / "data" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "data" / "tinyshakespeare" / "input.txt").write_text("First Citizen:\nBefore we proceed.\n" * 50)
    cfg = compose_config(["model=bert", "data=tinyshakespeare", "data.check=false", "model._target_=zoo.objectives.lm.NextTokenLM",
                          f"paths.data_dir={tmp_path / 'data'}", f"paths.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(ValueError, match=r"needs \['mask_id', 'special_ids'\].*provides only \['vocab_size'\]"):
        build(cfg)
