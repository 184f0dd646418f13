"""task=qa: SQuAD's exact match and F1 on hand-worked cases of the official script's definitions,
run_qa.py's span decoding, the SQuAD-format reader's windows and labels, the span head exact against
Hugging Face's *ForQuestionAnswering (read from its folder; the loss too), the export that
transformers loads and decodes to the zoo's answers, the refusal of impossible pairs, and (slow) a
short training run with zoo eval reporting EM and F1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf, open_dict
from transformers import (BertConfig, BertForQuestionAnswering, DistilBertConfig, DistilBertForQuestionAnswering,
                          RobertaConfig, RobertaForQuestionAnswering)

from conftest import assert_refused_in_one_line, run_train
from exactness import assert_matches, randomise
from test_task_classify import VOCAB, pair_batch
from zoo.config import compose_config
from zoo.convert import bert, distilbert, roberta
from zoo.data.squad import SquadData, answer_tokens
from zoo.objectives.squad_metric import best_spans, exact_match, f1, normalize_answer, squad_scores



# --- the metric: the official SQuAD v1.1 script's definitions, worked by hand -------------------------------------
@pytest.mark.parametrize("text, normal", [
    ("The Eiffel Tower!", "eiffel tower"),           # lower case, punctuation and the article gone
    ("  an   apple,  a pear ", "apple pear"),         # articles as words, whitespace collapsed
    ("theater banana", "theater banana"),            # an article inside a word stays
    ("A.D. 1066", "ad 1066"),                        # punctuation inside a word goes
    ("the", ""),
])
def test_normalize_answer_is_the_scripts(text, normal):
    assert normalize_answer(text) == normal


def test_exact_match_and_f1_on_hand_worked_cases():
    assert exact_match("the Eiffel Tower", "Eiffel tower.") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0
    # "cat sat on mat" against "cat on mat": 3 shared, precision 3/4, recall 1 -> 2 * 0.75 / 1.75 = 6/7
    assert f1("the cat sat on the mat", "a cat on a mat") == pytest.approx(6 / 7)
    # the words are a multiset: "x x y" against "x y y" share one x and one y -> precision = recall = 2/3
    assert f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert f1("", "anything") == 0.0 and f1("dog", "cat") == 0.0
    # each prediction takes its best gold answer; totals are percentages over the questions
    scores = squad_scores(["Denver Broncos", "the cat sat on the mat"],
                          [["Broncos", "Denver Broncos"], ["dog", "a cat on a mat"]])
    assert scores == pytest.approx({"em": 50.0, "f1": 100 * (1 + 6 / 7) / 2})


def test_best_spans_decodes_as_run_qa():
    """Of the n_best top starts and ends, the best-scoring pair of context tokens, end not before start,
    at most max_length tokens; none valid: -inf."""
    offsets = torch.tensor([[[-1, -1], [-1, -1], [0, 3], [4, 7], [8, 12], [13, 15], [-1, -1]]] * 3)
    # top 3 starts / ends: [CLS] and [SEP] score highest, not context: skipped; (3, 4) scores 5 + 4
    start = torch.tensor([[9.0, 0, 1, 5, 2, 0, 8], [-5, -4, 6, -3, -2, 0.5, -1], [8, 7, -3, -2, -1, 9, -6]])
    end = torch.tensor([[9.0, 0, 0, 1, 4, 0, 9], [-5, -4, -3, -2, 3, 7, -1], [8, 7, 5, -3, -2, -99, -6]])
    # row 1: (2, 5) would score 13 but is 4 tokens, over max_length=3; (2, 4) scores 9, (5, 5) 7.5
    # row 2: the top starts (5, 0, 1) and ends (0, 1, 2) make no valid pair: the end before the start, or not context
    score, first, last = best_spans(start, end, offsets, n_best=3, max_length=3)
    assert score.tolist() == [9.0, 9.0, float("-inf")]
    assert (first.tolist()[:2], last.tolist()[:2]) == ([4, 0], [12, 12])


# --- the data: windows and their labels --------------------------------------------------------------------------
def write_squad(path: Path, paragraphs: int, seed: int = 0) -> None:
    """SQuAD's layout: articles of paragraphs, each with two questions whose answers are in the text
    (one near the start, one at the end of a context longer than a window)."""
    import random

    rng = random.Random(seed)
    names, cities = ["Alice", "Bruno", "Chloe", "Dmitri", "Elena", "Farid"], ["Paris", "Lima", "Oslo", "Quito", "Accra"]
    articles = []
    for a in range(0, paragraphs, 2):
        items = []
        for p in range(a, min(a + 2, paragraphs)):
            name, city = rng.choice(names), rng.choice(cities)
            context = (f"In {1900 + p}, {name} moved to {city}. " + "The winters there were long and quiet. " * 3
                       + f"Years later the library was founded by {name}.")
            items.append({"context": context, "qas": [
                {"id": f"{p}-city", "question": f"Where did {name} move?",
                 "answers": [{"text": city, "answer_start": context.index(city)}]},
                {"id": f"{p}-founder", "question": "Who founded the library?",
                 "answers": [{"text": name, "answer_start": context.rindex(name)},
                             {"text": f"by {name}", "answer_start": context.rindex(f"by {name}")}]}]})
        articles.append({"title": f"article {a}", "paragraphs": items})
    path.write_text(json.dumps({"version": "1.1", "data": articles}))


def squad_data(tmp_path: Path, **kw) -> SquadData:
    kw = {"max_length": 32, "doc_stride": 8, "max_query_length": 10, "vocab_size": 200} | kw
    data = SquadData(str(tmp_path), str(tmp_path / "cache"), batch_size=2, source=str(tmp_path / "train.json"), **kw)
    data.setup()
    return data


def test_windows_overlap_by_the_stride_and_label_the_answer_or_cls(tmp_path):
    write_squad(tmp_path / "train.json", 12)
    data = squad_data(tmp_path)
    windows = data.dataset("train").windows
    tok = data.tokenizer
    cls, sep = tok.token_id("[CLS]"), tok.token_id("[SEP]")
    asked = next(w.example for w in windows if len(w.answers) == 2)  # a "who founded" question (two golds)
    founder = [w for w in windows if w.example == asked]
    assert len(founder) >= 2 and all(len(w.ids) <= 32 for w in windows)
    for w in founder:
        q_end = w.ids.index(sep)
        assert w.ids[0] == cls and w.ids[-1] == sep and w.segments == [0] * (q_end + 1) + [1] * (len(w.ids) - q_end - 1)
        assert all(o == (-1, -1) for o in w.offsets[: q_end + 1] + w.offsets[-1:])  # only context tokens have offsets
    # consecutive windows share doc_stride (8) context tokens
    first, second = ([i for i, o in zip(w.ids, w.offsets) if o != (-1, -1)] for w in founder[:2])
    assert first[-8:] == second[:8] and first[:-8] != second[:-8]
    # the answer's tokens where a window holds it (the last, and the one before where they overlap it),
    # else both labels at [CLS]
    held = [w.start > 0 for w in founder]
    assert held[-1] and not held[0] and held == sorted(held)
    for w in founder:
        if w.start:
            assert w.context[w.offsets[w.start][0]: w.offsets[w.end][1]] == w.answers[0]
        else:
            assert w.end == 0
    assert founder[0].answers == [founder[0].answers[0], f"by {founder[0].answers[0]}"]  # every gold kept
    # held out by paragraph: no context in two splits
    contexts = {split: {w.context for w in data.dataset(split).windows} for split in ("train", "val", "test")}
    assert not contexts["train"] & (contexts["val"] | contexts["test"]) and contexts["val"] and contexts["test"]


def test_a_roberta_tokenizer_joins_question_and_context_as_roberta_does(tmp_path):
    """A tokenizer whose classifier token is <s> (RoBERTa's, from data.tokenizer= or init_from): windows
    are <s> q </s></s> c </s>, the labels and offsets shifted by the extra separator."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<s>", "<pad>", "</s>", "<unk>", "a", "b", "c", "d", "x", "y"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    qas = [{"id": q, "question": q, "answers": [{"text": "c", "answer_start": 4}]} for q in ("x", "y")]
    (tmp_path / "train.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": "a b c d", "qas": qas}]}]}))
    data = squad_data(tmp_path, tokenizer=str(tmp_path / "tok"), val=str(tmp_path / "train.json"),
                      test=str(tmp_path / "train.json"))
    w = data.dataset("train")[0]
    assert [words[i] for i in w.ids] == ["<s>", "x", "</s>", "</s>", "a", "b", "c", "d", "</s>"]
    assert (w.start, w.end) == (6, 6) and w.offsets[4:8] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert w.offsets[:4] == [(-1, -1)] * 4 and data.pad_id == 1


def test_answer_tokens_needs_the_whole_answer_in_the_window():
    offsets = [(10, 14), (15, 19), (19, 20)]
    assert answer_tokens(offsets, 15, 20) == (1, 2) and answer_tokens(offsets, 11, 14) == (0, 0)
    assert answer_tokens(offsets, 5, 12) is None and answer_tokens(offsets, 15, 25) is None


def test_a_file_not_in_squads_layout_and_a_stride_too_long_are_refused(tmp_path):
    (tmp_path / "train.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": "c", "qas": [{"id": 1}]}]}]}))
    with pytest.raises(ValueError, match=r"data.source=.*train.json is not a SQuAD-format JSON file \(KeyError"):
        squad_data(tmp_path)
    with pytest.raises(ValueError, match=r"data.doc_stride=20: a window of data.max_length=32"):
        squad_data(tmp_path, doc_stride=20)


# --- the head against Hugging Face ------------------------------------------------------------------------------
def tiny_bert() -> BertForQuestionAnswering:
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=24, type_vocab_size=2, attn_implementation="sdpa")
    return randomise(BertForQuestionAnswering(config).eval())


def tiny_roberta() -> RobertaForQuestionAnswering:
    config = RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=48, max_position_embeddings=26, type_vocab_size=1, pad_token_id=1,
                           attn_implementation="sdpa")
    return randomise(RobertaForQuestionAnswering(config).eval())


def tiny_distilbert() -> DistilBertForQuestionAnswering:
    config = DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
                              max_position_embeddings=24, attn_implementation="sdpa")
    return randomise(DistilBertForQuestionAnswering(config).eval())


# family -> (its tiny randomised Hugging Face QA model, its converter, its padding id, reads segment ids)
FAMILIES = {"bert": (tiny_bert, bert, 0, True), "roberta": (tiny_roberta, roberta, 1, False),
            "distilbert": (tiny_distilbert, distilbert, 0, False)}


def qa_cfg(model: str, *overrides: str):
    cfg = compose_config([f"model={model}", "task=qa", *overrides])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": VOCAB, "pad_id": 0}
    return cfg


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@torch.no_grad()
def test_init_from_a_question_answering_folder_is_exact(tmp_path, family, dtype):
    """model.init_from= a *ForQuestionAnswering folder reads qa_outputs into the span head: the zoo's start
    and end logits are Hugging Face's at every real position (randomised weights, padding, odd lengths)."""
    build, module, pad_id, segmented = FAMILIES[family]
    torch.manual_seed(0)
    hf = build()
    hf.save_pretrained(tmp_path)
    net_cfg = OmegaConf.to_container(qa_cfg(family).model.net, resolve=True)
    _, net = module.pretrained(net_cfg, str(tmp_path))
    hf, net = hf.to(dtype), net.eval().to(dtype)
    ids, segments, padding = pair_batch(pad_id)
    segments = segments if segmented else None
    out = hf(input_ids=ids, attention_mask=padding.long(), **({"token_type_ids": segments} if segmented else {}))
    ref = torch.stack([out.start_logits, out.end_logits], -1)
    assert_matches(net(ids, key_padding=padding, segments=segments), ref, padding[..., None],
                   what=f"{family} start and end logits")


@pytest.mark.parametrize("family", list(FAMILIES))
@torch.no_grad()
def test_the_loss_is_hugging_faces(tmp_path, family):
    """The objective's loss is *ForQuestionAnswering's: the mean of the start and end cross-entropies,
    windows without the answer pointing at [CLS]."""
    from zoo.data.batches import QuestionSpans
    from zoo.train.run import objective

    build, _, pad_id, segmented = FAMILIES[family]
    torch.manual_seed(0)
    hf = build()
    hf.save_pretrained(tmp_path)
    built = objective(qa_cfg(family, f"model.init_from={tmp_path}")).eval()
    ids, segments, padding = pair_batch(pad_id)
    starts, ends = torch.tensor([3, 0, 2]), torch.tensor([5, 0, 4])
    batch = QuestionSpans(ids, padding, segments, starts, ends, torch.zeros(3, 17, 2, dtype=torch.long),
                          torch.arange(3), [""] * 3, [[""]] * 3)
    ref = hf(input_ids=ids, attention_mask=padding.long(), start_positions=starts, end_positions=ends,
             **({"token_type_ids": segments} if segmented else {})).loss
    assert_matches(built.loss(*built.logits(batch), batch), ref, what=f"{family} loss")


# --- the export: what transformers loads answers as the zoo does --------------------------------------------------
@pytest.mark.parametrize("family, hf_class", [("bert", "BertForQuestionAnswering"),
                                              ("roberta", "RobertaForQuestionAnswering"),
                                              ("distilbert", "DistilBertForQuestionAnswering")])
@torch.no_grad()
def test_export_writes_the_question_answering_class_that_answers_as_the_zoo(tmp_path, family, hf_class):
    """zoo export of a task=qa checkpoint writes the family's *ForQuestionAnswering and its tokenizer;
    loaded by AutoModelForQuestionAnswering and AutoTokenizer and decoded by transformers' own span
    decoding (select_starts_ends: the question-answering pipeline's, which transformers 5 keeps for its
    document QA pipeline), each answer is the zoo's."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer
    from transformers.pipelines.document_question_answering import select_starts_ends

    from zoo.convert.export import export
    from zoo.registry import name_of
    from zoo.train.run import objective

    write_squad(tmp_path / "train.json", 8)
    data = squad_data(tmp_path, max_length=64, doc_stride=8, max_query_length=12)
    cfg = compose_config([f"model={family}", "task=qa", "model.net.n_layers=2", "model.net.block.d_model=32",
                          "model.net.block.n_heads=4", "model.net.context=64", "model.max_answer_length=15"])
    with open_dict(cfg):
        cfg.dims = data.dims
    torch.manual_seed(0)
    built = objective(cfg, data.tokenizer.state())
    randomise(built.net, seed=2)
    ckpt = tmp_path / "run.ckpt"
    torch.save({"zoo_objective": name_of(type(built)), "hyper_parameters": dict(built.hparams),
                "state_dict": built.state_dict()}, ckpt)
    assert export(ckpt, tmp_path / "hf") == (hf_class, [])
    hf = AutoModelForQuestionAnswering.from_pretrained(tmp_path / "hf").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(hf).__name__ == hf_class
    windows = data.dataset("test").windows
    ours = built.eval().answer(data.collate_fn()(windows))
    questions = {w.example: w for w in windows}
    assert len(ours) == len(questions) == len(windows)  # one window each: the whole context fits
    for answer, w in zip(ours, (questions[i] for i in sorted(questions))):
        question = data.tokenizer.decode(w.ids[1: w.ids.index(data.tokenizer.token_id("[SEP]"))])
        enc = tokenizer(question, w.context, return_offsets_mapping=True, return_tensors="pt")
        assert enc["input_ids"][0].tolist() == w.ids  # the exported tokenizer joins the pair as the zoo does
        assert ("token_type_ids" in enc) == (family == "bert")  # BERT reads the context as segment 1
        out = hf(**{k: v for k, v in enc.items() if k != "offset_mapping"})
        p_mask = [[0 if s == 1 else 1 for s in enc.sequence_ids(0)]]
        starts, ends, *_ = select_starts_ends(out.start_logits.numpy(), out.end_logits.numpy(), p_mask,
                                              enc["attention_mask"].numpy(), max_answer_len=15)
        offsets = enc["offset_mapping"][0]
        assert w.context[offsets[starts[0]][0]: offsets[ends[0]][1]] == answer


# --- refusals and a run -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("arguments, named", [
    (["model=gpt", "task=qa", "data=squad"], ["task=qa", "model=gpt", "NextTokenLM", "QuestionSpans"]),
    (["model=vit", "task=qa", "data=squad"], ["task=qa", "model=vit", "Classification", "QuestionSpans"]),
    (["model=bert", "task=qa", "data=wikitext"], ["model=bert", "QuestionSpans", "data=wikitext"]),
    (["model=bert", "data=squad"], ["model=bert", "MaskedLM", "data=squad", "QuestionSpans"]),
])
def test_impossible_pairs_are_refused_in_one_line_naming_both_sides(arguments, named, tmp_path):
    assert_refused_in_one_line(arguments, named, tmp_path / "run")


@pytest.mark.slow
def test_bert_qa_trains_and_eval_reports_em_and_f1(tmp_path):
    """python train.py model=bert task=qa data=squad data.source=FILE on SQuAD-format questions: the loss
    falls and val EM / F1 are logged; python -m zoo eval then reports em and f1 on the test split."""
    import csv

    write_squad(tmp_path / "train.json", 40)
    write_squad(tmp_path / "dev.json", 6, seed=1)
    run = tmp_path / "run"
    run_train(run, tmp_path / "data", "model=bert", "task=qa", "data=squad", f"data.source={tmp_path / 'train.json'}",
              "quick=true", "trainer.max_steps=30", "data.batch_size=8", "data.vocab_size=200",
              "model.net.context=64", "data.doc_stride=16", "data.max_query_length=12", "trainer.log_every_n_steps=1")
    rows = list(csv.DictReader(open(run / "metrics.csv")))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) >= 10 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
    assert any(r.get("val/em") for r in rows) and any(r.get("val/f1") for r in rows)
    root = str(Path(__file__).parents[1])
    env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path / "data"), ZOO_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-m", "zoo", "eval", f"ckpt={run / 'checkpoints' / 'last.ckpt'}",
                          "data=squad", f"data.source={tmp_path / 'train.json'}", f"data.test={tmp_path / 'dev.json'}",
                          "data.doc_stride=16", "data.max_query_length=12", f"out={tmp_path / 'eval.json'}"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert {"em", "f1", "loss"} <= metrics.keys() and 0 <= metrics["em"] <= metrics["f1"] <= 100
    assert metrics["f1"] > 0  # the questions' answers are easy to point at: 30 steps find some
