"""task=embed: sentence embeddings over BERT, RoBERTa and DistilBERT. The config group's swap, the
refusal of impossible pairs, pairs of texts from data=labelled (with scores or without), the losses
against sentence-transformers' own on the same embeddings, the Spearman metric against scipy's, the
export read back by sentence-transformers, and model.init_from= a sentence-transformers folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from hydra.errors import InstantiationException
from omegaconf import OmegaConf, open_dict
from scipy.stats import spearmanr

from conftest import assert_refused_in_one_line, run_train
from exactness import assert_matches, randomise
from test_embed import TEXTS, bert_folder, bert_reference, sentence_transformers_folder
from zoo.config import compose_config
from zoo.data.batches import TextPairs
from zoo.data.labelled import CLS, MASK, PAD, SEP, UNK, LabelledText, encode_pair, pad
from zoo.data.tokenizers import HFTokenizer, first_token
from zoo.objectives.embedding import cosine_loss, mnrl_loss
from zoo.registry import name_of
from zoo.train.run import objective

FAMILIES = {"bert": "BertModel", "roberta": "RobertaModel", "distilbert": "DistilBertModel"}
SMALL = ["model.net.n_layers=2", "model.net.block.d_model=32", "model.net.block.n_heads=4", "model.net.context=32"]
SENTENCES = ["a cat sat on the mat", "the dog ran", "a small red house by the tree", "cat", "the mat sat on a dog"]


def test_task_embed_swaps_the_head_and_objective_of_each_encoder():
    """task=embed: the Embedding objective, the net's head the identity (it gives hidden states);
    the family's mask, embedder and Block are its own."""
    for model in FAMILIES:
        pretrain, embed = (compose_config([f"model={model}", *task]).model for task in ([], ["task=embed"]))
        assert embed._target_ == "zoo.objectives.embedding.Embedding"
        assert embed.net.head._target_ == "torch.nn.Identity" and not embed.net.tie_embeddings
        assert embed.pooling is None and embed.loss is None and embed.scale == 20.0
        for part in ("mask", "embedder", "block"):
            assert OmegaConf.to_container(embed.net[part]) == OmegaConf.to_container(pretrain.net[part])


@pytest.mark.parametrize("arguments, named", [
    (["model=gpt", "task=embed", "data=stsb"], ["task=embed", "model=gpt", "NextTokenLM", "TextPairs"]),
    (["model=vit", "task=embed", "data=stsb"], ["task=embed", "model=vit", "Classification", "TextPairs"]),
    (["model=bert", "task=embed", "data=wikitext"], ["model=bert", "TextPairs", "data=wikitext"]),
])
def test_impossible_pairs_are_refused_in_one_line_naming_both_sides(arguments, named, tmp_path):
    assert_refused_in_one_line(arguments, named, tmp_path / "run")


def pairs_data(tmp_path: Path, scored: bool, **kw) -> LabelledText:
    """data=labelled over STS-B-like rows (a pair and a score each), served as TextPairs batches."""
    rows = [{"a": f"a cat sat {i}", "b": f"the cat {i} ran far", "score": i % 6 * 1.0} for i in range(12)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = LabelledText(str(tmp_path), str(tmp_path / "cache"), batch_size=4, block_size=16, vocab_size=60,
                        source="rows.jsonl", column="a", text_pair="b", label="score" if scored else None, **kw)
    data.serve(TextPairs)
    data.setup()
    return data


@pytest.mark.parametrize("scored", [True, False])
def test_pairs_are_two_texts_each_in_cls_and_sep_with_their_scores_or_none(tmp_path, scored):
    data = pairs_data(tmp_path, scored)
    items = [data.dataset("train")[i] for i in range(4)]
    batch = data.collate_fn()(items)
    assert isinstance(batch, TextPairs)
    cls, sep = data.tokenizer.token_id("[CLS]"), data.tokenizer.token_id("[SEP]")
    for tokens, padding, side in ((batch.first, batch.first_padding, 0), (batch.second, batch.second_padding, 1)):
        for row, item in zip(range(4), items):
            real = tokens[row][padding[row]].tolist()
            assert real == item[side] and real[0] == cls and real[-1] == sep and real.count(sep) == 1
    if scored:
        assert batch.scores.dtype == torch.float32 and set(batch.scores.tolist()) <= {0.0, 1, 2, 3, 4, 5}
    else:
        assert batch.scores is None


def test_pairs_need_a_second_text(tmp_path):
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"a": f"a {i}", "score": 1.0}) + "\n" for i in range(8)))
    data = LabelledText(str(tmp_path), str(tmp_path / "cache"), batch_size=2, block_size=16, vocab_size=40,
                        source="rows.jsonl", column="a", label="score")
    data.serve(TextPairs)
    with pytest.raises(ValueError, match="data.text_pair is not set"):
        data.setup()


def test_rows_without_labels_are_refused_to_a_classifier(tmp_path):
    """data.label=null is pairs without scores, for task=embed: a classifier's TextLabels are refused it."""
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"a": f"a {i}", "b": f"b {i}"}) + "\n" for i in range(8)))
    data = LabelledText(str(tmp_path), str(tmp_path / "cache"), batch_size=2, block_size=16, vocab_size=40,
                        source="rows.jsonl", column="a", text_pair="b", label=None)
    with pytest.raises(ValueError, match="data.label=null: a classifier needs labels"):
        data.setup()


def test_the_losses_are_sentence_transformers_own_on_the_same_embeddings():
    """MultipleNegativesRankingLoss (scale 20, in-batch negatives) and CosineSimilarityLoss (MSE of the
    cosine against the score in [0, 1]), as sentence-transformers computes them from embeddings."""
    st_losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")
    g = torch.Generator().manual_seed(0)
    first, second, scores = torch.randn(6, 16, generator=g), torch.randn(6, 16, generator=g), torch.rand(6, generator=g)
    mnrl = st_losses.MultipleNegativesRankingLoss(None).compute_loss_from_embeddings([first, second], None)
    assert_matches(mnrl_loss(first, second), mnrl, what="in-batch negatives loss")
    assert_matches(mnrl_loss(first, second, scale=7.0),
                   st_losses.MultipleNegativesRankingLoss(None, scale=7.0).compute_loss_from_embeddings([first, second], None),
                   what="in-batch negatives loss at scale 7")
    cosine = st_losses.CosineSimilarityLoss(None).compute_loss_from_embeddings([first, second], scores)
    assert_matches(cosine_loss(first, second, scores), cosine, what="cosine similarity loss")


def embed_objective(model: str, tokenizer: HFTokenizer, *overrides: str):
    """model=<model> task=embed, small, built as train.py builds it, its weights drawn away from init."""
    cfg = compose_config([f"model={model}", "task=embed", *SMALL, *overrides])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": tokenizer.vocab_size, "pad_id": tokenizer.token_id(first_token(tokenizer, PAD, "", ""))}
    torch.manual_seed(0)
    built = objective(cfg, tokenizer.state())
    randomise(built.net, seed=2)
    return built.eval()


def zoo_embeddings(built, tokenizer: HFTokenizer, sentences: list[str]) -> torch.Tensor:
    """The objective's embeddings of ``sentences`` as its data encodes them, padded in one batch."""
    cls, sep = tokenizer.token_id(CLS[0]), tokenizer.token_id(SEP[0])
    tokens, padding = pad([encode_pair(tokenizer.encode(s), None, cls, sep, 32)[0] for s in sentences],
                          tokenizer.token_id(PAD[0]))
    with torch.no_grad():
        return built.embed(tokens, padding)


def word_piece() -> HFTokenizer:
    return HFTokenizer.train_wordpiece(SENTENCES * 4, 60, [PAD[0], UNK[0], CLS[0], SEP[0], MASK[0]], False)


def test_the_loss_is_picked_by_the_data_or_by_name():
    """loss=null: the cosine loss on pairs with scores (divided by max_score), in-batch negatives on pairs
    without; model.loss=cosine on pairs without scores, or an unknown loss, is refused naming the key."""
    tokenizer = word_piece()
    built = embed_objective("bert", tokenizer)
    g = torch.Generator().manual_seed(0)
    first, second, scores = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g), torch.tensor([0., 1, 4, 5])
    scored, bare = (TextPairs(*[torch.zeros(4, 3)] * 4, s) for s in (scores, None))
    assert_matches(built.loss(scored, first, second), cosine_loss(first, second, scores / 5), what="cosine loss")
    assert_matches(built.loss(bare, first, second), mnrl_loss(first, second), what="ranking loss")
    built.loss_name = "cosine"
    with pytest.raises(ValueError, match="model.loss=cosine needs pairs with scores"):
        built.loss(bare, first, second)
    with pytest.raises(InstantiationException, match="model.loss=bogus: expected one of mnrl, cosine"):
        embed_objective("bert", tokenizer, "model.loss=bogus")


def test_the_spearman_metric_is_scipys_over_the_whole_split():
    """val/spearman over two batches (tied scores, as STS-B has) is scipy's Spearman correlation of
    the pairs' cosine similarities and their scores, computed here from the embeddings."""
    tokenizer = word_piece()
    built = embed_objective("bert", tokenizer)
    cls, sep, pad_id = tokenizer.token_id(CLS[0]), tokenizer.token_id(SEP[0]), tokenizer.token_id(PAD[0])
    batches, cosines, gold = [], [], []
    for shift, scores in ((1, [0.0, 2.5, 2.5, 5.0, 1.0]), (2, [3.0, 3.0, 4.2, 0.4, 2.5])):
        second = SENTENCES[shift:] + SENTENCES[:shift]
        sides = [pad([encode_pair(tokenizer.encode(s), None, cls, sep, 32)[0] for s in texts], pad_id)
                 for texts in (SENTENCES, second)]
        batches.append(TextPairs(*sides[0], *sides[1], torch.tensor(scores)))
        a, b = zoo_embeddings(built, tokenizer, SENTENCES), zoo_embeddings(built, tokenizer, second)
        cosines += torch.nn.functional.cosine_similarity(a, b).tolist()
        gold += scores
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log outside a trainer says it logs nothing: the metric is read here
        for i, batch in enumerate(batches):
            built.validation_step(batch, i)
    assert built.spearman["val"].compute().item() == pytest.approx(spearmanr(cosines, gold).statistic, abs=1e-6)


@pytest.mark.parametrize("family, extra", [("bert", []), ("bert", ["model.pooling=cls", "model.normalize=true"]),
                                           ("roberta", []), ("distilbert", ["model.pooling=max"])])
def test_export_is_a_sentence_transformers_folder_giving_the_zoos_embeddings(tmp_path, family, extra):
    """zoo export of a task=embed checkpoint: a sentence-transformers folder (the family's bare encoder,
    modules.json, 1_Pooling/config.json) whose SentenceTransformer(folder).encode gives the zoo's own
    embeddings (padding: sentences of several lengths in one batch)."""
    st = pytest.importorskip("sentence_transformers")
    from zoo.convert.export import export

    tokenizer = word_piece()
    built = embed_objective(family, tokenizer, *extra)
    ckpt = tmp_path / "run.ckpt"
    torch.save({"zoo_objective": name_of(type(built)), "hyper_parameters": dict(built.hparams),
                "state_dict": built.state_dict()}, ckpt)
    hf_class, _ = export(ckpt, tmp_path / "st")
    assert hf_class == FAMILIES[family]
    pooling = json.loads((tmp_path / "st" / "1_Pooling" / "config.json").read_text())
    assert pooling[f"pooling_mode_{built.pooling.mode}_{'token' if built.pooling.mode == 'cls' else 'tokens'}"]
    theirs = st.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(SENTENCES, convert_to_tensor=True)
    assert_matches(zoo_embeddings(built, tokenizer, SENTENCES), theirs, what=f"{family} embeddings")


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_zoo_embed_of_a_checkpoint_gives_the_runs_own_embeddings(tmp_path, family):
    """python -m zoo embed ckpt= a task=embed checkpoint: each text in [CLS] ... [SEP] (RoBERTa's
    tokenizer's <s> ... </s>), pooled as the run pools (here cls, normalised)."""
    from test_embed import embed, texts_override
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    if family == "bert":
        tokenizer = word_piece()
    else:  # a RoBERTa tokenizer: its own role tokens
        words = ["<s>", "<pad>", "</s>", "<unk>", *sorted({w for s in SENTENCES for w in s.split()})]
        raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
        raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        raw.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
        tokenizer = HFTokenizer(raw)
    built = embed_objective(family, tokenizer, "model.pooling=cls", "model.normalize=true")
    ckpt = tmp_path / "run.ckpt"
    torch.save({"zoo_objective": name_of(type(built)), "hyper_parameters": dict(built.hparams),
                "state_dict": built.state_dict()}, ckpt)
    got = torch.tensor(embed(tmp_path, f"ckpt={ckpt}", texts_override(SENTENCES)))
    cls, sep = (tokenizer.token_id(first_token(tokenizer, names, "", "")) for names in (CLS, SEP))
    tokens, padding = pad([[cls, *tokenizer.encode(s), sep] for s in SENTENCES], tokenizer.token_id(
        first_token(tokenizer, PAD, "", "")))
    with torch.no_grad():
        assert_matches(got, built.embed(tokens, padding), what=f"{family} checkpoint embeddings")


@pytest.mark.parametrize("sub, mode, normalize", [("0_Transformer", "cls", True), ("", "mean", False)])
def test_init_from_a_sentence_transformers_folder_takes_its_transformer_and_pooling(tmp_path, sub, mode, normalize):
    """model.init_from= a sentence-transformers folder (its Transformer at its root or in a subfolder):
    the net holds its weights, the data its tokenizer, the pooling is its Pooling module's."""
    folder = tmp_path / "st"
    sentence_transformers_folder(folder, sub, mode, normalize)
    built = from_folder(folder)
    assert (built.pooling.mode, built.pooling.normalize) == (mode, normalize)
    tokenizer = built_tokenizer(folder)
    st = pytest.importorskip("sentence_transformers")
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_tensor=True)
    assert_matches(encode_texts(built, tokenizer, TEXTS), theirs, what="embeddings of the folder")


def from_folder(folder: Path, *overrides: str):
    """task=embed with model.init_from=folder, its tokenizer the data's (as train.py would make them)."""
    from zoo.data.pretrained import tokenizer_of

    tokenizer = tokenizer_of(folder)
    cfg = compose_config(["model=bert", "task=embed", f"model.init_from={folder}", *overrides])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": tokenizer.vocab_size, "pad_id": 0}
    return objective(cfg, tokenizer.state()).eval()


def built_tokenizer(folder: Path):
    from zoo.data.pretrained import tokenizer_of

    return tokenizer_of(folder)


def encode_texts(built, tokenizer, texts: list[str]) -> torch.Tensor:
    cls, sep = tokenizer.token_id("[CLS]"), tokenizer.token_id("[SEP]")
    tokens, padding = pad([encode_pair(tokenizer.encode(t), None, cls, sep, 20)[0] for t in texts], 0)
    with torch.no_grad():
        return built.embed(tokens, padding)


def test_init_from_a_plain_bert_folder_pools_by_the_mean(tmp_path):
    hf = bert_folder(tmp_path / "bert")
    built = from_folder(tmp_path / "bert")
    assert (built.pooling.mode, built.pooling.normalize) == ("mean", False)
    got = encode_texts(built, built_tokenizer(tmp_path / "bert"), TEXTS)
    assert_matches(got, bert_reference(hf, tmp_path / "bert", TEXTS, "mean", False), what="mean embeddings")


@pytest.mark.parametrize("config, named", [
    ({"pooling_mode_lasttoken": True}, "pooling_mode_lasttoken"),
    ({"pooling_mode_weightedmean_tokens": True}, "pooling_mode_weightedmean_tokens"),
    ({"pooling_mode": "mean_sqrt_len_tokens"}, "pooling_mode='mean_sqrt_len_tokens'"),
])
def test_a_pooling_the_zoo_does_not_compute_is_refused_by_name(tmp_path, config, named):
    folder = tmp_path / "st"
    sentence_transformers_folder(folder, "", "mean", False)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=named):
        from_folder(folder)


def write_stsb(folder: Path, rows: int = 160) -> None:
    """STS-B's layout (GLUE's TSV: sentence1, sentence2, score 0-5): the score is how many of five
    words the second sentence shares with the first, its words shuffled (no pair is two equal texts,
    whose cosines, 1 up to rounding, would rank by their rounding)."""
    import random

    words = "cat dog sat ran far mat tree house red blue green small big fast slow".split()
    rng = random.Random(0)
    folder.mkdir(parents=True)
    for split, n in (("train", rows), ("dev", rows // 4)):
        lines, benchmark = ["index\tsentence1\tsentence2\tscore"], []
        for i in range(n):
            first, same = rng.sample(words, 5), rng.randint(0, 5)
            second = first[:same] + rng.sample([w for w in words if w not in first], 5 - same)
            rng.shuffle(second)
            lines.append(f"{i}\t{' '.join(first)}\t{' '.join(second)}\t{same:.3f}")
            benchmark.append(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{same:.3f}\t{' '.join(first)}\t{' '.join(second)}")
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    # data=stsb tests on the STS Benchmark's scored file (no header; score, sentence1, sentence2 in
    # fields 5-7): here the dev rows again
    (folder / "sts-test.csv").write_text("\n".join(benchmark) + "\n")


@pytest.mark.slow
def test_bert_embed_stsb_trains_evaluates_and_exports(tmp_path):
    """python train.py model=bert task=embed data=stsb: the cosine loss falls and val/spearman is logged;
    python -m zoo eval reports test/spearman, which is scipy's Spearman correlation of the exported
    folder's own (sentence-transformers') cosines on the test rows."""
    st = pytest.importorskip("sentence_transformers")
    write_stsb(tmp_path / "data" / "downstream" / "stsb")
    run = tmp_path / "run"
    run_train(run, tmp_path / "data", "model=bert", "task=embed", "data=stsb", "quick=true", "trainer.max_steps=20",
              "data.batch_size=16", "data.vocab_size=100", "trainer.log_every_n_steps=1", *SMALL[:3])
    import csv

    rows = list(csv.DictReader(open(run / "metrics.csv")))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) >= 10 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
    assert any(r.get("val/spearman") for r in rows)
    root = str(Path(__file__).parents[1])
    env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path / "data"), ZOO_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    ckpt = run / "checkpoints" / "last.ckpt"
    for command in (["eval", f"ckpt={ckpt}", "data=stsb", f"out={tmp_path / 'eval.json'}"],
                    ["export", f"ckpt={ckpt}", f"out={tmp_path / 'st'}"]):
        out = subprocess.run([sys.executable, "-m", "zoo", *command], env=env, capture_output=True, text=True,
                             timeout=300, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval.json").read_text())
    test = list(csv.DictReader(open(tmp_path / "data" / "downstream" / "stsb" / "dev.tsv"), delimiter="\t"))  # = sts-test.csv
    model = st.SentenceTransformer(str(tmp_path / "st"), device="cpu")
    a, b = (model.encode([r[c] for r in test], convert_to_tensor=True) for c in ("sentence1", "sentence2"))
    cosines = torch.nn.functional.cosine_similarity(a, b).tolist()
    assert metrics["spearman"] == pytest.approx(spearmanr(cosines, [float(r["score"]) for r in test]).statistic, abs=1e-4)
