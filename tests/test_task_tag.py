"""task=tag: token classification over an encoder family. The CoNLL reader (IOB1 and IOB2 read alike,
tags on each word's first sub-token), the entity scores against seqeval's, each head exact against
Hugging Face's *ForTokenClassification (read from its folder), the export run in the token-classification
pipeline, the refusal of impossible pairs, and (slow) a short training run and its eval."""

from __future__ import annotations

import csv
import os
import random
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf, open_dict
from seqeval.metrics import f1_score, precision_score, recall_score
from transformers import BertForTokenClassification, DistilBertForTokenClassification, RobertaForTokenClassification

from conftest import run_train
from test_task_classify import (TINY_NET, VOCAB, classify_net_cfg, evaluate, pair_batch, tiny_bert,
                                tiny_checkpoint, tiny_distilbert, tiny_roberta)
from exactness import assert_matches, randomise
from zoo.cli.precheck import Refused, check
from zoo.config import compose_config
from zoo.convert import bert, distilbert, roberta
from zoo.data.batches import IGNORE

# IOB1 as CoNLL-2003's eng.train writes it (I- starts an entity; B- only after one of its type) and the
# same sentences in IOB2 as train.txt writes them; four columns, -DOCSTART- lines, blank-line breaks.
IOB1 = """-DOCSTART- -X- O O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC
call NN I-NP O

Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER
Mary NNP I-NP B-PER
Smith NNP I-NP I-PER
in IN I-PP O
Paris NNP I-NP I-LOC
"""
IOB2 = IOB1.replace("I-ORG", "B-ORG").replace("I-MISC", "B-MISC").replace(
    "Peter NNP I-NP I-PER", "Peter NNP I-NP B-PER").replace("I-LOC", "B-LOC")
SENTENCES = [(["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
             (["Peter", "Blackburn", "Mary", "Smith", "in", "Paris"],
              ["B-PER", "I-PER", "B-PER", "I-PER", "O", "B-LOC"])]


def test_iob1_and_iob2_files_read_alike_as_iob2(tmp_path):
    from zoo.data.conll import read_conll

    (tmp_path / "eng.train").write_text(IOB1)
    (tmp_path / "train.txt").write_text(IOB2 + "\n\n")  # trailing blank lines: no empty sentence
    assert read_conll(tmp_path / "eng.train", "data.source") == SENTENCES
    assert read_conll(tmp_path / "train.txt", "data.source") == SENTENCES


@pytest.mark.parametrize("text, refusal", [
    ("EU B-ORG\nrejects\n", r"line 2: 'rejects' has no tag"),
    ("EU S-ORG\n", r"tag 'S-ORG' is not IOB"),
    ("-DOCSTART- -X- O O\n\n", r"holds no tagged sentence"),
])
def test_a_file_that_is_not_conll_is_refused_in_one_line(tmp_path, text, refusal):
    from zoo.data.conll import read_conll

    (tmp_path / "x.txt").write_text(text)
    with pytest.raises(ValueError, match=refusal) as refused:
        read_conll(tmp_path / "x.txt", "data.source")
    assert "\n" not in str(refused.value)


def write_conll(path: Path, sentences: int, seed: int = 0) -> None:
    """IOB2 sentences in CoNLL-2003's four columns: names (PER, two words), places (LOC) and filler words."""
    rng = random.Random(seed)
    lines = ["-DOCSTART- -X- -X- O", ""]
    for _ in range(sentences):
        words = []
        for _ in range(rng.randint(2, 5)):
            kind = rng.choice(["per", "loc", "o", "o"])
            if kind == "per":
                words += [(rng.choice(["Anna", "Peter", "Maria"]), "B-PER"), (rng.choice(["Smithson", "Blackburn"]), "I-PER")]
            elif kind == "loc":
                words.append((rng.choice(["Paris", "Berlin", "Rome"]), "B-LOC"))
            else:
                words.append((rng.choice(["visited", "the", "quietly", "and", "met"]), "O"))
        lines += [f"{w} NNP B-NP {t}" for w, t in words] + [""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def tagged(tmp_path: Path, **kw):
    from zoo.data.conll import TaggedText

    data = TaggedText(str(tmp_path), str(tmp_path / "cache"), batch_size=2, block_size=kw.pop("block_size", 32),
                      vocab_size=kw.pop("vocab_size", 60), **kw)
    data.setup()
    return data


def test_each_words_tag_is_on_its_first_sub_token(tmp_path):
    """[CLS] sub-tokens [SEP]; a word's tag on its first sub-token, -100 on its others, the specials and
    the padding; the tag names sorted from the training file, handed on as dims."""
    (tmp_path / "train.txt").write_text(IOB2)
    data = tagged(tmp_path, source="train.txt", val="train.txt", test="train.txt", vocab_size=40)
    names = ["B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER", "O"]
    assert data.dims["class_names"] == names and data.dims["num_classes"] == 6
    batch = data.collate_fn()([data.dataset("train")[i] for i in range(2)])
    cls, sep = data.tokenizer.token_id("[CLS]"), data.tokenizer.token_id("[SEP]")
    for row, (words, tags) in enumerate(SENTENCES):
        ids, labels = batch.tokens[row][batch.padding[row]].tolist(), batch.labels[row].tolist()
        assert ids[0] == cls and ids[-1] == sep and labels[0] == IGNORE and labels[len(ids) - 1:] == \
            [IGNORE] * (len(labels) - len(ids) + 1)
        starts = [i for i, y in enumerate(labels) if y != IGNORE]
        assert [names[labels[i]] for i in starts] == tags
        # the sub-tokens from one tagged position to the next spell that word (a small vocabulary splits them)
        bounds = [*starts, len(ids) - 1]
        spelt = [data.tokenizer.decode(ids[a:b]).replace(" ", "").replace("##", "") for a, b in zip(bounds, bounds[1:])]
        assert spelt == words
    assert len(batch.tokens[0]) > 6, "the small vocabulary should split some word into several sub-tokens"


def test_a_byte_level_tokenizer_tags_the_word_not_the_space_before_it(tmp_path):
    """A RoBERTa-style byte-level BPE token (its span starts at the space before its word) is its word's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.train_from_iterator([IOB2] * 3, trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>"],
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    (tmp_path / "train.txt").write_text(IOB2)
    data = tagged(tmp_path, source="train.txt", val="train.txt", test="train.txt", tokenizer=str(tmp_path / "tok"))
    ids, labels = data.dataset("train")[1]
    starts = [i for i, y in enumerate(labels) if y != IGNORE]
    assert [tok.decode(ids[a:b]).strip() for a, b in zip(starts, [*starts[1:], len(ids) - 1])] == SENTENCES[1][0]


def test_held_out_splits_and_an_unknown_tag_is_refused(tmp_path):
    write_conll(tmp_path / "train.txt", 40)
    data = tagged(tmp_path, source="train.txt")
    assert [len(data.dataset(s)) for s in ("train", "val", "test")] == [32, 4, 4]
    (tmp_path / "dev.txt").write_text("Rome B-CITY\n")
    with pytest.raises(ValueError, match=r"val rows have labels \['B-CITY'\]"):
        tagged(tmp_path, source="train.txt", val="dev.txt")


def test_entity_scores_are_seqevals(tmp_path):
    """Precision, recall and F1 over random IOB2 sequences (ill-formed ones too: I- after O) equal
    seqeval's, summed over batches and with positions that are no word (-100) left out."""
    from zoo.objectives.tagging import EntityScores

    names = ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]
    rng = random.Random(0)
    metric, truths, guesses = EntityScores(names), [], []
    for _ in range(3):
        labels = torch.full((5, 12), IGNORE)
        predicted = torch.full((5, 12), IGNORE)
        for row in range(5):
            positions = sorted(rng.sample(range(1, 12), rng.randint(1, 10)))
            true = [rng.choice([0, 1, 3, 4, 4]) for _ in positions]
            guess = [t if rng.random() < 0.6 else rng.randrange(5) for t in true]
            labels[row, positions], predicted[row, positions] = torch.tensor(true), torch.tensor(guess)
            truths.append([names[t] for t in true])
            guesses.append([names[g] for g in guess])
        metric.update(predicted, labels)
    scores = metric.compute()
    assert scores["f1"].item() == pytest.approx(f1_score(truths, guesses), abs=1e-6)
    assert scores["precision"].item() == pytest.approx(precision_score(truths, guesses), abs=1e-6)
    assert scores["recall"].item() == pytest.approx(recall_score(truths, guesses), abs=1e-6)
    assert 0.2 < scores["f1"].item() < 0.9  # neither nothing nor everything right: the test can tell


# family -> (its tiny Hugging Face token classifier class, its converter, its padding id); the tiny
# config is task=classify's test reference's
FAMILIES = {"bert": (BertForTokenClassification, bert, 0), "roberta": (RobertaForTokenClassification, roberta, 1),
            "distilbert": (DistilBertForTokenClassification, distilbert, 0)}
TINY = {"bert": tiny_bert, "roberta": tiny_roberta, "distilbert": tiny_distilbert}


def tiny(family: str, num_labels: int) -> torch.nn.Module:
    """The family's tiny randomised *ForTokenClassification (task=classify's tests' configuration)."""
    return randomise(FAMILIES[family][0](TINY[family](num_labels).config).eval())


def padded_batch(pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids (3, 17) and padding: odd lengths 17, 11, 6 (task=classify's batch, without segment ids)."""
    ids, _, padding = pair_batch(pad_id)
    return ids, padding


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@torch.no_grad()
def test_init_from_a_token_classification_folder_is_exact(tmp_path, family, dtype):
    """model.init_from= a *ForTokenClassification folder reads its classifier too: the zoo's logits at
    every real position are Hugging Face's (randomised weights, padding, odd lengths)."""
    _, module, pad_id = FAMILIES[family]
    torch.manual_seed(0)
    hf = tiny(family, 5)
    hf.save_pretrained(tmp_path)
    _, net = module.pretrained(classify_net_cfg(family, 5, "tag"), str(tmp_path))
    hf, net = hf.to(dtype), net.eval().to(dtype)
    ids, padding = padded_batch(pad_id)
    ref = hf(input_ids=ids, attention_mask=padding.long()).logits
    assert_matches(net(ids, key_padding=padding), ref, padding[..., None], what=f"{family} token classifier logits")


def test_the_head_read_under_another_name_is_refused(tmp_path, monkeypatch):
    """The mapping is checked: a token classifier read under another name (RoBERTa's sequence head's)
    leaves the folder's classifier unread, which the import refuses, naming it."""
    torch.manual_seed(0)
    tiny("bert", 5).save_pretrained(tmp_path)
    monkeypatch.setattr(bert, "TAGGER", {"proj": ("classifier.out_proj",)})
    with pytest.raises(ValueError, match=r"does not use \(classifier.bias, classifier.weight\)"):
        bert.pretrained(classify_net_cfg("bert", 5, "tag"), str(tmp_path))


@torch.no_grad()
def test_init_from_reorders_the_token_classifier_to_the_datas_tags(tmp_path):
    """A folder whose id2label lists the data's tags in another order (O first, as published NER models
    do): its classifier's rows are put in the data's (sorted) order, so that output i is the data's tag i."""
    from zoo.train.run import objective

    torch.manual_seed(0)
    hf = tiny("bert", 3)
    hf.config.id2label, hf.config.label2id = {0: "O", 1: "B-PER", 2: "I-PER"}, {"O": 0, "B-PER": 1, "I-PER": 2}
    hf.save_pretrained(tmp_path)
    cfg = compose_config(["model=bert", "task=tag", f"model.init_from={tmp_path}"])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": VOCAB, "pad_id": 0, "num_classes": 3, "class_names": ["B-PER", "I-PER", "O"]}
    net = objective(cfg).net.eval()
    ids, padding = padded_batch(0)
    ref = hf(input_ids=ids, attention_mask=padding.long()).logits
    assert_matches(net(ids, key_padding=padding), ref[..., [1, 2, 0]], padding[..., None], what="reordered logits")


def test_task_tag_swaps_the_head_and_objective():
    """task=tag: a token classifier (no pooling, no pooler) and the Tagging objective; the family's mask,
    embedder and Block are the same as under task=pretrain."""
    pretrain, tag = (compose_config(["model=roberta", *task]).model for task in ([], ["task=tag"]))
    assert tag._target_ == "zoo.objectives.tagging.Tagging"
    assert tag.net.head._target_ == "zoo.nn.heads.ClassifierHead" and tag.net.head.pool == "tokens"
    assert "pooler" not in tag.net.head and not tag.net.tie_embeddings
    for part in ("mask", "embedder", "block"):
        assert OmegaConf.to_container(tag.net[part]) == OmegaConf.to_container(pretrain.net[part])
    assert "pooler" not in compose_config(["model=distilbert", "task=tag"]).model.net.head


@pytest.mark.parametrize("arguments, named", [
    (["model=gpt", "task=tag", "data=conll2003"], ["task=tag", "model=gpt", "NextTokenLM", "Tagging", "TokenTags"]),
    (["model=vit", "task=tag", "data=conll2003"], ["task=tag", "model=vit", "Classification", "ImageLabels", "TokenTags"]),
    (["model=bert", "task=tag", "data=sst2"], ["model=bert", "TokenTags", "data=sst2", "TextLabels"]),
    (["model=bert", "data=conll2003"], ["model=bert", "MaskedLM", "data=conll2003", "TokenTags"]),
])
def test_impossible_pairs_are_refused_in_one_line_naming_both_sides(arguments, named, tmp_path):
    with pytest.raises(Refused) as refused:
        check("train", "train", [*arguments, f"hydra.run.dir={tmp_path / 'run'}"])
    message = str(refused.value)
    assert "\n" not in message and all(name in message for name in named), message


TEXTS = ["Peter Blackburn visited Paris", "Maria met Anna Smithson in Rome", "the Berlin"]


@pytest.mark.parametrize("family, hf_class", [("bert", "BertForTokenClassification"),
                                              ("roberta", "RobertaForTokenClassification"),
                                              ("distilbert", "DistilBertForTokenClassification")])
@torch.no_grad()
def test_export_writes_the_token_classifier_that_the_pipeline_runs(tmp_path, family, hf_class):
    """zoo export of a task=tag checkpoint: the family's *ForTokenClassification with the data's id2label,
    whose token-classification pipeline gives the zoo's own tag and score at every sub-token."""
    from transformers import pipeline

    from zoo.convert.export import export
    from zoo.data.labelled import CLS, SEP, own_tokenizer

    tokenizer = own_tokenizer("wordpiece", TEXTS * 4, 60)
    names = ["B-LOC", "B-PER", "I-PER", "O"]
    built, ckpt = tiny_checkpoint(tmp_path / "run.ckpt", [f"model={family}", "task=tag", *TINY_NET], tokenizer,
                                  names)
    assert export(ckpt, tmp_path / "hf") == (hf_class, [])
    tagger = pipeline("token-classification", model=str(tmp_path / "hf"), device="cpu", ignore_labels=[])
    assert tagger.model.config.id2label == dict(enumerate(names))
    net, (cls, sep) = built.net.eval(), (tokenizer.token_id(CLS[0]), tokenizer.token_id(SEP[0]))
    for text, theirs in zip(TEXTS, tagger(TEXTS)):
        ids = [cls, *tokenizer.encode(text), sep]
        probs = net(torch.tensor([ids])).softmax(-1)[0]
        assert [t["index"] for t in theirs] == list(range(1, len(ids) - 1))
        assert [t["entity"] for t in theirs] == [names[int(probs[t["index"]].argmax())] for t in theirs]
        assert [t["score"] for t in theirs] == pytest.approx([float(probs[t["index"]].max()) for t in theirs], abs=1e-5)


@pytest.mark.slow
def test_roberta_tag_conll2003_trains_and_eval_reports_entity_f1(tmp_path):
    """python train.py model=roberta task=tag data=conll2003 on CoNLL-format files: the loss falls and the
    validation entity F1 rises well above zero; python -m zoo eval reports precision, recall and F1 on
    the test split."""
    folder = tmp_path / "data" / "downstream" / "conll2003"
    for split, n, seed in (("train", 400, 0), ("valid", 40, 1), ("test", 40, 2)):
        write_conll(folder / f"{split}.txt", n, seed)
    run = tmp_path / "run"
    run_train(run, tmp_path / "data", "model=roberta", "task=tag", "data=conll2003", "trainer.max_steps=60",
              "trainer.val_check_interval=20", "data.batch_size=16", "data.vocab_size=120", "model.net.n_layers=2",
              "model.net.block.d_model=64", "model.net.context=32", "optim.warmup_steps=5", "optim.lr=3e-3",
              "trainer.log_every_n_steps=1")
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    f1 = [float(r["val/f1"]) for r in rows if r.get("val/f1")]
    assert len(losses) >= 30 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 / 2, losses
    assert f1 and max(f1) > 0.8, f1  # the entities of these sentences are easily told
    metrics = evaluate(tmp_path, run / "checkpoints" / "last.ckpt", "data=conll2003")
    assert {"precision", "recall", "f1", "loss"} <= metrics.keys() and metrics["f1"] > 0.8, metrics


REAL = Path(os.environ.get("ZOO_DATA_DIR", "data")) / "downstream" / "conll2003"


@pytest.mark.slow
@pytest.mark.skipif(not (REAL / "eng.train").is_file(), reason="CoNLL-2003 is not staged under ZOO_DATA_DIR")
def test_conll2003_iob1_originals_read_as_the_iob2_files():
    """The real CoNLL-2003: eng.train (IOB1) read as IOB2 is train.txt, sentence for sentence; likewise
    eng.testb and test.txt."""
    from zoo.data.conll import read_conll

    for iob1, iob2 in (("eng.train", "train.txt"), ("eng.testb", "test.txt")):
        assert read_conll(REAL / iob1, "data.source") == read_conll(REAL / iob2, "data.source")
