"""task=classify over the decoders (Llama, Qwen2, Qwen3): the rightmost real token's vector -> ``score``
(no bias), exact against Hugging Face's ``*ForSequenceClassification`` read from its folder, and
exported as that class, whose text-classification pipeline gives the zoo's predictions."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from transformers import (LlamaConfig, LlamaForSequenceClassification, Qwen2Config, Qwen2ForSequenceClassification,
                          Qwen3Config, Qwen3ForSequenceClassification)

from exactness import assert_matches, randomise
from test_task_classify import SENTENCES, VOCAB, classify_net_cfg, encoded, export_classifier, pair_batch
from zoo.config import compose_config
from zoo.convert import decoder, llama, qwen2, qwen3

PAD = 0
SHAPE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=32, pad_token_id=PAD, attn_implementation="sdpa")
# family -> (its Hugging Face classifier and config classes, its converter, the config's own keys)
FAMILIES = {"llama": (LlamaForSequenceClassification, LlamaConfig, llama, {}),
            "qwen2": (Qwen2ForSequenceClassification, Qwen2Config, qwen2, {}),
            "qwen3": (Qwen3ForSequenceClassification, Qwen3Config, qwen3, {"head_dim": 8})}


def tiny(family: str, num_labels: int) -> torch.nn.Module:
    hf_class, config_class, _, own = FAMILIES[family]
    return randomise(hf_class(config_class(**SHAPE, **own, num_labels=num_labels)).eval())


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("num_labels", [3, 1])
@torch.no_grad()
def test_init_from_a_decoder_sequence_classification_folder_is_exact(tmp_path, family, num_labels):
    """model.init_from= a saved *ForSequenceClassification folder reads its score: the zoo's logits are
    Hugging Face's on the rightmost real token (randomised weights, right padding, odd lengths 17, 11, 6)."""
    torch.manual_seed(0)
    hf = tiny(family, num_labels)
    hf.save_pretrained(tmp_path)
    net_cfg, net = FAMILIES[family][2].pretrained(classify_net_cfg(family, num_labels), str(tmp_path))
    assert not net_cfg["tie_embeddings"] and net.head.proj.bias is None
    ids, _, padding = pair_batch(PAD)
    ref = hf(input_ids=ids, attention_mask=padding.long()).logits
    assert_matches(net.eval()(ids, key_padding=padding), ref, what=f"{family} classifier logits")


@torch.no_grad()
def test_the_pooled_token_is_the_rightmost_real_one(tmp_path, monkeypatch):
    """Read from the first token instead, the logits differ; a mapping that leaves the score unread is refused."""
    torch.manual_seed(0)
    hf = tiny("llama", 3)
    hf.save_pretrained(tmp_path)
    ids, _, padding = pair_batch(PAD)
    ref = hf(input_ids=ids, attention_mask=padding.long()).logits
    _, net = llama.pretrained(classify_net_cfg("llama", 3), str(tmp_path))
    net.head.pool = "cls"
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches(net.eval()(ids, key_padding=padding), ref)
    monkeypatch.setattr(decoder, "SCORE", {"proj": ("lm_head",)})  # the folder's score left unread: refused
    with pytest.raises(ValueError, match="score.weight"):
        llama.pretrained(classify_net_cfg("llama", 3), str(tmp_path))


def test_task_classify_swaps_a_decoders_lm_head_for_the_score():
    """The family keeps its mask, embedder and Block; its LM head's keys are gone, not merged into the classifier."""
    for model in ("llama", "qwen2", "qwen3"):
        pretrain, classify = (compose_config([f"model={model}", *task]).model for task in ([], ["task=classify"]))
        assert pretrain._target_ == "zoo.objectives.lm.NextTokenLM"
        assert classify._target_ == "zoo.objectives.classification.Classification"
        head = OmegaConf.to_container(classify.net.head)
        assert head.pop("_target_") == "zoo.nn.heads.ClassifierHead" and "vocab_size" not in head
        assert head["pool"] == "last" and head["proj_bias"] is False
        assert classify.net.block == pretrain.net.block and classify.net.mask == pretrain.net.mask


@pytest.mark.parametrize("family, hf_class", [("llama", "LlamaForSequenceClassification"),
                                              ("qwen2", "Qwen2ForSequenceClassification")])
@torch.no_grad()
def test_export_writes_the_decoder_classifier_that_the_pipeline_runs(tmp_path, family, hf_class):
    """zoo export of a decoder's task=classify checkpoint: its *ForSequenceClassification with id2label and
    the data's pad id, whose text-classification pipeline gives the zoo's labels and scores."""
    from transformers import PreTrainedTokenizerFast, pipeline

    from zoo.data.labelled import PAD as PAD_TOKEN

    names = ["negative", "neutral", "positive"]
    built, tokenizer, exported = export_classifier(tmp_path, [f"model={family}", "model.net.n_layers=2",
                                                              "model.net.context=32"], names)
    assert exported == (hf_class, [])
    # the folder's own tokenizer.json (AutoTokenizer would rebuild a Qwen2 folder's as Qwen2's byte-level BPE)
    tokenizer_fast = PreTrainedTokenizerFast.from_pretrained(tmp_path / "hf")
    classifier = pipeline("text-classification", model=str(tmp_path / "hf"), tokenizer=tokenizer_fast, device="cpu")
    assert classifier.model.config.id2label == dict(enumerate(names))
    assert classifier.model.config.pad_token_id == tokenizer.token_id(PAD_TOKEN[0])
    net = built.net.eval()
    predicted = classifier(SENTENCES)
    for sentence, theirs in zip(SENTENCES, predicted):
        ids, _ = encoded(tokenizer, sentence)
        probs = net(torch.tensor([ids])).softmax(-1)[0]
        assert theirs["label"] == names[int(probs.argmax())]
        assert theirs["score"] == pytest.approx(float(probs.max()), abs=1e-5)
    # batched with padding, the pipeline still reads each row's rightmost real token
    batched = classifier(SENTENCES, batch_size=4)
    assert [p["label"] for p in batched] == [p["label"] for p in predicted]
    assert [p["score"] for p in batched] == pytest.approx([p["score"] for p in predicted], abs=1e-5)


@pytest.mark.slow
def test_llama_classify_trec_trains_and_eval_reports_its_metrics(tmp_path):
    """python train.py model=llama task=classify data=trec on TREC-format files: the loss falls; python -m
    zoo eval reports accuracy, macro F1 and Matthews' correlation on TREC_10's questions."""
    import csv
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import run_train
    from test_downstream_data import write_trec

    write_trec(tmp_path / "data")
    run = tmp_path / "run"
    run_train(run, tmp_path / "data", "model=llama", "task=classify", "data=trec", "quick=true", "trainer.max_steps=30",
              "data.batch_size=4", "data.vocab_size=120", "trainer.log_every_n_steps=1", "model.net.n_layers=2")
    losses = [float(r["train/loss"]) for r in csv.DictReader(open(run / "metrics.csv")) if r.get("train/loss")]
    assert len(losses) >= 20 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5, losses
    root = str(Path(__file__).parents[1])
    env = dict(os.environ, ZOO_DATA_DIR=str(tmp_path / "data"), ZOO_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-m", "zoo", "eval", f"ckpt={run / 'checkpoints' / 'last.ckpt'}",
                          "data=trec", "data.batch_size=4", f"out={tmp_path / 'eval.json'}"], env=env,
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert {"acc", "f1", "mcc", "loss"} <= metrics.keys() and -1 <= metrics["mcc"] <= 1


@torch.no_grad()
def test_a_causal_lm_folder_gives_its_block_and_a_fresh_score(tmp_path):
    """model.init_from= a LlamaForCausalLM folder under task=classify: its Blocks are read (the hidden
    states are Hugging Face's), its LM head left out, the score starts from scratch with a warning."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    hf = randomise(LlamaForCausalLM(LlamaConfig(**SHAPE)).eval())
    hf.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match=r"has no \['head.proj.weight'\]: those start from scratch"):
        _, net = llama.pretrained(classify_net_cfg("llama", 3), str(tmp_path))
    ids, _, padding = pair_batch(PAD)
    ref = hf.model(input_ids=ids, attention_mask=padding.long()).last_hidden_state
    assert_matches(net.eval().hidden(ids, padding), ref, where=padding[..., None], what="Llama hidden states")


def test_a_decoder_whose_head_the_classifier_cannot_take_is_refused_in_one_line(tmp_path):
    """Gemma 2's conf sets its LM head's softcap after the task's head: refused at start-up naming both."""
    from zoo.cli.precheck import Refused, check

    with pytest.raises(Refused) as refused:
        check("train", "train", ["model=gemma2", "task=classify", "data=sst2", f"hydra.run.dir={tmp_path / 'run'}"])
    message = str(refused.value)
    assert "\n" not in message and all(name in message for name in ("task=classify", "model=gemma2",
                                                                     "net.head.softcap", "ClassifierHead")), message
    check("train", "train", ["model=qwen2", "task=classify", "data=sst2", f"hydra.run.dir={tmp_path / 'run'}"])
