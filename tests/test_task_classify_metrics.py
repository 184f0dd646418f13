"""task=classify's metrics past training: accuracy, macro F1 and Matthews' correlation (CoLA's), each as
scikit-learn computes it on the same predictions."""

from __future__ import annotations

import pytest
import torch
from omegaconf import open_dict
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from zoo.config import compose_config
from zoo.train.run import objective


def classifier(num_classes: int):
    cfg = compose_config(["model=bert", "task=classify", "model.net.n_layers=1", "model.net.block.d_model=32",
                          "model.net.block.n_heads=2", "model.net.context=16"])
    with open_dict(cfg):
        cfg.dims = {"vocab_size": 50, "pad_id": 0, "num_classes": num_classes,
                    "class_names": [str(i) for i in range(num_classes)]}
    return objective(cfg, None)


def test_val_and_test_report_matthews_correlation_as_sklearn_does():
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 3, (64,), generator=g)
    logits = torch.randn(64, 3, generator=g) + 2.0 * torch.nn.functional.one_hot(labels, 3)  # better than chance
    built = classifier(3)
    assert "mcc" not in built.scores["train"]
    for split in ("val", "test"):
        metrics = built.scores[split]
        for start in range(0, 64, 16):  # batch by batch, as the loop feeds them
            for metric in metrics.values():
                metric.update(logits[start:start + 16], labels[start:start + 16])
        predicted = logits.argmax(-1).numpy()
        assert float(metrics["mcc"].compute()) == pytest.approx(matthews_corrcoef(labels.numpy(), predicted), abs=1e-6)
        assert float(metrics["f1"].compute()) == pytest.approx(f1_score(labels.numpy(), predicted, average="macro"), abs=1e-6)
        assert float(metrics["acc"].compute()) == pytest.approx(accuracy_score(labels.numpy(), predicted), abs=1e-6)

