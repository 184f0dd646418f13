"""Hugging Face BERT (``BertForMaskedLM`` / ``BertModel``) -> zoo BERT: one short,
shape-checked mapping, and a loader for checkpoint directories.

Three ways in:

- :func:`from_transformers`: an in-memory ``BertForMaskedLM`` -> zoo BERT (the exactness test).
- :func:`load_checkpoint_dir`: a checkpoint directory (``config.json`` + ``model.safetensors``
  or ``pytorch_model.bin``) -> zoo BERT; the tokenizer next to it comes from
  :meth:`zoo.data.tokenizers.HFTokenizer.from_pretrained_dir`.
- :func:`pretrained`: the hook ``model.init_from=DIR`` calls (see ``Objective``): it turns a
  training run's net config into the checkpoint's shape and builds the net with its weights.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from zoo.convert.common import (ConfigKeys, build_net, check_keys, check_vocab, init_net, leave_out, load_mapped,
                               read_checkpoint_dir)
from zoo.convert.family import (REQUIRED, Family, config_only, copies, is_classifier, is_headless, is_span_head,
                               is_tagger, plain)

# Hugging Face ``hidden_act`` -> the zoo's activation names.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
HEAD_PREFIX = "head."
MODEL_TYPES = ("bert",)  # the config.json model_type values this converter reads
# BERT config key -> (zoo net path, its value when config.json omits it): the plain copies, both ways (BigBird's too)
KEYS = {"num_hidden_layers": ("n_layers", REQUIRED), "max_position_embeddings": ("context", REQUIRED),
        "hidden_size": ("block.d_model", REQUIRED), "num_attention_heads": ("block.n_heads", REQUIRED),
        "intermediate_size": ("block.d_ff", REQUIRED), "layer_norm_eps": ("block.norm_eps", 1e-12),
        "vocab_size": ("embedder.vocab_size", REQUIRED), "type_vocab_size": ("embedder.n_segments", 2)}


def activation(hf_config: dict[str, Any], key: str = "hidden_act") -> str:
    """The zoo's name of the config's activation at ``key``; one the zoo has not is refused."""
    act = hf_config.get(key, "gelu")
    if act not in ACTIVATIONS:
        raise ValueError(f"{key}={act!r} is not supported: expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[act]


def dependent(out: dict[str, Any], act: str) -> dict[str, Any]:
    """``out`` (a BERT-like family's plain copies: ``n_layers``, ``context``, ``block.d_model``,
    ``block.norm_eps``, ``embedder.vocab_size``, ...) and every key that follows from them, listed
    explicitly so that they apply to a resolved config too; ``act`` the zoo's activation."""
    eps = out["block.norm_eps"]
    return out | {
        "block.activation": act,
        "embedder.max_len": out["context"],
        "embedder.norm_eps": eps,
        "head.vocab_size": out["embedder.vocab_size"],
        "head.activation": act,
        "head.norm_eps": eps,
    }


# every BertConfig key: the plain copies, the activation and the kind of positions read; the
# dropouts ignored (the import's net is for eval; a fine-tuning run keeps its own), the classifier
# heads' too; the MLM decoder is the token table (tie_word_embeddings true)
CONFIG_KEYS = ConfigKeys(reads=frozenset(KEYS) | {"hidden_act", "position_embedding_type"},
                         ignores=frozenset({"hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"}),
                         fixed={"tie_word_embeddings": True})


def bert_shape(hf_config: dict[str, Any]) -> dict[str, Any]:
    """The values, keyed by their path under ``model.net``, that give ``model=bert`` the shape
    of a Hugging Face BERT ``config.json`` (every dependent key listed); a key BERT's converter
    does not implement is refused by name (:data:`CONFIG_KEYS`)."""
    check_keys(hf_config, CONFIG_KEYS)
    return encoder_shape(hf_config)


def encoder_shape(hf_config: dict[str, Any]) -> dict[str, Any]:
    """:func:`bert_shape` without the check of every key: the part BERT-like families (RoBERTa,
    BigBird) share, each with config keys of its own."""
    position_kind = hf_config.get("position_embedding_type", "absolute")
    if position_kind != "absolute":
        raise ValueError(f"position_embedding_type={position_kind!r}: only 'absolute' BERT positions are supported")
    return dependent(copies(hf_config, KEYS), activation(hf_config))


@dataclass(frozen=True)
class Layout:
    """Where a BERT-like checkpoint keeps each zoo weight (zoo name -> its Hugging Face name). Of
    a module's name both ``.weight`` and ``.bias`` are copied (those the checkpoint has)."""

    prefix: str  # of the encoder's weights: "bert."
    embedder: dict[str, str]  # zoo parameter -> Hugging Face parameter, under ``prefix``
    layer: str  # a layer's prefix, of its index: "encoder.layer.{}."
    blocks: dict[str, str]  # zoo module (under ``stack.blocks.i.``) -> Hugging Face module (under ``layer``)
    head: dict[str, str]  # zoo module (under ``head.``) -> Hugging Face module, the decoder's matrix tied
    head_bias: tuple[str, ...]  # where the decoder's bias may be, the first present (present: an MLM head)
    decoder: str  # the head's matrix, the token table's (tied): a state dict may hold the two once, under this name


BERT = Layout(
    prefix="bert.",
    embedder={"tokens.weight": "embeddings.word_embeddings.weight",
              "positions.weight": "embeddings.position_embeddings.weight",
              "segments.weight": "embeddings.token_type_embeddings.weight",
              "norm.weight": "embeddings.LayerNorm.weight", "norm.bias": "embeddings.LayerNorm.bias"},
    layer="encoder.layer.{}.",
    blocks={"attn.q": "attention.self.query", "attn.k": "attention.self.key", "attn.v": "attention.self.value",
            "attn.out": "attention.output.dense", "attn_norm": "attention.output.LayerNorm",
            "ffn.fc_in": "intermediate.dense", "ffn.fc_out": "output.dense", "ffn_norm": "output.LayerNorm"},
    head={"dense": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm"},
    head_bias=("cls.predictions.bias",), decoder="cls.predictions.decoder.weight")


def encoder_state_dict(hf: dict[str, Tensor], n_layers: int, layout: Layout) -> dict[str, Tensor]:
    """Rename a BERT-like checkpoint's weights to the zoo's by ``layout``. Weights the zoo has no
    counterpart for (BERT's pooler and next-sentence head) are left out. Without MLM head
    weights (a ``BertModel`` checkpoint) the result has no ``head.*`` entries."""
    sd = {k.removeprefix(layout.prefix).replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
          for k, v in hf.items()}  # old TF-converted checkpoints name LayerNorm weights gamma/beta
    # tied: XLM-R lists its head first, so the export's probe holds the table under the head's name
    if layout.embedder["tokens.weight"] not in sd and layout.decoder in sd:
        sd[layout.embedder["tokens.weight"]] = sd[layout.decoder]
    out = {"embedder." + zoo: sd[name] for zoo, name in layout.embedder.items()}

    def copy(hf_module: str, zoo_module: str) -> None:
        for part in (".weight", ".bias"):
            if hf_module + part in sd:
                out[zoo_module + part] = sd[hf_module + part]

    for i in range(n_layers):
        for zoo, name in layout.blocks.items():
            copy(layout.layer.format(i) + name, f"stack.blocks.{i}.{zoo}")
    bias = next((name for name in layout.head_bias if name in sd), None)
    if bias is not None:
        for zoo, name in layout.head.items():
            copy(name, HEAD_PREFIX + zoo)
        out |= {"head.decoder.weight": out["embedder.tokens.weight"], "head.decoder.bias": sd[bias]}  # tied
    return out


def bert_state_dict(hf: dict[str, Tensor], n_layers: int) -> dict[str, Tensor]:
    """Rename BERT's weights to the zoo's (:func:`encoder_state_dict` of :data:`BERT`)."""
    return encoder_state_dict(hf, n_layers, BERT)


def load_mlm(net: nn.Module, state: dict[str, Tensor], source: str) -> None:
    """load_mapped, keeping the net's fresh MLM head where the checkpoint has none (a checkpoint
    of the bare encoder: ``BertModel``, ``ModernBertModel``, ...)."""
    if not any(k.startswith(HEAD_PREFIX) for k in state):
        warnings.warn(f"{source} has no MLM head (an encoder-only checkpoint): the head starts from scratch")
        state = state | {k: v for k, v in net.state_dict().items() if k.startswith(HEAD_PREFIX)}
        state[HEAD_PREFIX + "decoder.weight"] = state["embedder.tokens.weight"]  # keep it tied
    load_mapped(net, state)


# task=classify: the zoo's ClassifierHead module -> the Hugging Face modules it may be read from, in
# BertForSequenceClassification (the pooler, dense + tanh on [CLS]; then the classifier; a bare
# BertModel's pooler has no prefix).
BERT_CLASSIFIER = {"dense": ("bert.pooler.dense", "pooler.dense"), "proj": ("classifier",)}
# task=tag: the token classifier (dropout, then ``classifier`` on every token), one name in
# BertForTokenClassification, RobertaForTokenClassification and DistilBertForTokenClassification.
TAGGER = {"proj": ("classifier",)}
def classifier_state(hf: dict[str, Tensor], encoder: dict[str, Tensor], places: dict[str, tuple[str, ...]],
                     num_classes: int) -> dict[str, Tensor]:
    """``encoder`` (a checkpoint's weights renamed to the zoo's) with its MLM head left out and the
    classifier head read from ``hf`` at ``places`` (zoo head module -> Hugging Face modules, the first
    present). A
    classifier of another number of labels is left out (it starts from scratch, as Hugging Face's
    ``ignore_mismatched_sizes``)."""
    state = leave_out(encoder, HEAD_PREFIX)
    for zoo, names in places.items():
        for part in (".weight", ".bias"):
            found = next((hf[name + part] for name in names if name + part in hf), None)
            if found is not None:
                state[f"{HEAD_PREFIX}{zoo}{part}"] = found
    proj = state.get(f"{HEAD_PREFIX}proj.weight")
    if proj is not None and proj.shape[0] != num_classes:
        warnings.warn(f"the checkpoint's classifier has {proj.shape[0]} labels, the data {num_classes}: the "
                      f"classifier starts from scratch")
        state = leave_out(state, f"{HEAD_PREFIX}proj.")
    return state


# task=qa: the zoo's SpanHead module -> the Hugging Face module it is read from, every encoder's
# *ForQuestionAnswering (qa_outputs: row 0 the start logits, row 1 the end logits)
QA_OUTPUTS = {"proj": ("qa_outputs",)}


def task_head(net_cfg: dict[str, Any], places: dict[str, tuple[str, ...]]) -> tuple[dict[str, tuple[str, ...]], int] | None:
    """Where a task's head is read from and its width: a classifier's at ``places`` (the family's
    sequence classifier) or :data:`TAGGER` (a token classifier), a span head's at :data:`QA_OUTPUTS`; None for the MLM head."""
    if is_classifier(net_cfg):
        return TAGGER if is_tagger(net_cfg) else places, net_cfg["head"]["num_classes"]
    return (QA_OUTPUTS, 2) if is_span_head(net_cfg) else None


def load_classifier(net: nn.Module, state: dict[str, Tensor], source: str) -> None:
    """load_mapped, keeping the net's fresh classifier weights where the checkpoint has none (an
    encoder or MLM checkpoint, or a classifier of another label set)."""
    fresh = {k: v for k, v in net.state_dict().items() if k.startswith(HEAD_PREFIX) and k not in state}
    if fresh:
        warnings.warn(f"{source} has no {sorted(fresh)}: those start from scratch")
    load_mapped(net, state | fresh)


def init_encoder(net_cfg: dict[str, Any], path: str, shape: dict[str, Any], encoder: dict[str, Tensor],
                 hf: dict[str, Tensor], places: dict[str, tuple[str, ...]]) -> tuple[dict[str, Any], nn.Module]:
    """An encoder family's ``model.init_from`` result (:func:`zoo.convert.common.init_net`): with its MLM
    head, under task=classify with its sequence classifier read from ``hf`` at ``places``, under
    task=tag with its token classifier (:data:`TAGGER`), under task=qa with its span head read from
    ``qa_outputs``, or under task=embed the encoder alone (a folder's MLM head left out)."""
    if is_headless(net_cfg):
        return init_net(net_cfg, without_head(shape), leave_out(encoder, HEAD_PREFIX))
    head = task_head(net_cfg, places)
    if head is not None:
        state = classifier_state(hf, encoder, *head)
        return init_net(net_cfg, without_head(shape), state, partial(load_classifier, source=path))
    return init_net(net_cfg, shape, encoder, partial(load_mlm, source=path))


def without_head(shape: dict[str, Any]) -> dict[str, Any]:
    """An encoder's import shape without the MLM head's keys (a classifier has its own)."""
    return {k: v for k, v in shape.items() if not k.startswith(HEAD_PREFIX)}


def classifier_family(base: Family, hf_class: str, places: dict[str, tuple[str, ...]],
                      shape: Callable[[dict[str, Any]], dict[str, Any]],
                      rename: Callable[[dict[str, Tensor], int], dict[str, Tensor]]) -> Family:
    """The export of an encoder family (``base``, its MLM class) under task=classify: ``hf_class`` (its
    ``*ForSequenceClassification``; under task=tag its ``*ForTokenClassification``), its config's
    ``num_labels`` the head's width, its head read at ``places``; ``shape`` and ``rename`` are the
    family's import shape and weight renaming."""
    def classifier_shape(config: dict[str, Any], net: dict[str, Any]) -> dict[str, Any]:
        labels = config.get("num_labels") or len(config["id2label"])  # a saved config.json keeps id2label only
        return without_head(shape(config)) | {"head.num_classes": labels}

    def state_dict(hf: dict[str, Tensor], net: dict[str, Any]) -> dict[str, Tensor]:
        return classifier_state(hf, rename(hf, net["n_layers"]), places, net["head"]["num_classes"])

    return replace(base, hf_class=hf_class, keys=base.keys | {"num_labels": "head.num_classes"}, shape=classifier_shape,
                   state_dict=state_dict, marks_checkpoints=False, classifier=None, question_answering=None,
                   tagger=None)


def span_outputs(hf: nn.Module, x: Tensor) -> Tensor:
    """(B, T, 2): a ``*ForQuestionAnswering``'s start and end logits, as the zoo's span head gives them."""
    out = hf(x)
    return torch.stack([out.start_logits, out.end_logits], -1)


def with_token_types(folder: Path) -> None:
    """The saved tokenizer folder ``folder`` made to return ``token_type_ids`` too (a pair's second
    text 1), which BERT reads as the zoo's segment ids: without them a context reads as a question."""
    file = folder / "tokenizer_config.json"
    config = json.loads(file.read_text())
    config["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    file.write_text(json.dumps(config, indent=1))


def question_answering_family(base: Family, hf_class: str, shape: Callable[[dict[str, Any]], dict[str, Any]],
                              rename: Callable[[dict[str, Tensor], int], dict[str, Tensor]],
                              token_types: bool = False) -> Family:
    """The export of an encoder family (``base``) under task=qa: ``hf_class`` (its
    ``*ForQuestionAnswering``), the span head read from ``qa_outputs``; ``shape`` and ``rename`` are
    the family's import shape and weight renaming; ``token_types``: its tokenizer folder returns
    them (BERT's question and context segments)."""
    def state_dict(hf: dict[str, Tensor], net: dict[str, Any]) -> dict[str, Tensor]:
        return classifier_state(hf, rename(hf, net["n_layers"]), QA_OUTPUTS, 2)

    return replace(base, hf_class=hf_class, shape=lambda config, net: without_head(shape(config)),
                   state_dict=state_dict, outputs=span_outputs, marks_checkpoints=False, classifier=None,
                   question_answering=None, tokenizer_files=with_token_types if token_types else base.tokenizer_files)


def last_hidden_state(hf: nn.Module, x: Tensor) -> Tensor:
    """(B, T, D): a bare Hugging Face encoder's outputs on the input ids ``x``."""
    return hf(x).last_hidden_state


def encoder_family(base: Family, hf_class: str, shape: Callable[[dict[str, Any]], dict[str, Any]],
                   rename: Callable[[dict[str, Tensor], int], dict[str, Tensor]]) -> Family:
    """The export of an encoder family (``base``, its MLM class) under task=embed: ``hf_class`` (its bare
    encoder, ``*Model``), checked on its last hidden state; ``shape`` and ``rename`` are the family's
    import shape and weight renaming (a bare encoder's weights have no MLM head)."""
    return replace(base, hf_class=hf_class, shape=lambda config, net: without_head(shape(config)),
                   state_dict=lambda hf, net: rename(hf, net["n_layers"]), outputs=last_hidden_state,
                   marks_checkpoints=False, classifier=None, encoder=None)


@torch.no_grad()
def from_transformers(hf_model) -> nn.Module:
    """A zoo BERT (built from conf/model/bert.yaml) holding ``hf_model``'s weights."""
    cfg = hf_model.config.to_dict()
    return _from_config_and_state(cfg, hf_model.state_dict(), type(hf_model).__name__)


def _from_config_and_state(config: dict[str, Any], state: dict[str, Tensor], source: str) -> nn.Module:
    """The checkpoint's shape and also its dropout, so that the zoo BERT trains as the original does."""
    shape = bert_shape(config)
    dropout = {"block.dropout": config.get("hidden_dropout_prob", 0.1),
               "block.attn_dropout": config.get("attention_probs_dropout_prob", 0.1)}
    overrides = [f"model.net.{k}={v}" for k, v in (shape | dropout).items()]
    net = build_net("bert", overrides, {"vocab_size": config["vocab_size"]})
    load_mlm(net, bert_state_dict(state, shape["n_layers"]), source)
    return net.eval()


@torch.no_grad()
def load_checkpoint_dir(path: str | Path) -> nn.Module:
    """The zoo BERT of a Hugging Face BERT checkpoint directory, in eval mode."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    return _from_config_and_state(config, state, str(path))


def pretrained(net_cfg: dict[str, Any], path: str) -> tuple[dict[str, Any], nn.Module]:
    """``model.init_from`` hook: (``net_cfg`` reshaped to the checkpoint at ``path``, the net
    built from it holding the checkpoint's weights). The data's vocabulary must be the checkpoint's."""
    config, state = read_checkpoint_dir(path, MODEL_TYPES)
    shape = bert_shape(config)
    check_vocab(net_cfg, "embedder.vocab_size", shape["embedder.vocab_size"], path)
    return init_encoder(net_cfg, path, shape, bert_state_dict(state, shape["n_layers"]), state, BERT_CLASSIFIER)


# written by the export, not read by the import (a fine-tuning run keeps its own dropout)
DROPOUT_KEYS = {"hidden_dropout_prob": "block.dropout", "attention_probs_dropout_prob": "block.attn_dropout"}
FAMILY = Family(hf_class="BertForMaskedLM", config_class="BertConfig", keys=plain(KEYS) | DROPOUT_KEYS,
                activations=ACTIVATIONS, activation_key="hidden_act", shape=config_only(bert_shape),
                state_dict=lambda sd, net: bert_state_dict(sd, net["n_layers"]),
                classifier="BertForSequenceClassification", encoder="BertModel",
                question_answering="BertForQuestionAnswering", tagger="BertForTokenClassification")
