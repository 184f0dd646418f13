"""task=classify: the config group that swaps an encoder's head and objective, the refusal of
impossible pairs, the head exact against Hugging Face's BertForSequenceClassification (read from its
folder), and a short training run on SST-2-format rows."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf, open_dict
from transformers import (BertConfig, BertForSequenceClassification, DistilBertConfig,
                          DistilBertForSequenceClassification, RobertaConfig, RobertaForSequenceClassification)

from conftest import assert_refused_in_one_line, run_train
from exactness import assert_matches, randomise
from zoo.config import compose_config
from zoo.convert import bert, distilbert, roberta

VOCAB = 97


def tiny_bert(num_labels: int) -> BertForSequenceClassification:
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=24, type_vocab_size=2,
                        attn_implementation="sdpa", num_labels=num_labels)
    return randomise(BertForSequenceClassification(config).eval())


def tiny_roberta(num_labels: int) -> RobertaForSequenceClassification:
    config = RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=48, max_position_embeddings=26, type_vocab_size=1, pad_token_id=1,
                           attn_implementation="sdpa", num_labels=num_labels)
    return randomise(RobertaForSequenceClassification(config).eval())


def tiny_distilbert(num_labels: int) -> DistilBertForSequenceClassification:
    config = DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                              max_position_embeddings=24, attn_implementation="sdpa", num_labels=num_labels)
    return randomise(DistilBertForSequenceClassification(config).eval())


# family -> (its tiny randomised Hugging Face classifier, its converter, its padding id, reads segment ids)
FAMILIES = {"bert": (tiny_bert, bert, 0, True), "roberta": (tiny_roberta, roberta, 1, False),
            "distilbert": (tiny_distilbert, distilbert, 0, False)}


def classify_net_cfg(model: str, num_classes: int, task: str = "classify") -> dict:
    """model=<model> task=<task>'s net config, resolved with the data's facts filled in."""
    cfg = compose_config([f"model={model}", f"task={task}"])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": VOCAB, "pad_id": 0, "num_classes": num_classes,
                    "class_names": [str(i) for i in range(num_classes)]}
    return OmegaConf.to_container(cfg.model.net, resolve=True)


def pair_batch(pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ids (3, 17), segment ids (pairs: the second text's tokens 1) and padding: odd lengths 17, 11, 6."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, VOCAB, (3, 17), generator=g)
    lengths = torch.tensor([17, 11, 6])
    padding = torch.arange(17)[None] < lengths[:, None]
    segments = ((torch.arange(17)[None] >= (lengths[:, None] // 2)) & padding).long()
    return ids.masked_fill(~padding, pad_id), segments, padding


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("num_labels", [3, 1])  # 1: a regression's one output (STS-B)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@torch.no_grad()
def test_init_from_a_sequence_classification_folder_is_exact(tmp_path, family, num_labels, dtype):
    """model.init_from= a *ForSequenceClassification folder reads its head too (BERT's pooler and
    classifier, RoBERTa's classification head, DistilBERT's pre-classifier): the zoo's logits are
    Hugging Face's (randomised weights, padding, odd lengths; sentence pairs where the family has segments)."""
    build, module, pad_id, reads_segments = FAMILIES[family]
    torch.manual_seed(0)
    hf = build(num_labels)
    hf.save_pretrained(tmp_path)
    _, net = module.pretrained(classify_net_cfg(family, num_labels), str(tmp_path))
    hf, net = hf.to(dtype), net.eval().to(dtype)
    ids, segments, padding = pair_batch(pad_id)
    segments = segments if reads_segments else None
    types = {"token_type_ids": segments} if reads_segments else {}
    ref = hf(input_ids=ids, attention_mask=padding.long(), **types).logits
    assert_matches(net(ids, key_padding=padding, segments=segments), ref, what=f"{family} classifier logits")


@torch.no_grad()
def test_a_swapped_line_of_the_classifier_mapping_fails_exactness(tmp_path, monkeypatch):
    """The exactness test sees the mapping: the pooler read from another (same-shaped) module fails it."""
    torch.manual_seed(0)
    hf = tiny_bert(3)
    hf.save_pretrained(tmp_path)
    monkeypatch.setattr(bert, "BERT_CLASSIFIER", {"dense": ("bert.encoder.layer.1.attention.output.dense",),
                                                  "proj": ("classifier",)})
    _, net = bert.pretrained(classify_net_cfg("bert", 3), str(tmp_path))
    ids, segments, padding = pair_batch()
    ref = hf(input_ids=ids, token_type_ids=segments, attention_mask=padding.long()).logits
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches(net.eval()(ids, key_padding=padding, segments=segments), ref)


def test_task_swaps_the_head_and_objective_and_defaults_to_pretraining():
    """task=classify swaps head and objective; the family's mask, embedder and Block are the same."""
    pretrain, classify = (compose_config(["model=bert", *task]).model for task in ([], ["task=classify"]))
    assert pretrain._target_ == "zoo.objectives.mlm.MaskedLM" and pretrain.net.head._target_ == "zoo.nn.heads.MLMHead"
    assert classify._target_ == "zoo.objectives.classification.Classification"
    assert classify.net.head._target_ == "zoo.nn.heads.ClassifierHead" and classify.net.head.pooler == "tanh"
    assert "mask_id" not in classify and not classify.net.tie_embeddings
    for part in ("mask", "embedder", "block", "n_layers", "context"):
        assert OmegaConf.to_container(classify.net[part]) == OmegaConf.to_container(pretrain.net[part]) \
            if OmegaConf.is_config(pretrain.net[part]) else classify.net[part] == pretrain.net[part]
    assert compose_config(["model=distilbert", "task=classify"]).model.net.head.pooler == "relu"
    assert compose_config(["model=roberta", "task=classify"]).model.net.head.pooler == "tanh"
    assert compose_config(["model=roberta"]).model.net.head.activation == "gelu"  # its MLM head's, as before


@pytest.mark.parametrize("arguments, named", [
    (["model=vit", "task=classify", "data=sst2"], ["model=vit", "ImageLabels", "data=sst2", "TextLabels"]),
    (["model=t5", "task=classify", "data=sst2"], ["task=classify", "model=t5", "Seq2Seq", "Classification"]),
    (["model=bert", "task=classify", "data=wikitext"], ["model=bert", "TextLabels", "data=wikitext"]),
    (["model=bert", "data=sst2"], ["model=bert", "MaskedLM", "data=sst2", "TextLabels"]),
])
def test_impossible_pairs_are_refused_in_one_line_naming_both_sides(arguments, named, tmp_path):
    assert_refused_in_one_line(arguments, named, tmp_path / "run")


def write_sst2(folder: Path, rows: int = 96) -> None:
    """SST-2's layout (``sentence<TAB>label`` with a header), two easily told classes; quotes inside."""
    folder.mkdir(parents=True)
    for split, n in (("train", rows), ("dev", rows // 4)):
        with open(folder / f"{split}.tsv", "w", newline="") as f:
            f.write("sentence\tlabel\n")
            for i in range(n):
                good = i % 2 == 0
                words = "fine warm lovely" if good else 'dull " cold awful'  # a lone quote: GLUE's TSVs have them
                text = f"a {words} film number {i}"
                f.write(f"{text}\t{int(good)}\n")


@pytest.mark.slow
def test_bert_classify_sst2_trains(tmp_path):
    """python train.py model=bert task=classify data=sst2 quick=true trainer.max_steps=20 on SST-2-format
    rows: the loss falls, and the validation accuracy (above chance at least once) and F1 are logged;
    python -m zoo eval then reports accuracy and F1 on the test split."""
    write_sst2(tmp_path / "data" / "downstream" / "sst2")
    run = tmp_path / "run"
    run_train(run, tmp_path / "data", "model=bert", "task=classify", "data=sst2", "quick=true", "trainer.max_steps=20",
              "data.batch_size=8", "data.vocab_size=200", "trainer.log_every_n_steps=1")
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    accuracy = [float(r["val/acc"]) for r in rows if r.get("val/acc")]
    assert len(losses) >= 10 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
    assert accuracy and any(r.get("val/f1") for r in rows)
    assert max(accuracy) > 0.75, accuracy  # above chance (0.5) on the held-out rows
    # python -m zoo eval reports the task's metrics on the test split (here SST-2's dev rows)
    metrics = evaluate(tmp_path, run / "checkpoints" / "last.ckpt", "data=sst2")
    assert {"acc", "f1", "loss"} <= metrics.keys() and 0 <= metrics["acc"] <= 1


def evaluate(tmp_path: Path, ckpt: Path, data: str) -> dict:
    """python -m zoo eval ckpt=CKPT DATA out=tmp_path/eval.json, its data under tmp_path/data: the metrics
    it writes (run from tmp_path: a test stage may leave a plot, confusion.png, in the working directory)."""
    root = str(Path(__file__).parents[1])
    env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path / "data"), ZOO_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-m", "zoo", "eval", f"ckpt={ckpt}", data, f"out={tmp_path / 'eval.json'}"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads((tmp_path / "eval.json").read_text())


TINY_NET = ["model.net.n_layers=2", "model.net.block.d_model=32", "model.net.block.n_heads=4", "model.net.context=32"]


def tiny_checkpoint(ckpt: Path, overrides: list[str], tokenizer, names: list[str], **dims):
    """(the objective of ``overrides`` over ``tokenizer`` and the class ``names`` (and ``dims``), its
    weights randomised; ``ckpt``, where it is saved as a training run saves it)."""
    from zoo.registry import name_of
    from zoo.train.run import objective

    cfg = compose_config(overrides)
    with open_dict(cfg):
        cfg.dims = {"vocab_size": tokenizer.vocab_size, "pad_id": 0, "num_classes": len(names),
                    "class_names": names} | dims
    torch.manual_seed(0)
    built = objective(cfg, tokenizer.state())
    randomise(built.net, seed=2)
    torch.save({"zoo_objective": name_of(type(built)), "hyper_parameters": dict(built.hparams),
                "state_dict": built.state_dict()}, ckpt)
    return built, ckpt


SENTENCES = ["a fine warm film", "dull cold awful film", "warm and lovely, a film", "awful"]


def export_classifier(tmp_path: Path, overrides: list[str], names: list[str], **dims):
    """A task=classify objective of ``overrides``, its weights randomised, its tokenizer a WordPiece
    trained on SENTENCES, saved as a checkpoint and exported to ``tmp_path / "hf"``: (the objective,
    the tokenizer, what export returns)."""
    from zoo.convert.export import export
    from zoo.data.labelled import CLS, MASK, PAD, SEP, UNK
    from zoo.data.tokenizers import HFTokenizer

    tokenizer = HFTokenizer.train_wordpiece(SENTENCES * 4, 60, [PAD[0], UNK[0], CLS[0], SEP[0], MASK[0]], False)
    built, ckpt = tiny_checkpoint(tmp_path / "run.ckpt", ["task=classify", *overrides], tokenizer, names, **dims)
    return built, tokenizer, export(ckpt, tmp_path / "hf")


def encoded(tokenizer, sentence: str) -> tuple[list[int], list[int]]:
    """``[CLS] sentence [SEP]`` as the data encodes it (cut to 32 ids), and its segment ids."""
    from zoo.data.labelled import CLS, SEP, encode_pair

    return encode_pair(tokenizer.encode(sentence), None, tokenizer.token_id(CLS[0]), tokenizer.token_id(SEP[0]), 32)


@pytest.mark.parametrize("family, hf_class", [("bert", "BertForSequenceClassification"),
                                              ("roberta", "RobertaForSequenceClassification"),
                                              ("distilbert", "DistilBertForSequenceClassification")])
@torch.no_grad()
def test_export_writes_the_sequence_classifier_that_the_pipeline_runs(tmp_path, family, hf_class):
    """zoo export of a task=classify checkpoint: the family's *ForSequenceClassification with the data's
    id2label, whose text-classification pipeline gives the zoo's own predictions (label and score)."""
    from transformers import pipeline

    names = ["negative", "neutral", "positive"]
    built, tokenizer, exported = export_classifier(tmp_path, [f"model={family}", *TINY_NET], names)
    assert exported == (hf_class, [])
    classifier = pipeline("text-classification", model=str(tmp_path / "hf"), device="cpu")
    assert classifier.model.config.id2label == dict(enumerate(names))
    net = built.net.eval()
    for sentence, theirs in zip(SENTENCES, classifier(SENTENCES)):
        ids, segments = encoded(tokenizer, sentence)
        segments = torch.tensor([segments]) if FAMILIES[family][3] else None
        probs = net(torch.tensor([ids]), segments=segments).softmax(-1)[0]
        assert theirs["label"] == names[int(probs.argmax())]
        assert theirs["score"] == pytest.approx(float(probs.max()), abs=1e-5)


def labelled(tmp_path: Path, **kw):
    from zoo.data.labelled import LabelledText

    data = LabelledText(str(tmp_path), str(tmp_path / "cache"), batch_size=2, block_size=16, vocab_size=80, **kw)
    data.setup()
    return data


def test_sentence_pairs_with_named_labels_read_as_glue_writes_them(tmp_path):
    """RTE's layout: a pair per row, string labels (their names sorted: the head's order), a lone quote
    inside a field (data.quoting=none); [CLS] a [SEP] b [SEP] with segment ids 0 then 1."""
    rows = [("0", 'He said "no.', "He refused.", "entailment"), ("1", "A cat sat.", "A dog ran.", "not_entailment"),
            ("2", "It rained.", "It was wet.", "entailment")]
    for split in ("train", "dev"):
        (tmp_path / f"{split}.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" +
                                               "".join("\t".join(r) + "\n" for r in rows))
    data = labelled(tmp_path, source="train.tsv", val="dev.tsv", test="dev.tsv", column="sentence1",
                    text_pair="sentence2", label="label", quoting="none")
    assert data.dims["class_names"] == ["entailment", "not_entailment"] and data.dims["num_classes"] == 2
    batch = data.collate_fn()([data.dataset("train")[i] for i in range(3)])
    cls, sep = data.tokenizer.token_id("[CLS]"), data.tokenizer.token_id("[SEP]")
    assert batch.labels.tolist() == [0, 1, 0]
    assert (batch.tokens[:, 0] == cls).all()
    first = batch.tokens[0][batch.padding[0]].tolist()
    assert data.tokenizer.decode(first[1:first.index(sep)]).replace(" ", "") == 'Hesaid"no.'
    assert batch.segments[0][batch.padding[0]].tolist() == [0] * (first.index(sep) + 1) + \
        [1] * (len(first) - first.index(sep) - 1)
    (tmp_path / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tcontradiction\n")
    with pytest.raises(ValueError, match=r"val rows have labels \['contradiction'\]"):
        labelled(tmp_path, source="train.tsv", val="dev.tsv", test="dev.tsv", column="sentence1",
                 text_pair="sentence2", label="label", quoting="none")


def test_a_regression_reads_float_scores_and_has_one_output(tmp_path):
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"a": f"text {i}", "b": f"other {i}", "score": i / 4})
                                                 + "\n" for i in range(12)))
    data = labelled(tmp_path, source="rows.jsonl", column="a", text_pair="b", label="score", regression=True)
    assert data.dims["num_classes"] == 1 and data.dims["class_names"] is None
    labels = torch.cat([data.dataset(s).labels for s in ("train", "val", "test")])
    assert labels.dtype == torch.float32 and sorted(labels.tolist()) == [i / 4 for i in range(12)]


def test_a_roberta_tokenizer_joins_a_pair_as_roberta_does(tmp_path):
    """A tokenizer whose classifier token is <s> (RoBERTa's, from data.tokenizer= or init_from) joins a
    pair as <s> a </s></s> b </s>, as RobertaTokenizer does."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<s>", "<pad>", "</s>", "<unk>", "a", "b", "c"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"x": "a b", "y": "c", "label": i % 2}) + "\n"
                                                 for i in range(6)))
    data = labelled(tmp_path, source="rows.jsonl", val="rows.jsonl", test="rows.jsonl", column="x", text_pair="y",
                    tokenizer=str(tmp_path / "tok"))
    ids, segments, _ = data.dataset("train")[0]
    assert [words[i] for i in ids] == ["<s>", "a", "b", "</s>", "</s>", "c", "</s>"]


@torch.no_grad()
def test_init_from_reorders_the_classifier_to_the_datas_label_names(tmp_path):
    """A folder whose id2label lists the data's names in another order: its classifier's rows are put
    in the data's order, so that output i is the data's class i."""
    from zoo.train.run import objective

    torch.manual_seed(0)
    hf = tiny_bert(3)
    hf.config.id2label, hf.config.label2id = {0: "pos", 1: "neg", 2: "mixed"}, {"pos": 0, "neg": 1, "mixed": 2}
    hf.save_pretrained(tmp_path)
    cfg = compose_config(["model=bert", "task=classify", f"model.init_from={tmp_path}"])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": VOCAB, "pad_id": 0, "num_classes": 3, "class_names": ["mixed", "neg", "pos"]}
    net = objective(cfg).net.eval()
    ids, segments, padding = pair_batch()
    ref = hf(input_ids=ids, token_type_ids=segments, attention_mask=padding.long()).logits
    assert_matches(net(ids, key_padding=padding, segments=segments), ref[:, [2, 1, 0]], what="reordered logits")


def test_a_decoder_family_s_lm_settings_are_left_out_of_a_classifier_unless_the_user_set_them():
    """model=gpt's config sets its next-token LM's end-of-training sample (sample_prompt, sample_tokens):
    task=classify's objective does not take them (it failed with a TypeError); at the LM's defaults they
    are the family's and left out; a value of the user's is refused, naming the key."""
    from zoo.train.run import objective

    for overrides, built in (([], "Classification"), (["model.sample_tokens=0"], None)):
        cfg = compose_config(["model=gpt", "task=classify", *TINY_NET, *overrides])
        with open_dict(cfg):
            cfg.dims = {"vocab_size": 50, "pad_id": 0, "num_classes": 2, "class_names": ["a", "b"]}
        if built:
            assert type(objective(cfg)).__name__ == built
        else:
            with pytest.raises(ValueError, match=r"model.sample_tokens=0 is a setting of the next-token LM, which "
                                                 r"Classification \(this task's objective\) does not take: drop it"):
                objective(cfg)
