"""``model.init_from=DIR`` for every family with a converter: a tiny random Hugging Face model
written by ``save_pretrained`` (with a tokenizer beside it where the data needs one) becomes a
zoo net with the same logits, and the folder's tokenizer keeps every token."""

from __future__ import annotations

import gzip
import json

from hydra.errors import InstantiationException
import pytest
import torch
from omegaconf import OmegaConf, open_dict
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (CLIPVisionConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          LlavaConfig, LlavaForConditionalGeneration, T5Config, T5ForConditionalGeneration,
                          ViTConfig, ViTForImageClassification, WhisperConfig, WhisperForConditionalGeneration)

from bert_wikitext_files import WORDS as WIKITEXT_WORDS, write_wikitext
from conftest import run_train
from exactness import assert_matches, randomise
from test_transformer_multi30k import write_corpus
from test_video_convert import _compare as compare_video, tiny_video
from test_vit_data import make_image_folder
from test_whisper_data import write_fsdd
from zoo.objectives.loading import load
from zoo.data.pretrained import tokenizer_of
from zoo.convert.common import CONF_DIR, compose_config
from zoo.data.batches import PaddedTokens
from zoo.data.multi30k import SPECIALS as MULTI30K_SPECIALS, Multi30k
from zoo.data.fsdd import FSDD
from zoo.data.shapes_vqa import ShapesVQA, vocabulary as shapes_vocabulary
from zoo.data.tokenizers import WordTokenizer, tokenizer_from_state
from zoo.registry import ALLOWED_CONVERTERS
from zoo.train.run import build, objective, train

SHAKESPEARE = "the king is dead long live the king and all his men shall sing of the king "
T5_DATA_VOCAB = 48  # model=t5 adds 102 ids (sentinels, eos, start) to the data's vocabulary
VIT_DIMS = {"num_classes": 10, "image_size": 32, "channels": 3, "class_names": [str(i) for i in range(10)],
            "pixel_mean": [0.5] * 3, "pixel_std": [0.5] * 3}


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


# ---------------------------------------------------------------- model.init_from=DIR, per family

def objective_from(model: str, path, dims: dict, *overrides: str):
    """``model=<model> model.init_from=<path>`` built as train.py does, ``dims`` standing in for the data."""
    cfg = compose_config([f"model={model}", f"model.init_from={path}", *overrides])
    with open_dict(cfg):
        cfg.dims = dims
    try:
        return objective(cfg)
    except InstantiationException as err:  # the converter's own error, which Hydra's message quotes
        raise err.__cause__ from None


def tiny_gpt2(path, vocab: int = 50, **config) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=24, n_embd=16, n_layer=2, n_head=2, **config)).eval()
    randomise(hf)
    hf.save_pretrained(path)
    return hf


def tiny_llama(path, vocab: int = 50, **config) -> LlamaForCausalLM:
    torch.manual_seed(0)
    hf = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                      **config)).eval()
    randomise(hf)
    hf.save_pretrained(path)
    return hf


def tiny_vit(path, labels: int = 10) -> ViTForImageClassification:
    torch.manual_seed(0)
    hf = ViTForImageClassification(ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=24, num_labels=labels)).eval()
    randomise(hf)
    hf.save_pretrained(path)
    return hf


@pytest.mark.parametrize("fmt", ["safetensors", "bin", "sharded"])
@torch.no_grad()
def test_gpt2_folder_gives_the_hf_logits(tmp_path, fmt):
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=24, n_embd=16, n_layer=2, n_head=2)).eval()
    randomise(hf)
    hf.save_pretrained(tmp_path, safe_serialization=fmt != "bin", **({"max_shard_size": "10KB"} if fmt == "sharded" else {}))
    if fmt == "sharded":
        assert (tmp_path / "model.safetensors.index.json").is_file()
    model = objective_from("gpt", tmp_path, {"vocab_size": 50})
    assert model.hparams.net["context"] == 24 and model.hparams.net["block"]["d_model"] == 16
    ids = torch.randint(0, 50, (2, 24))
    assert_matches(model.net.eval()(ids), hf(ids).logits, what="GPT-2 logits")


@torch.no_grad()
def test_llama_folder_gives_the_hf_logits(tmp_path):
    hf = tiny_llama(tmp_path, rms_norm_eps=1e-5)
    model = objective_from("llama", tmp_path, {"vocab_size": 50})
    assert model.hparams.net["block"]["n_kv_heads"] == 2 and model.hparams.net["block"]["norm_eps"] == 1e-5
    ids = torch.randint(0, 50, (2, 32))
    assert_matches(model.net.eval()(ids), hf(ids).logits, what="Llama logits")


@torch.no_grad()
def test_vit_folder_gives_the_hf_logits(tmp_path):
    hf = tiny_vit(tmp_path)
    model = objective_from("vit", tmp_path, VIT_DIMS)
    assert model.hparams.net["block"]["norm_eps"] == 1e-12  # from config.json, not the preset's 1e-6
    images = torch.randn(2, 3, 32, 32)
    assert_matches(model.net.eval()(images), hf(images).logits, what="ViT logits")


def test_vit_folder_with_other_labels_keeps_all_but_the_classifier(tmp_path):
    hf = tiny_vit(tmp_path, labels=3)
    with pytest.warns(UserWarning, match="classifies 3 labels, the data 10"):
        model = objective_from("vit", tmp_path, VIT_DIMS)
    assert model.net.head.proj.out_features == 10
    assert torch.equal(model.net.embedder.cls, hf.vit.embeddings.cls_token)


def test_train_vit_two_steps_from_a_folder(tmp_path):
    make_image_folder(tmp_path / "data", {"train": 2, "test": 1})
    tiny_vit(tmp_path / "hf")
    cfg = compose_config([
        "model=vit", "data=cifar10", "trainer=cpu", "trainer.max_steps=2", "trainer.val_check_interval=2",
        "trainer.limit_val_batches=1", "+trainer.limit_test_batches=1", "callbacks.progress_bar.refresh_rate=0",
        "data.batch_size=8", "data.val_size=8", f"paths.data_dir={tmp_path / 'data'}",
        f"paths.cache_dir={tmp_path / 'cache'}", f"paths.output_dir={tmp_path / 'out'}",
        f"model.init_from={tmp_path / 'hf'}",
    ])
    metrics = train(cfg)
    assert metrics["train/loss"] == metrics["train/loss"] and 0 <= metrics["test/acc"] <= 1
    restored = load(tmp_path / "out" / "checkpoints" / "last.ckpt")  # rebuilt from the file alone
    assert restored.hparams.net["block"]["d_model"] == 16 and restored.hparams.converter == "zoo.convert.vit.pretrained"


@pytest.mark.parametrize("ff,tied", [("relu", True), ("gated-gelu", False)], ids=["v1.0", "v1.1"])
@torch.no_grad()
def test_t5_folder_gives_the_hf_logits(tmp_path, ff, tied):
    torch.manual_seed(0)
    hf = T5ForConditionalGeneration(T5Config(
        vocab_size=T5_DATA_VOCAB + 102, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=20, feed_forward_proj=ff,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)).eval()
    if not tied:  # a v1.1 head of its own (transformers 5 ties at construction whatever the config says)
        hf.config.tie_word_embeddings = False
        hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.lm_head.weight))
    randomise(hf)
    hf.save_pretrained(tmp_path)
    model = objective_from("t5", tmp_path, {"vocab_size": T5_DATA_VOCAB})
    assert model.hparams.net["tie_embeddings"] == tied and model.hparams.net["n_decoder_layers"] == 3
    source, target = torch.randint(2, T5_DATA_VOCAB, (2, 25)), torch.randint(2, T5_DATA_VOCAB, (2, 7))
    padding = torch.ones(2, 25, dtype=torch.bool)
    ref = hf(input_ids=source, attention_mask=padding.long(), decoder_input_ids=target).logits
    assert_matches(model.net.eval()(source, target, padding), ref, what=f"T5 {ff} logits")


def t5_real_tokenizer(words: list[str], n_sentinels: int = 100) -> Tokenizer:
    """A word-level tokenizer of a Hugging Face t5-small's layout: ``<pad>`` 0, ``</s>`` 1,
    ``<unk>`` 2, ``words``, then the sentinels, ``<extra_id_0>`` the top id; no ``<s>``."""
    sentinels = [f"<extra_id_{i}>" for i in reversed(range(n_sentinels))]
    specials = ["<pad>", "</s>", "<unk>"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate([*specials, *words, *sentinels])}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([*specials, *sentinels])
    return tok


def tiny_t5_real(path, tokenizer: Tokenizer, padded_vocab: int) -> T5ForConditionalGeneration:
    """A tiny T5 of t5-small's layout in ``path``: ``padded_vocab`` rows (above the tokenizer's
    size, as t5-small's 32,128 are above its 32,100), decoding from pad, the tokenizer beside it."""
    torch.manual_seed(0)
    hf = T5ForConditionalGeneration(T5Config(
        vocab_size=padded_vocab, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=20, decoder_start_token_id=0,
        pad_token_id=0, eos_token_id=1)).eval()
    randomise(hf)
    hf.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    return hf


@torch.no_grad()
def test_t5_folder_of_t5_small_layout_gives_the_hf_logits(tmp_path):
    """A folder whose tokenizer holds the sentinels: the net keeps the checkpoint's padded vocabulary."""
    tokenizer = t5_real_tokenizer([f"w{i}" for i in range(20)])
    hf = tiny_t5_real(tmp_path, tokenizer, padded_vocab=128)
    model = objective_from("t5", tmp_path, {"vocab_size": tokenizer.get_vocab_size()})
    assert tokenizer.get_vocab_size() == 123 and model.net.head.proj.out_features == 128
    source, target = torch.randint(0, 128, (2, 25)), torch.randint(0, 128, (2, 7))
    padding = torch.ones(2, 25, dtype=torch.bool)
    ref = hf(input_ids=source, attention_mask=padding.long(), decoder_input_ids=target).logits
    assert_matches(model.net.eval()(source, target, padding), ref, what="T5 logits, t5-small's vocabulary layout")


def test_t5_folder_of_t5_small_layout_with_a_larger_tokenizer_is_refused_naming_both(tmp_path):
    tiny_t5_real(tmp_path, t5_real_tokenizer([f"w{i}" for i in range(20)]), padded_vocab=128)
    with pytest.raises(ValueError, match=r"tokenizer has 130 tokens but .*vocab_size=128 \(at most that\)"):
        objective_from("t5", tmp_path, {"vocab_size": 130})


def test_t5_folder_of_t5_small_layout_must_start_decoding_from_pad(tmp_path):
    tiny_t5_real(tmp_path, t5_real_tokenizer([f"w{i}" for i in range(20)]), padded_vocab=128)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config | {"decoder_start_token_id": 5}))
    with pytest.raises(ValueError, match="decoder_start_token_id=5, but its tokenizer's pad token is id 0"):
        objective_from("t5", tmp_path, {"vocab_size": 123})


def test_t5_folder_of_t5_small_layout_corrupts_spans_with_its_own_sentinels(tmp_path):
    """Span corruption (data=wikitext's PaddedTokens) with such a folder writes the tokenizer's
    ``<extra_id_i>``, its ``</s>`` and the pad start, all inside the checkpoint's embedding."""
    tokenizer = t5_real_tokenizer([f"w{i}" for i in range(20)])
    tiny_t5_real(tmp_path, tokenizer, padded_vocab=128)
    model = objective_from("t5", tmp_path, {"vocab_size": tokenizer.get_vocab_size(), "pad_id": 0})
    tokens = torch.randint(3, 23, (4, 40))  # the words' ids
    batch = model.on_before_batch_transfer(PaddedTokens(tokens, torch.ones(4, 40, dtype=torch.bool)), 0)
    first = tokenizer.token_to_id("<extra_id_0>")
    assert first == 122 and batch.source.max() <= first and (batch.target_out[:, 0] == first).all()
    assert (batch.target_in[:, 0] == 0).all() and (batch.target_out[batch.target_out != -100] == 1).sum() == 4
    sentinels = batch.source[batch.source > 22]
    assert sentinels.min() >= first - 99  # <extra_id_i> counts down from the top
    model.loss(batch)[0].backward()  # every id has a row


def test_multi30k_folder_tokenizer_without_pad_or_end_is_refused_naming_the_ones_read(tmp_path):
    write_corpus(tmp_path / "data", sizes={"train": 4, "val": 2, "test_2016_flickr": 2})
    word_level_tokenizer(["<pad>", "<s>", "ein"]).save(str(tmp_path / "tokenizer.json"))
    dm = Multi30k(str(tmp_path / "data"), str(tmp_path / "cache"), batch_size=2, tokenizer_from=str(tmp_path))
    with pytest.raises(ValueError, match=r"has no end-of-sequence token: expected one of \['</s>', '\[SEP\]'\]"):
        dm.setup()


@torch.no_grad()
def test_whisper_folder_gives_the_hf_logits(tmp_path):
    torch.manual_seed(0)
    hf = WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=99, num_mel_bins=80, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=30,
        max_target_positions=40, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)).eval()
    randomise(hf)
    hf.save_pretrained(tmp_path)
    model = objective_from("whisper", tmp_path, {"vocab_size": 99, "eos_id": 2, "bos_id": 1, "pad_id": 0})
    assert model.hparams.net["encoder_embedder"]["max_len"] == 30 and model.hparams.net["context"] == 40
    features, target = torch.randn(2, 80, 60), torch.randint(3, 99, (2, 9))
    ref = hf(input_features=features, decoder_input_ids=target).logits
    assert_matches(model.net.eval()(features, target), ref, what="Whisper logits")


@torch.no_grad()
def test_llava_folder_gives_the_hf_logits(tmp_path):
    torch.manual_seed(0)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                              image_size=32, patch_size=8, hidden_act="quick_gelu")
    text = LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)
    hf = LlavaForConditionalGeneration(LlavaConfig(vision_config=vision, text_config=text, image_token_index=5)).eval()
    randomise(hf)
    hf.save_pretrained(tmp_path)
    dims = {"vocab_size": 64, "image_token_id": 5, "prompt": "{question}", "metric": "exact_match"}
    model = objective_from("llava", tmp_path, dims)
    assert model.hparams.net["embedder"]["vision"]["model"]["n_layers"] == 3
    ids = torch.randint(6, 64, (2, 24))
    ids[:, 2:18] = 5  # the 16 image tokens (32 px / patch 8), spliced in where <image> stands
    images = torch.randn(2, 3, 32, 32)
    ref = hf(input_ids=ids, pixel_values=images).logits
    assert_matches(model.net.eval()(ids, images=images), ref, what="LLaVA logits")
    with pytest.raises(ValueError, match="<image> token is id 3 but .*image_token_index=5"):
        objective_from("llava", tmp_path, dims | {"image_token_id": 3})


@pytest.mark.parametrize("family", ["vivit", "videomae"])
def test_video_folder_gives_the_hf_logits(tmp_path, family):
    hf = tiny_video(family)
    randomise(hf)
    hf.save_pretrained(tmp_path)
    dims = {"num_classes": 5, "num_frames": 4, "image_size": 16, "channels": 3, "class_names": list("abcde"),
            "pixel_mean": [0.5] * 3, "pixel_std": [0.5] * 3}
    model = objective_from(family, tmp_path, dims)
    compare_video(hf, model.net.eval(), torch.float32, f"{family} from model.init_from")
    with pytest.raises(ValueError, match="frames=8 but .*says 4"):
        objective_from(family, tmp_path, dims | {"num_frames": 8})


@pytest.mark.parametrize("model, write", [("gpt", tiny_gpt2), ("llama", tiny_llama)])
def test_train_lm_two_steps_from_a_folder_with_its_tokenizer(tmp_path, model, write):
    """data=tinyshakespeare tokenizes with the folder's tokenizer.json (a word-level one whose
    size is the weights' vocabulary), so the ids mean what the checkpoint learnt."""
    words = sorted(set(SHAKESPEARE.split()))
    (tmp_path / "data" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "data" / "tinyshakespeare" / "input.txt").write_text(SHAKESPEARE * 20)
    write(tmp_path / "hf", vocab=len(words) + 1)
    word_level_tokenizer(words).save(str(tmp_path / "hf" / "tokenizer.json"))
    cfg = compose_config([
        f"model={model}", "data=tinyshakespeare", "trainer=cpu", "trainer.max_steps=2", "trainer.val_check_interval=2",
        "trainer.limit_val_batches=1", "callbacks.progress_bar.refresh_rate=0", "data.batch_size=2", "data.block_size=16",
        "data.val_batches=1", "data.check=false", "++model.sample_tokens=0", "test=false",
        f"paths.data_dir={tmp_path / 'data'}", f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.output_dir={tmp_path / 'out'}", f"model.init_from={tmp_path / 'hf'}",
    ])
    metrics = train(cfg)
    assert metrics["train/loss"] == metrics["train/loss"]  # present and not NaN
    restored = load(tmp_path / "out" / "checkpoints" / "last.ckpt")  # rebuilt from the file alone
    assert restored.hparams.net["block"]["d_model"] == 16
    assert tokenizer_from_state(restored.hparams.tokenizer).encode("the king") == [words.index("the") + 1,
                                                                                  words.index("king") + 1]


def lm_on_wikitext(write, end_of_text: str):
    """A writer of a causal LM folder for data=wikitext with a tokenizer of its own kind: word-level
    over the generated articles, none of BERT's special tokens, ``end_of_text`` (GPT-2's
    ``<|endoftext|>``, Llama's ``</s>``) ending each article; the weights' vocabulary is its size.
    A writer returns the folder's token embeddings, the data overrides and the dims the data
    must take from the folder's tokenizer."""
    def folder(path) -> tuple[torch.Tensor, list[str], dict]:
        write_wikitext(path.parent / "data")
        tokenizer = word_level_tokenizer([*sorted({w.lower() for w in WIKITEXT_WORDS} - {"<unk>"}), end_of_text])
        hf = write(path, vocab=tokenizer.get_vocab_size())
        tokenizer.save(str(path / "tokenizer.json"))
        return (hf.get_input_embeddings().weight, ["data=wikitext", "data.seq_len=16", "data.batch_size=2"],
                {"vocab_size": tokenizer.get_vocab_size()})
    return folder


def t5_on_multi30k(path) -> tuple[torch.Tensor, list[str], dict]:
    """A T5 folder for data=multi30k: a word-level tokenizer over the generated corpus (with the
    pad / start / end tokens Multi30k's targets need), the weights 102 ids more (model=t5's)."""
    corpus = write_corpus(path.parent / "data", sizes={"train": 40, "val": 8, "test_2016_flickr": 8})
    words = sorted({w for f in (corpus / "multi30k" / "raw").glob("*.gz") for w in gzip.open(f, "rt").read().split()})
    tokenizer = word_level_tokenizer([*MULTI30K_SPECIALS[:3], *words])
    torch.manual_seed(0)
    hf = T5ForConditionalGeneration(T5Config(
        vocab_size=tokenizer.get_vocab_size() + 102, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=20, decoder_start_token_id=0)).eval()
    randomise(hf)
    hf.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    return (hf.get_input_embeddings().weight, ["data=multi30k", "data.batch_size=4", "model.net.context=32"],
            {"vocab_size": tokenizer.get_vocab_size()})


def t5_real_vocab_on_multi30k(path) -> tuple[torch.Tensor, list[str], dict]:
    """A T5 folder of a Hugging Face t5-small's layout for data=multi30k: its tokenizer holds
    the sentinels and no ``<s>`` (:func:`t5_real_tokenizer`), the weights' rows are padded above
    it; the data pads and starts the decoder with ``<pad>`` and ends with ``</s>``."""
    corpus = write_corpus(path.parent / "data", sizes={"train": 40, "val": 8, "test_2016_flickr": 8})
    words = sorted({w for f in (corpus / "multi30k" / "raw").glob("*.gz") for w in gzip.open(f, "rt").read().split()})
    tokenizer = t5_real_tokenizer(words)
    hf = tiny_t5_real(path, tokenizer, padded_vocab=(tokenizer.get_vocab_size() // 64 + 1) * 64)
    return (hf.get_input_embeddings().weight, ["data=multi30k", "data.batch_size=4", "model.net.context=32"],
            {"vocab_size": tokenizer.get_vocab_size(), "pad_id": 0, "bos_id": 0, "eos_id": 1})


WHISPER_SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
DIGIT_WORDS = "zero one two three four five six seven eight nine".split()


def whisper_on_fsdd(path) -> tuple[torch.Tensor, list[str], dict]:
    """A Whisper folder for data=fsdd with a tokenizer of Whisper's kind beside it: words, not
    the data's characters, and Whisper's names for its specials (``<|endoftext|>`` ends and pads,
    ``<|startoftranscript|>`` starts); the weights' vocabulary is its size."""
    write_fsdd(path.parent / "data", takes=range(8))
    tokenizer = word_level_tokenizer([*WHISPER_SPECIALS, "hello", *DIGIT_WORDS])
    tokenizer.add_special_tokens(WHISPER_SPECIALS)
    end, start = tokenizer.token_to_id("<|endoftext|>"), tokenizer.token_to_id("<|startoftranscript|>")
    torch.manual_seed(0)
    hf = WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=tokenizer.get_vocab_size(), num_mel_bins=80, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=1500, max_target_positions=64, pad_token_id=end, bos_token_id=end,
        eos_token_id=end, decoder_start_token_id=start)).eval()
    randomise(hf)
    hf.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    overrides = ["data=fsdd", "data.batch_size=2", "data.val_takes=1", "data.test_passes=1",
                 "model.decoding.max_new_tokens=4"]
    return hf.get_input_embeddings().weight, overrides, {"vocab_size": tokenizer.get_vocab_size(), "bos_id": start,
                                                          "eos_id": end, "pad_id": end}


def llava_tokenizer() -> Tokenizer:
    """A word-level tokenizer of a LLaVA folder's kind for shapes_vqa: Llama's names (``</s>``
    ends, no pad token), an added ``<image>``, punctuation split off, ids unlike the data's own."""
    words = sorted(set(shapes_vocabulary().words) - {"<pad>", "<unk>", "<eos>", "<image>"}, reverse=True)
    tokenizer = word_level_tokenizer(["<s>", "</s>", *words, "<image>"])
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["<s>", "</s>", "<image>"])
    return tokenizer


def llava_on_shapes_vqa(path) -> tuple[torch.Tensor, list[str], dict]:
    """A LLaVA folder for data=shapes_vqa (generated) with its tokenizer beside it (:func:`llava_tokenizer`)."""
    tokenizer = llava_tokenizer()
    image = tokenizer.token_to_id("<image>")
    torch.manual_seed(0)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=32, patch_size=8, hidden_act="quick_gelu")
    text = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=48, intermediate_size=96,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96)
    hf = LlavaForConditionalGeneration(LlavaConfig(vision_config=vision, text_config=text,
                                                   image_token_index=image)).eval()
    randomise(hf)
    hf.save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    overrides = ["data=shapes_vqa", "data.batch_size=2", "data.val_size=2", "data.test_size=2"]
    return hf.get_input_embeddings().weight, overrides, {"vocab_size": tokenizer.get_vocab_size(),
                                                          "image_token_id": image}


def two_steps_from_the_folder(tmp_path, model: str, *overrides: str):
    """The config of ``model=<model> model.init_from=<tmp_path>/hf``: two CPU steps, data under ``tmp_path``."""
    return compose_config([
        f"model={model}", *overrides, "trainer=cpu", "trainer.max_steps=2", "trainer.val_check_interval=2",
        "trainer.limit_val_batches=1", "+trainer.limit_test_batches=1", "callbacks.progress_bar.refresh_rate=0",
        f"paths.data_dir={tmp_path / 'data'}", f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.output_dir={tmp_path / 'out'}", f"model.init_from={tmp_path / 'hf'}",
    ])


@pytest.mark.parametrize("model, write", [
    ("gpt", lm_on_wikitext(tiny_gpt2, "<|endoftext|>")), ("llama", lm_on_wikitext(tiny_llama, "</s>")),
    ("t5", t5_on_multi30k), ("t5", t5_real_vocab_on_multi30k), ("whisper", whisper_on_fsdd),
    ("llava", llava_on_shapes_vqa),
], ids=["gpt-wikitext", "llama-wikitext", "t5-multi30k", "t5-real-vocab", "whisper-fsdd", "llava-shapes_vqa"])
def test_train_two_steps_from_a_folder_on_its_data(tmp_path, model, write):
    """Issue 17's command-line pairs: ``model=M data=D model.init_from=DIR`` builds the net from the
    folder (its token embeddings are the folder's), the data tokenizes with the folder's tokenizer
    (its vocabulary and special ids, not the data's own), and it trains."""
    embeddings, overrides, dims = write(tmp_path / "hf")
    cfg = two_steps_from_the_folder(tmp_path, model, *overrides)
    datamodule, objective_ = build(cfg)
    assert any(torch.equal(p, embeddings) for p in objective_.net.parameters())  # the folder's, not a fresh init
    folder_tokenizer = tokenizer_of(tmp_path / "hf").tokenizer
    assert datamodule.tokenizer.tokenizer.to_str() == folder_tokenizer.to_str()
    assert {k: datamodule.dims[k] for k in dims} == dims
    metrics = train(cfg)
    assert metrics["train/loss"] == metrics["train/loss"]  # present and not NaN
    restored = tokenizer_from_state(load(tmp_path / "out" / "checkpoints" / "last.ckpt").hparams.tokenizer)
    assert restored.tokenizer.to_str() == folder_tokenizer.to_str()  # the checkpoint decodes with it


def test_speech_data_reads_transcripts_with_the_folder_tokenizer(tmp_path):
    """Each batch's targets are the folder tokenizer's word ids, ended by ``<|endoftext|>``;
    the decoder input starts with ``<|startoftranscript|>`` and the ids decode to the transcripts."""
    whisper_on_fsdd(tmp_path / "hf")
    dm = FSDD(str(tmp_path / "data"), str(tmp_path / "cache"), batch_size=4, train_batches=2, val_takes=1,
              test_passes=1, tokenizer_from=str(tmp_path / "hf"))
    dm.setup()
    batch = next(iter(dm.val_dataloader()))
    tokenizer = tokenizer_of(tmp_path / "hf")
    start, end = tokenizer.token_id("<|startoftranscript|>"), tokenizer.token_id("<|endoftext|>")
    assert (batch.target_in[:, 0] == start).all()
    for row, text in zip(batch.target_out, batch.references):
        ids = row[row != -100].tolist()
        assert ids[-1] == end and tokenizer.decode(ids[:-1]) == text
        assert ids[:-1] == [tokenizer.token_id(w) for w in text.split()]


def test_speech_tokenizer_without_a_start_token_is_refused_naming_the_ones_read(tmp_path):
    write_fsdd(tmp_path / "data", takes=range(8))
    word_level_tokenizer(["</s>", *DIGIT_WORDS]).save(str(tmp_path / "tokenizer.json"))
    dm = FSDD(str(tmp_path / "data"), str(tmp_path / "cache"), batch_size=4, train_batches=2, val_takes=1,
              tokenizer_from=str(tmp_path))
    with pytest.raises(ValueError, match=r"has no start-of-transcript token: expected one of \['<s>', "
                                         r"'<\|startoftranscript\|>'\]"):
        dm.setup()


def shapes_vqa(tokenizer_from) -> ShapesVQA:
    dm = ShapesVQA("unused", "unused", batch_size=4, image_size=32, train_size=4, val_size=4, test_size=4,
                   tokenizer_from=str(tokenizer_from))
    dm.setup()
    return dm


def test_image_text_data_reads_prompts_with_the_folder_tokenizer(tmp_path):
    """The prompt and answer are the folder tokenizer's ids (its ``<image>``, its ``</s>`` ending
    the answer; padding with ``</s>`` where it has no pad token), and they decode back."""
    llava_tokenizer().save(str(tmp_path / "tokenizer.json"))
    dm = shapes_vqa(tmp_path)
    tokenizer = tokenizer_of(tmp_path)
    image, end = tokenizer.token_id("<image>"), tokenizer.token_id("</s>")
    assert dm.dims["image_token_id"] == image and dm.tokenizer.pad_id == end
    item, example = dm.dataset("val")[0], dm.examples["val"][0]
    assert item["tokens"][0] == image
    assert item["tokens"].tolist() == tokenizer.encode(example.prompt) + tokenizer.encode(example.answers[0])
    assert item["targets"][-1] == end
    assert tokenizer.decode(item["targets"][item["targets"] != -100].tolist()) == example.answers[0]


def test_image_text_tokenizer_without_an_image_token_is_refused(tmp_path):
    word_level_tokenizer(["</s>", "what"]).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match=r"tokenizer of .* has no image token: expected one of \['<image>'\]"):
        shapes_vqa(tmp_path)


def test_image_text_checkpoint_vocabulary_missing_words_is_refused(tmp_path, monkeypatch):
    """A zoo checkpoint's word vocabulary that lacks the data's words (stage 1 on captions, then
    shapes): refused, naming the words, rather than reading them all as <unk>."""
    import zoo.data.base as base

    captions = WordTokenizer.from_texts(["a photo of a cat"])
    monkeypatch.setattr(base, "tokenizer_of", lambda path: captions)
    with pytest.raises(ValueError, match=r"lacks \d+ word\(s\) of ShapesVQA's vocabulary \(\[':', '\?', 'answer', "):
        shapes_vqa(tmp_path)


@pytest.mark.slow
def test_train_py_fine_tunes_gpt2_from_a_folder(tmp_path):
    """The command line a user types: Hydra takes model.init_from for model=gpt, and the end-of-run
    sample is decoded by the folder's tokenizer."""
    words = sorted(set(SHAKESPEARE.split()))
    (tmp_path / "data" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "data" / "tinyshakespeare" / "input.txt").write_text(SHAKESPEARE * 20)
    tiny_gpt2(tmp_path / "hf", vocab=len(words) + 1)
    word_level_tokenizer(words).save(str(tmp_path / "hf" / "tokenizer.json"))
    run_train(tmp_path / "run", tmp_path / "data", "model=gpt", f"model.init_from={tmp_path / 'hf'}", "data.check=false",
              "data.block_size=16", "data.batch_size=2", "data.val_batches=1", "trainer.max_steps=2",
              "trainer.val_check_interval=2", "test=false", "model.sample_prompt=the", "model.sample_tokens=5")
    sample = (tmp_path / "run" / "samples.txt").read_text().split()
    assert sample[0] == "the" and len(sample) == 6 and set(sample) <= set(words)


# ---------------------------------------------------------------- bad input

def test_folder_without_config_json_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json is missing"):
        objective_from("gpt", tmp_path, {"vocab_size": 50})


def test_other_architecture_is_named_with_the_ones_read(tmp_path):
    tiny_llama(tmp_path)
    with pytest.raises(ValueError, match=r"model_type='llama'.*LlamaForCausalLM.*reads \['gpt2'\]"):
        objective_from("gpt", tmp_path, {"vocab_size": 50})


def test_folder_without_weights_is_named(tmp_path):
    GPT2Config().save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        objective_from("gpt", tmp_path, {"vocab_size": 50})


def test_weight_shape_mismatch_names_the_parameter_and_both_shapes(tmp_path):
    tiny_gpt2(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config | {"n_positions": 20}))  # weights keep 24 positions
    with pytest.raises(ValueError, match=r"embedder.positions.weight: checkpoint has shape \(24, 16\) \(from \S+model.safetensors: "
                                         r"tensor 'transformer.wpe.weight'\), model has \(20, 16\)"):
        objective_from("gpt", tmp_path, {"vocab_size": 50})


def test_tokenizer_of_another_vocabulary_size_is_refused_naming_both(tmp_path):
    tiny_gpt2(tmp_path)
    with pytest.raises(ValueError, match="tokenizer has 40 tokens but .*vocab_size=50"):
        objective_from("gpt", tmp_path, {"vocab_size": 40})


@pytest.mark.parametrize("write, match", [
    (lambda p: tiny_gpt2(p, scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
    (lambda p: tiny_llama(p, attention_bias=True), "attention_bias"),
    (lambda p: tiny_llama(p, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}), "rope_type='dynamic'"),
])
def test_config_the_zoo_cannot_express_is_refused_by_name(tmp_path, write, match):
    write(tmp_path)
    model = "gpt" if (json.loads((tmp_path / "config.json").read_text())["model_type"] == "gpt2") else "llama"
    with pytest.raises(ValueError, match=match):
        objective_from(model, tmp_path, {"vocab_size": 50})


def test_lm_tokenizer_without_an_end_of_text_is_refused_on_wikitext_naming_the_ones_read(tmp_path):
    _, overrides, _ = lm_on_wikitext(tiny_gpt2, "<eot>")(tmp_path / "hf")  # no name WikiText knows as an end of text
    with pytest.raises(ValueError, match=r"tokenizer of .*hf has no end-of-text token: expected one of \['\[SEP\]', '<\|endoftext\|>'"):
        build(two_steps_from_the_folder(tmp_path, "gpt", *overrides))


def test_vit_folder_for_other_image_sizes_is_refused(tmp_path):
    tiny_vit(tmp_path)
    with pytest.raises(ValueError, match="image_size=64 but .*says 32"):
        objective_from("vit", tmp_path, VIT_DIMS | {"image_size": 64})


def test_every_config_converter_is_allowed():
    for file in CONF_DIR.glob("model/*.yaml"):
        converter = OmegaConf.load(file).get("converter")
        assert converter is None or converter in ALLOWED_CONVERTERS, file
