"""task=classify over ModernBERT: its head (the [CLS] vector or the real tokens' mean -> dense with no
bias, GELU, LayerNorm -> classifier), exact against ModernBertForSequenceClassification read from its
folder, and exported as that class, whose text-classification pipeline gives the zoo's predictions."""

from __future__ import annotations

import pytest
import torch
import transformers

from exactness import assert_matches, randomise
from test_task_classify import SENTENCES, VOCAB, classify_net_cfg, encoded, export_classifier, pair_batch
from zoo.config import compose_config
from zoo.convert import modernbert


def tiny(num_labels: int, pooling: str) -> torch.nn.Module:
    config = transformers.ModernBertConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        max_position_embeddings=32, local_attention=8, global_attn_every_n_layers=3, pad_token_id=0,
        attn_implementation="sdpa", num_labels=num_labels, classifier_pooling=pooling)
    return randomise(transformers.ModernBertForSequenceClassification(config).eval())


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("num_labels", [3, 1])
@torch.no_grad()
def test_init_from_a_modernbert_sequence_classification_folder_is_exact(tmp_path, pooling, num_labels):
    """model.init_from= a saved ModernBertForSequenceClassification reads its head and pooling: the zoo's
    logits are Hugging Face's (randomised weights, padding, odd lengths 17, 11, 6; a window that cuts)."""
    torch.manual_seed(0)
    hf = tiny(num_labels, pooling)
    hf.save_pretrained(tmp_path)
    net_cfg, net = modernbert.pretrained(classify_net_cfg("modernbert", num_labels), str(tmp_path))
    assert net_cfg["head"]["pool"] == pooling and net.head.dense.bias is None
    ids, _, padding = pair_batch(0)
    ref = hf(input_ids=ids, attention_mask=padding.long()).logits
    assert_matches(net.eval()(ids, key_padding=padding), ref, what=f"ModernBERT {pooling} classifier logits")


@torch.no_grad()
def test_the_modernbert_head_order_and_mean_over_real_tokens_matter(tmp_path):
    """A mean that counts the padding, or the head's norm left out, is not Hugging Face's."""
    torch.manual_seed(0)
    hf = tiny(3, "mean")
    hf.save_pretrained(tmp_path)
    _, net = modernbert.pretrained(classify_net_cfg("modernbert", 3), str(tmp_path))
    ids, _, padding = pair_batch(0)
    ref = hf(input_ids=ids, attention_mask=padding.long()).logits
    hidden = net.eval().hidden(ids, padding)
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches(net.head(hidden), ref)  # no padding handed: the mean counts the pad tokens
    net.head.pooler_norm = None
    with pytest.raises(AssertionError, match="differs from the reference"):
        assert_matches(net(ids, key_padding=padding), ref)


def test_task_classify_gives_modernbert_its_own_head():
    head = compose_config(["model=modernbert", "task=classify"]).model.net.head
    assert (head.pool, head.pooler, head.pooler_bias, head.norm_bias, head.dropout) == ("cls", "gelu", False, False, 0.0)
    assert compose_config(["model=bert", "task=classify"]).model.net.head.pooler == "tanh"  # BERT's unchanged


@pytest.mark.parametrize("pool", ["cls", "mean"])
@torch.no_grad()
def test_export_writes_modernbert_sequence_classification_that_the_pipeline_runs(tmp_path, pool):
    """zoo export: ModernBertForSequenceClassification with id2label and classifier_pooling, whose
    text-classification pipeline gives the zoo's labels and scores."""
    from transformers import PreTrainedTokenizerFast, pipeline

    names = ["negative", "neutral", "positive"]
    built, tokenizer, exported = export_classifier(tmp_path, ["model=modernbert", "model.net.n_layers=3",
                                                              "model.net.context=32", f"model.net.head.pool={pool}"], names)
    assert exported == ("ModernBertForSequenceClassification", [])
    tokenizer_fast = PreTrainedTokenizerFast.from_pretrained(tmp_path / "hf")  # the folder's own tokenizer.json
    classifier = pipeline("text-classification", model=str(tmp_path / "hf"), tokenizer=tokenizer_fast, device="cpu")
    assert classifier.model.config.id2label == dict(enumerate(names))
    assert classifier.model.config.classifier_pooling == pool
    net = built.net.eval()
    for sentence, theirs in zip(SENTENCES, classifier(SENTENCES)):
        ids, _ = encoded(tokenizer, sentence)
        probs = net(torch.tensor([ids])).softmax(-1)[0]
        assert theirs["label"] == names[int(probs.argmax())]
        assert theirs["score"] == pytest.approx(float(probs.max()), abs=1e-5)
