"""task=classify with data.multi_label=true: a set of classes per text (a list, or names split at
data.label_sep), binary cross-entropy per class and a class predicted above sigmoid 0.5 (Hugging Face's
problem_type=multi_label_classification), micro / macro F1 and the exact-match ratio as scikit-learn
computes them; the export sets problem_type, so the text-classification pipeline scores by sigmoid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import open_dict
from sklearn.metrics import accuracy_score, f1_score

from test_task_classify import SENTENCES, encoded, export_classifier
from zoo.config import compose_config
from zoo.train.run import objective

NAMES = ["comedy", "drama", "horror"]


def labelled(tmp_path: Path, source: str, **kw):
    from zoo.data.labelled import LabelledText

    data = LabelledText(str(tmp_path), str(tmp_path / "cache"), batch_size=2, block_size=16, vocab_size=80,
                        source=source, multi_label=True, **kw)
    data.setup()
    return data


def test_label_lists_and_separated_names_read_as_sets(tmp_path):
    rows = [{"sentence": f"film {i}", "label": labels} for i, labels in
            enumerate([["drama"], ["comedy", "horror"], [], ["horror", "drama"]] * 3)]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    data = labelled(tmp_path, "rows.jsonl", val="rows.jsonl", test="rows.jsonl")
    assert data.dims["class_names"] == NAMES and data.dims["multi_label"] is True
    assert data.splits["test"].labels[:4].tolist() == [[0, 1, 0], [1, 0, 1], [0, 0, 0], [0, 1, 1]]
    (tmp_path / "rows.tsv").write_text("sentence\tlabel\n" + "\n".join(
        f"film {i}\t{'|'.join(r['label'])}" for i, r in enumerate(rows)) + "\n")
    data = labelled(tmp_path, "rows.tsv", val="rows.tsv", test="rows.tsv", label_sep="|")
    assert data.splits["test"].labels[:4].tolist() == [[0, 1, 0], [1, 0, 1], [0, 0, 0], [0, 1, 1]]
    with pytest.raises(ValueError, match="needs data.label_sep="):
        labelled(tmp_path, "rows.tsv", val="rows.tsv", test="rows.tsv")
    (tmp_path / "test.tsv").write_text("sentence\tlabel\nfilm x\tdrama|western\n")
    with pytest.raises(ValueError, match=r"the test rows have labels \['western'\]"):
        labelled(tmp_path, "rows.tsv", val="rows.tsv", test="test.tsv", label_sep="|")


SMALL = ["model=bert", "model.net.n_layers=1", "model.net.block.d_model=32", "model.net.block.n_heads=2",
         "model.net.context=32"]


def test_the_loss_and_metrics_are_hugging_faces_and_sklearns():
    cfg = compose_config(["task=classify", *SMALL])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": 50, "pad_id": 0, "num_classes": 3, "class_names": NAMES, "multi_label": True}
    built = objective(cfg, None)
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 2, (64, 3), generator=g).float()
    logits = torch.randn(64, 3, generator=g) + 1.5 * (2 * labels - 1)  # better than chance
    expected = torch.nn.BCEWithLogitsLoss()(logits, labels)  # what *ForSequenceClassification computes
    assert float(built.loss(logits, labels)) == pytest.approx(float(expected), abs=1e-6)
    assert built.confusion is None and not built.scores["train"]
    metrics = built.scores["test"]
    for start in range(0, 64, 16):
        for metric in metrics.values():
            metric.update(*built.scored(logits[start:start + 16], labels[start:start + 16]))
    predicted, truth = (logits.sigmoid() > 0.5).int().numpy(), labels.int().numpy()
    assert float(metrics["f1_micro"].compute()) == pytest.approx(f1_score(truth, predicted, average="micro"), abs=1e-6)
    assert float(metrics["f1_macro"].compute()) == pytest.approx(f1_score(truth, predicted, average="macro"), abs=1e-6)
    assert float(metrics["exact"].compute()) == pytest.approx(accuracy_score(truth, predicted), abs=1e-6)


@torch.no_grad()
def test_export_sets_problem_type_and_the_pipeline_scores_by_sigmoid(tmp_path):
    from transformers import pipeline

    built, tokenizer, _ = export_classifier(tmp_path, SMALL, NAMES, multi_label=True)
    classifier = pipeline("text-classification", model=str(tmp_path / "hf"), device="cpu", top_k=None)
    assert classifier.model.config.problem_type == "multi_label_classification"
    net = built.net.eval()
    for sentence, theirs in zip(SENTENCES, classifier(SENTENCES)):
        ids, segments = encoded(tokenizer, sentence)
        probs = net(torch.tensor([ids]), segments=torch.tensor([segments])).sigmoid()[0]
        assert {s["label"]: s["score"] for s in theirs} == pytest.approx(dict(zip(NAMES, probs.tolist())), abs=1e-5)
