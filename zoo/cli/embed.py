"""``zoo embed``: one vector per text or image from a zoo checkpoint or a Hugging Face folder:

    python -m zoo embed init_from=hf:sentence-transformers/all-MiniLM-L6-v2 'text=[a cat, a dog]' out=emb.json
    python -m zoo embed ckpt=outputs/train/<run>/checkpoints/last.ckpt 'image=[cat.png]' out=emb.json

writes ``{"embeddings": [[...], ...]}``, one row per input, in order. The vectors are the
network's hidden states (``features``: the head is not run), pooled. Text: the mean over the real
tokens, L2-normalised; images (ViT): the CLS vector. A sentence-transformers folder
(``modules.json``) is followed instead: its Transformer, its pooling, its ``Normalize`` and its
longest input (:mod:`zoo.models.sentence_transformers`). ``pooling=`` / ``normalize=`` override.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from torch import Tensor, nn

from zoo.convert.common import compose_config, convert_folder, read_config
from zoo.convert.hub import resolve
from zoo.convert.dinov2 import dinov2_shape
from zoo.convert.vit import from_timm, is_timm_dir, timm_from_dir, vit_shape
from zoo.data.images import load_image, to_tensor
from zoo.data.labelled import CLS, SEP
from zoo.data.tokenizers import HFTokenizer, first_token, tokenizer_from_state
from zoo.models import sentence_transformers
from zoo.models.pooling import Pooling
from zoo.nn.embedders import PatchEmbedder
from zoo.registry import name_of
from zoo.objectives.loading import load

# config.json's model_type -> the conf/model/ config whose converter (model.init_from) reads the folder
FOLDER_MODELS = {"bert": "bert", "gpt2": "gpt", "llama": "llama", "vit": "vit", "deit": "deit", "dinov2": "dinov2",
                 "dinov2_with_registers": "dinov2"}
# the image models' config.json -> their net's shape (the dims their data would give)
IMAGE_MODELS = {"vit": vit_shape, "deit": vit_shape, "dinov2": dinov2_shape, "dinov2_with_registers": dinov2_shape}
DEFAULTS = {"text": Pooling("mean", normalize=True), "image": Pooling("cls", normalize=False)}


@dataclass(frozen=True)
class Source:
    """What embedding needs of a checkpoint or folder."""

    net: nn.Module
    input: str  # "text" or "image": what its first tower reads
    pooling: Pooling  # the source's own, or the default for its input
    tokenizer: Any = None  # text: a zoo tokenizer (zoo.data.tokenizers)
    special_tokens: bool = False  # text: the folder tokenizer's own [CLS]/[SEP]-style tokens go around each text
    wrap: tuple[int, int] | None = None  # text: (first, last) ids put around each text (a zoo BERT's [CLS], [SEP])
    max_length: int | None = None  # text: the longest input in tokens
    pixel_mean: Any = 0.5  # images: the normalisation the network was trained with
    pixel_std: Any = 0.5


def _first_embedder(net: nn.Module) -> nn.Module:
    return next(iter(net.towers.values())).embedder


def _input_of(net: nn.Module, where: str) -> str:
    """``text`` or ``image``: what the net's first tower reads (any other input is refused)."""
    embedder = _first_embedder(net)
    if isinstance(embedder, PatchEmbedder):
        return "image"
    if hasattr(embedder, "tokens"):  # a token embedder, or LLaVA's (tokens and images)
        return "text"
    raise ValueError(f"{where}: its first tower reads {type(embedder).__name__} inputs; zoo embed reads text "
                     f"(token embedders) or images (a ViT's PatchEmbedder)")


def _context(net: nn.Module) -> int:
    """The most tokens the net's first tower takes."""
    embedder = _first_embedder(net)
    return getattr(embedder, "text", embedder).max_len


def from_checkpoint(path: str, device: str) -> Source:
    """A zoo checkpoint: its network, its tokenizer, its normalisation of pixels."""
    objective = load(path, device, command="zoo embed")
    net, hparams = objective.net, objective.hparams
    kind = _input_of(net, path)
    if kind == "image":
        return Source(net, kind, DEFAULTS[kind], pixel_mean=hparams.get("pixel_mean") or 0.5,
                      pixel_std=hparams.get("pixel_std") or 0.5)
    if hparams.tokenizer is None:
        raise ValueError(f"{path} stores no tokenizer: it was not trained on text")
    tokenizer = tokenizer_from_state(hparams.tokenizer)
    # a zoo BERT saw every sequence as [CLS] ... [SEP] (zoo.data.wikitext.pack), a task=embed run each
    # text so (zoo.data.labelled, <s> ... </s> with RoBERTa's tokenizer), pooled as the run pooled them
    trained = name_of(type(objective))
    wrap = tuple(tokenizer.token_id(first_token(tokenizer, names, role, path)) for names, role in
                 ((CLS, "classifier"), (SEP, "separator"))) if trained in ("mlm", "embedding") else None
    pooling = objective.pooling if trained == "embedding" else DEFAULTS[kind]
    return Source(net, kind, pooling, tokenizer, wrap=wrap, max_length=_context(net))


def net_from_folder(folder: Path) -> tuple[nn.Module, dict[str, Any]]:
    """(the zoo net of a Hugging Face folder, its config.json), built by the converter that
    ``model=<family> model.init_from=DIR`` uses, the family read from ``model_type``."""
    config = read_config(folder, FOLDER_MODELS, "zoo embed")
    kind = config["model_type"]
    if kind in IMAGE_MODELS:
        shape = IMAGE_MODELS[kind](config)
        dims = {"num_classes": shape["head.num_classes"], "image_size": shape["embedder.image_size"],
                "channels": shape["embedder.channels"]}
    else:
        dims = {"vocab_size": config["vocab_size"]}
    cfg = compose_config([f"model={FOLDER_MODELS[kind]}"])
    with open_dict(cfg):
        cfg.dims = dims
    net_cfg = OmegaConf.to_container(cfg.model.net, resolve=True)
    with warnings.catch_warnings():  # a BertModel folder has no MLM head: embeddings never run it
        warnings.filterwarnings("ignore", message=".*no MLM head")
        _, net = convert_folder(cfg.model.converter, net_cfg, str(folder))
    return net.eval(), config


def from_timm_folder(folder: Path, device: str) -> Source:
    """A timm-format folder (``timm:<name>``, a Hub ``timm/*`` repository): its ViT, normalised as
    its pretrained config says."""
    net = from_timm(timm_from_dir(folder)).to(device).eval()
    settings = json.loads((folder / "config.json").read_text()).get("pretrained_cfg") or {}
    return Source(net, "image", DEFAULTS["image"], pixel_mean=settings.get("mean", 0.5),
                  pixel_std=settings.get("std", 0.5))


def from_folder(source: str, device: str) -> Source:
    """A Hugging Face folder (or ``hf:<repo>``, ``timm:<name>``), a sentence-transformers one followed
    through its modules."""
    folder = Path(resolve(source))
    if not folder.is_dir():
        raise FileNotFoundError(f"init_from={source}: {folder} is not a folder")
    if is_timm_dir(folder):
        return from_timm_folder(folder, device)
    st = sentence_transformers.read(folder) if sentence_transformers.is_sentence_transformer(folder) else None
    net, config = net_from_folder(st.model_dir if st else folder)
    net = net.to(device)
    kind = _input_of(net, source)
    if kind == "image":
        processor = folder / "preprocessor_config.json"
        settings = json.loads(processor.read_text()) if processor.is_file() else {}
        normalise = settings.get("do_normalize", True)
        return Source(net, kind, DEFAULTS[kind], pixel_mean=settings.get("image_mean", 0.5) if normalise else 0.0,
                      pixel_std=settings.get("image_std", 0.5) if normalise else 1.0)
    tokenizer = HFTokenizer.from_pretrained_dir(st.model_dir if st else folder)
    if tokenizer.vocab_size != config["vocab_size"]:  # as training refuses it (zoo.convert.common.check_vocab)
        raise ValueError(f"the tokenizer of {source} has {tokenizer.vocab_size} tokens but its config.json has "
                         f"vocab_size={config['vocab_size']}: put the weights' own tokenizer beside them")
    width = _first_embedder(net).tokens.embedding_dim
    if st is not None and st.width not in (None, width):
        raise ValueError(f"{source}: its Pooling module expects word_embedding_dimension={st.width}, the "
                         f"Transformer gives {width}")
    max_length = _context(net) if st is None or st.max_length is None else min(_context(net), st.max_length)
    return Source(net, kind, st.pooling if st else DEFAULTS[kind], tokenizer, special_tokens=True,
                  max_length=max_length)


def token_rows(source: Source, texts: list[str]) -> list[list[int]]:
    """Each text's token ids as the source's network reads them, cut at its longest input."""
    if source.special_tokens:  # the folder's tokenizer places its own special tokens, and cuts around them
        raw = source.tokenizer.tokenizer
        raw.enable_truncation(source.max_length)
        encodings = raw.encode_batch(texts, add_special_tokens=True)
        cut = [i for i, e in enumerate(encodings) if e.overflowing]
        rows = [e.ids for e in encodings]
    else:
        first, last = ([source.wrap[0]], [source.wrap[1]]) if source.wrap else ([], [])
        room = source.max_length - len(first) - len(last)
        ids = [source.tokenizer.encode(text) for text in texts]
        cut = [i for i, row in enumerate(ids) if len(row) > room]
        rows = [first + row[:room] + last for row in ids]
    if cut:
        warnings.warn(f"texts {cut} are longer than the model's {source.max_length} tokens: cut there")
    empty = [i for i, row in enumerate(rows) if not row]
    if empty:
        raise ValueError(f"texts {empty} hold no token: there is nothing to embed")
    return rows


@torch.no_grad()
def embed_texts(source: Source, texts: list[str], pooling: Pooling, layer: int | None, device: str) -> Tensor:
    """texts -> (N, D): the pooled hidden states over each text's real tokens."""
    rows = token_rows(source, texts)
    width = max(map(len, rows))
    ids = torch.tensor([row + [0] * (width - len(row)) for row in rows], device=device)
    real = torch.tensor([[True] * len(row) + [False] * (width - len(row)) for row in rows], device=device)
    return pooling(source.net.features(ids, real, layer=layer), real)  # an encoder-decoder: its encoder's


@torch.no_grad()
def embed_images(source: Source, paths: list[str], pooling: Pooling, layer: int | None, device: str) -> Tensor:
    """image files -> (N, D): the CLS vector, or (``mean``) the mean of the patch vectors (the tokens
    before the patches left out)."""
    embedder = _first_embedder(source.net)
    images = torch.stack([to_tensor(load_image(p), embedder.image_size, mean=source.pixel_mean, std=source.pixel_std)
                          for p in paths]).to(device)
    states = source.net.features(images, layer=layer)
    real = torch.ones(states.shape[:2], dtype=torch.bool, device=device)
    if pooling.mode != "cls":
        real[:, : embedder.prefix_tokens] = False  # mean / max over the patches (timm's avg pooling)
    return pooling(states, real)


def _one_of(cfg: DictConfig, keys: tuple[str, str]) -> str:
    given = [key for key in keys if cfg.get(key) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {' or '.join(f'{k}=' for k in keys)} (got {given or 'none'})")
    return given[0]


def main(cfg: DictConfig) -> Tensor:
    """Write the embeddings of ``text`` or ``image`` (conf/embed.yaml) to ``out``; returns them (N, D)."""
    where, what = _one_of(cfg, ("ckpt", "init_from")), _one_of(cfg, ("text", "image"))
    inputs = list(cfg[what])
    if not inputs or not all(isinstance(x, str) for x in inputs):
        raise ValueError(f"{what}={inputs!r}: expected a non-empty list of {'texts' if what == 'text' else 'files'}")
    source = from_checkpoint(cfg.ckpt, cfg.device) if where == "ckpt" else from_folder(cfg.init_from, cfg.device)
    if source.input != what:
        raise ValueError(f"{cfg[where]} reads {source.input}s, but {what}= was given")
    chosen = {"mode": cfg.pooling, "normalize": cfg.normalize}
    pooling = replace(source.pooling, **{k: v for k, v in chosen.items() if v is not None})
    if pooling.mode == "cls" and what == "image" and _first_embedder(source.net).cls is None:
        raise ValueError(f"pooling=cls: {cfg[where]} has no CLS token; use pooling=mean")
    embed = embed_texts if what == "text" else embed_images
    vectors = embed(source, inputs, pooling, cfg.layer, cfg.device)
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"embeddings": vectors.cpu().tolist()}))
    print(f"wrote {len(inputs)} embeddings of {vectors.shape[1]} values to {out} ({pooling.mode} pooling"
          f"{', L2-normalised' if pooling.normalize else ''})")
    return vectors
