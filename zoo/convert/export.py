"""A zoo network back to a Hugging Face folder that ``transformers`` loads (``from_pretrained``).

No converter is written twice. Each family's import mapping (``zoo/convert/<family>.py``:
Hugging Face names -> zoo names, with splits, transposes and renames) only moves numbers, so it
is run once on a *probe*: a Hugging Face state dict whose every element holds its own index.
What comes out tells, for each zoo weight, which Hugging Face elements it was read from; the
export writes the zoo's values back there. The Hugging Face config comes from the zoo net's
config through each family's table of (Hugging Face key, zoo key), declared with everything
else the export needs in its converter module (``FAMILY``, :mod:`zoo.convert.family`), and is checked by the
family's own import shape (every value the import would set must be the net's). Last, the
exported model must give the zoo net's outputs on an example input, or nothing is written: a
zoo net that uses something the Hugging Face class cannot express is refused, with the
difference. An encoder-decoder's (T5, Whisper) or LLaVA's example is a tuple of inputs.

A checkpoint's ``model.converter`` names its family. A ViTDet checkpoint's does not name
``VitDetModel``: that is the backbone, and a zoo ViTDet is a classifier (a headless one is exported
by naming the class, ``hf_class``). A net no ``transformers`` class holds (the original
Transformer, a ViTDet classifier) is written in the zoo's own format instead: ``model.safetensors``
and its net config (:func:`write_zoo`, :func:`read_zoo`).
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor, nn

from zoo.convert.families import by_class, by_converter
from zoo.convert.family import Family, at, is_classifier, is_headless, is_span_head, is_tagger
from zoo.nn.parts import with_dims
from zoo.nn.tower import without_unread

FAMILIES: dict[str, Family] = by_class()  # by transformers class, each declared in its converter module
BY_CONVERTER: dict[str, str] = by_converter()  # model.converter -> class


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """Config keys, dotted into sub-configs (``text_config.hidden_size``), as nested dicts."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return out


def _head_size(net: dict[str, Any]) -> dict[str, Any]:
    """``net`` with its Block's ``head_dim`` stated (None means d_model / heads: T5's ``d_kv``
    needs the number)."""
    block = net.get("block")
    if block is None or block.get("head_dim") is not None:
        return net
    return net | {"block": block | {"head_dim": block["d_model"] // block["n_heads"]}}


def hf_config(family: Family, net: dict[str, Any], settings: dict[str, Any] | None = None):
    """The Hugging Face config of the zoo net config ``net`` (with the run's own ``settings``,
    e.g. ``{"eos_token_id": 2}``), checked against the import's shape."""
    import transformers

    net = with_dims(_head_size(net))  # the widths and dropout the containers hand their parts, stated
    values = {key: at(net, path) for key, path in family.keys.items()}
    if family.activation_key is not None:
        act = at(net, "block.activation")
        names = [hf for hf, zoo in family.activations.items() if zoo == act]
        if not names:
            raise ValueError(f"block.activation={act!r} has no {family.hf_class} equivalent "
                             f"(it has {sorted(set(family.activations.values()))})")
        values[family.activation_key] = names[0]
    # a special id the run has none of (None) leaves the net's own (RoBERTa's padding row is in the net)
    own = {k: v for k, v in (settings or {}).items() if v is not None or k not in values}
    config = getattr(transformers, family.config_class)(**_nested(values | family.extra(net) | own))
    shape = family.shape(config.to_dict(), net)
    differ = {k: (v, at(net, k)) for k, v in shape.items() if at(net, k) != v}
    if differ:
        raise ValueError(f"{family.hf_class} cannot express this net: (Hugging Face, zoo) values differ: {differ}")
    return config


def _unique(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """``state`` with the keys of tied weights (one storage under two names) kept once."""
    seen, out = set(), {}
    for key, value in state.items():
        if value.data_ptr() not in seen:
            seen.add(value.data_ptr())
            out[key] = value
    return out


def places(net: nn.Module, net_cfg: dict[str, Any], family: Family,
           hf: nn.Module) -> tuple[dict[str, Tensor], list[int], dict[str, Tensor]]:
    """Where each zoo weight goes in ``hf``: (``hf``'s weights, tied ones once; their offsets in
    the weights laid end to end; zoo weight name -> the indices, in that flat, of the elements
    it is read from, in its own shape). The import mapping runs on a probe: every element of the
    Hugging Face weights holds its own index (exact in float64)."""
    target = _unique(hf.state_dict())
    sizes = [v.numel() for v in target.values()]
    offsets = torch.tensor([0, *sizes]).cumsum(0).tolist()
    probe = {k: torch.arange(offsets[i], offsets[i + 1], dtype=torch.float64).view(v.shape)
             for i, (k, v) in enumerate(target.items())}
    # Weights of layers the zoo net does not build (a vision tower's layers after the one it reads)
    # stay at their initialisation: they do not change the outputs.
    return target, offsets, without_unread(net, family.state_dict(probe, net_cfg))


@torch.no_grad()
def to_hf(net: nn.Module, net_cfg: dict[str, Any], hf_class: str,
          settings: dict[str, Any] | None = None) -> tuple[nn.Module, list[str]]:
    """(a ``transformers`` ``hf_class`` model in eval mode holding ``net``'s weights, checked on an
    example; the names of its weights the zoo net has no counterpart for, left at their
    initialisation, e.g. BERT's pooler). ``settings``: the run's own config keys (special ids, labels)."""
    import transformers

    if hf_class not in FAMILIES:
        raise ValueError(f"no export to {hf_class!r}: export writes {sorted(FAMILIES)}")
    family = FAMILIES[hf_class]
    hf = getattr(transformers, family.hf_class)(hf_config(family, net_cfg, settings)).eval()
    family.prepare(hf, net_cfg)
    target, offsets, where = places(net, net_cfg, family, hf)
    flat = torch.cat([v.detach().flatten().to(torch.float64) for v in target.values()])
    written = torch.zeros_like(flat, dtype=torch.bool)
    own = net.state_dict()
    for name, index in where.items():
        index = index.flatten()
        if name not in own:
            raise ValueError(f"{family.hf_class} holds {name}, a weight this net does not have: the net is built "
                             f"otherwise than {family.hf_class} (its positions, norms or layers); {ZOO_FORMAT_HINT}")
        if index.numel() != own[name].numel() or not torch.equal(index, index.round()):
            raise ValueError(f"{family.hf_class}: the import's mapping of {name} is not a move of weights")
        flat[index.long()] = own[name].flatten().to(torch.float64)
        written[index.long()] = True
    missing = sorted(set(own) - set(where) - set(family.computed)
                     - {k for k in own if k.endswith(("rope.cos", "rope.sin"))})
    if missing:
        raise ValueError(f"{family.hf_class} has no place for the zoo weights {missing}")
    state = {k: flat[offsets[i]: offsets[i + 1]].view(v.shape).to(v.dtype) for i, (k, v) in enumerate(target.items())}
    hf.load_state_dict(state, strict=False)
    untouched = [k for i, k in enumerate(target) if not written[offsets[i]: offsets[i + 1]].any()]
    x = family.example(net_cfg)
    ours = family.ours(net.eval(), x)
    theirs = family.outputs(hf, x)
    if not torch.isfinite(ours).all():
        bad = sorted(k for k, v in own.items() if v.is_floating_point() and not torch.isfinite(v).all())
        raise ValueError(f"the zoo net's outputs are not finite (NaN or inf), nothing to export: its non-finite "
                         f"weights are {bad or 'none (the overflow is in the computation)'}")
    diff = (ours - theirs).abs().max().item()
    if not diff <= 1e-4 * (1 + theirs.abs().max().item()):  # a NaN difference fails too
        raise ValueError(f"the exported {family.hf_class} gives outputs {diff:.3g} away from the zoo net's: the net "
                         f"uses something {family.hf_class} does not express (a mask, a position); {ZOO_FORMAT_HINT}")
    return hf, untouched


ZOO_CONFIG = "zoo_config.json"  # the net config beside the weights of a zoo-format export
ZOO_FORMAT = "zoo"  # hf_class=zoo: the zoo's own format, whatever class the checkpoint's converter names
ZOO_FORMAT_HINT = f"hf_class={ZOO_FORMAT} writes it in the zoo's own format"
ADAPTER_DIR = "adapter"  # an unmerged LoRA run's peft adapter folder, inside the export of its base


def _write_adapters(net: nn.Module, hparams: dict[str, Any], family: Family, hf: nn.Module,
                    adapted: tuple[Any, Tensor, dict[str, Any]], folder: Path, base: Path) -> None:
    """The LoRA adapters ``adapted`` took out of ``net`` (its example input, the adapted net's
    outputs on it, the adapters) as a peft folder against ``hf``, the exported base at ``base``:
    checked like the export itself, the adapted Hugging Face model giving the adapted zoo net's
    outputs, or nothing is written."""
    from zoo.convert import adapters

    x, expected, taken = adapted
    target, offsets, where = places(net, hparams.net, family, hf)

    def check(model: nn.Module) -> None:
        theirs = family.outputs(model, x)
        diff = (expected - theirs).abs().max().item()
        if not diff <= 1e-4 * (1 + theirs.abs().max().item()):
            raise ValueError(f"the exported LoRA adapters give outputs {diff:.3g} away from the zoo net's")

    adapters.write(adapters.hf_adapters(taken, hf, target, offsets, where), hf, folder, base,
                   hparams.lora.get("dropout", 0.0), check)


def write_zoo(net: nn.Module, net_cfg: dict[str, Any], out: Path) -> None:
    """The zoo's own format, for a net no ``transformers`` class holds: ``model.safetensors`` (its
    state dict, tied weights stored once) and ``zoo_config.json`` (its resolved net config)."""
    from safetensors.torch import save_model

    out.mkdir(parents=True, exist_ok=True)
    save_model(net, str(out / "model.safetensors"))
    (out / ZOO_CONFIG).write_text(json.dumps(net_cfg, indent=1))


def read_zoo(folder: str | Path) -> nn.Module:
    """The net a :func:`write_zoo` folder holds, in eval mode. Its config is refused if it names
    a class outside :mod:`zoo.registry` (it is a user's file), before anything is built."""
    import hydra
    from safetensors.torch import load_model

    from zoo.checkpoint import check_names

    folder = Path(folder)
    for name in (ZOO_CONFIG, "model.safetensors"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder / name} is missing: {folder} is not a zoo export folder")
    net_cfg = json.loads((folder / ZOO_CONFIG).read_text())
    check_names({"hyper_parameters": {"net": net_cfg}}, folder / ZOO_CONFIG)
    net = hydra.utils.instantiate(net_cfg)
    load_model(net, str(folder / "model.safetensors"))
    return net.eval()


def _chat_template(prompt: str) -> str:
    """A chat template that renders a user's message as the zoo's ``prompt`` (``{question}`` the
    message's text; an image in the message is the prompt's own ``<image>``)."""
    before, _, after = prompt.partition("{question}")
    text = "{% for message in messages %}{% if message['content'] is string %}{{ message['content'] }}" \
           "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}" \
           "{% endif %}{% endfor %}{% endif %}{% endfor %}"
    return f"{{{{ {json.dumps(before)} }}}}{text}{{{{ {json.dumps(after)} }}}}"


def _run_settings(family: Family, hparams: dict[str, Any], ids: dict[str, int]) -> dict[str, Any]:
    """The Hugging Face config keys of the run itself: its special token ids (``ids``: role ->
    id; a role the run has none for is None, not the Hugging Face family's default, which
    belongs to another vocabulary), an encoder-decoder's start token, and the data's class
    names as ``id2label`` / ``label2id``."""
    out: dict[str, Any] = {}
    if hparams.get("tokenizer") or ids:  # a text model
        out = {f"{family.ids_prefix}{role}_token_id": ids.get(role) for role in ("pad", "bos", "eos")}
        if "n_decoder_layers" in hparams["net"] and ids.get("bos") is not None:
            out["decoder_start_token_id"] = ids["bos"]
    names = hparams.get("class_names")
    if names:
        out |= {"id2label": dict(enumerate(names)), "label2id": {name: i for i, name in enumerate(names)}}
    if hparams.get("multi_label"):  # the pipeline's sigmoid, and BCE if it is trained further
        out["problem_type"] = "multi_label_classification"
    return out


def classifier_class(hf_class: str | None, net: dict[str, Any]) -> str | None:
    """``hf_class``, or its family's sequence-classification class where the net's head is a classifier
    (a ``task=classify`` run of BERT: ``BertForSequenceClassification``), its token-classification
    class where the head classifies every token (``task=tag``: ``BertForTokenClassification``), its
    question-answering class where it is a span head (``task=qa``: ``BertForQuestionAnswering``), or
    its bare encoder where the net has no head (``task=embed``: ``BertModel``)."""
    family = FAMILIES.get(hf_class) if hf_class else None
    if family is not None and is_classifier(net):
        return (family.tagger if is_tagger(net) else family.classifier) or hf_class
    if family is not None and family.question_answering and is_span_head(net):
        return family.question_answering
    if family is not None and family.encoder and is_headless(net):
        return family.encoder
    return hf_class


def _empty_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that is a file, or a folder holding anything, unless ``overwrite``."""
    if out.is_file() or out.is_symlink():
        raise FileExistsError(f"out={out} is a file: give a folder to write the export into")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"out={out} already holds files: give an empty or new folder, or overwrite=true "
                              f"to replace its contents")


@contextmanager
def _as_its_class(ckpt: str | Path, hparams: dict[str, Any], hf_class: str, named: bool) -> Iterator[None]:
    """What stops turning a checkpoint's net into ``hf_class`` (renumbering its ids, :func:`to_hf`)
    is refused in one line naming ``ckpt`` and where the class came from (its ``model.converter``,
    or ``hf_class=``: ``named``). A net of another family (a converter edited to another family's)
    fails deep in building the class's config (a ``TypeError``, ``KeyError``): said as such, rather
    than with that error alone."""
    try:
        yield
    except Exception as err:
        given = "hf_class=" if named else f"its model.converter={hparams.get('converter')}"
        why = str(err) if isinstance(err, ValueError) else \
            f"its net is not one ({type(err).__name__}: {' '.join(str(err).split())})"
        raise ValueError(f"{ckpt}: {given} names {hf_class}; {why}") from err


@contextmanager
def _written_whole(out: Path) -> Iterator[Path]:
    """A new folder beside ``out`` to write the export into, put in ``out``'s place when the block
    ends (:func:`_put_in_place`). Any failure removes it and leaves ``out`` as it was; the
    system's own write errors (a read-only folder, a full disk: an ``OSError`` with an errno, or
    safetensors' error wrapping one) are refused in one line naming ``out`` and the cause."""
    from safetensors import SafetensorError

    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        shutil.rmtree(partial, ignore_errors=True)  # left by a killed export of this process id
        partial.mkdir(parents=True)
        yield partial
        _put_in_place(partial, out)
    except (OSError, SafetensorError) as err:
        if isinstance(err, OSError) and err.errno is None:
            raise  # the zoo's own refusals (FileNotFoundError("...")), not the system's
        cause = err.strerror if isinstance(err, OSError) and err.strerror else " ".join(str(err).split())
        raise OSError(f"cannot write the export to {out}: {cause}; {out} is left as it was") from err
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _put_in_place(partial: Path, out: Path) -> None:
    """``partial`` renamed to ``out``; an earlier ``out`` (empty, or ``overwrite``) is moved aside
    first and removed after, so that ``out`` is at every moment the earlier folder or the new one."""
    if not out.exists():
        partial.rename(out)
        return
    aside = out.with_name(f".{out.name}.earlier-{os.getpid()}")
    out.rename(aside)
    try:
        partial.rename(out)
    except OSError:
        aside.rename(out)
        raise
    shutil.rmtree(aside)


def export(ckpt: str | Path, out: str | Path, merge_lora: bool = True, hf_class: str | None = None,
           overwrite: bool = False, sentence_transformer: str | Path | None = None) -> tuple[str | None, list[str]]:
    """Write the zoo checkpoint ``ckpt`` as a Hugging Face folder ``out``: ``config.json`` and
    ``generation_config.json`` (the run's own special ids and class names), ``model.safetensors``,
    a tokenizer folder for the run's tokenizer (:func:`zoo.data.tokenizers.save_folder`) and the
    processor its client reads inputs with (images, video, LLaVA's processor and chat template).
    The ``transformers`` class is the one of the checkpoint's ``model.converter``, or ``hf_class``
    (``VitDetModel`` for a headless ViTDet; GPT-Neo and YOLOS checkpoints written before their
    converters name none); a net with neither (the original Transformer, a ViTDet classifier) is
    written in the zoo's format instead (:func:`write_zoo`). Token ids the class reads as something
    else than the run did are renumbered first, weights and tokenizer alike (``FAMILY.renumber``:
    CLIP's end of text at id 2, which its text model reads as "pool at the largest id"). LoRA adapters (a run
    with ``model.lora``) are merged into the weights first; without ``merge_lora`` the folder
    holds the base and, in ``adapter/``, a peft adapter folder named for the Hugging Face
    model's modules (:mod:`zoo.convert.adapters`). A non-empty ``out`` is refused unless ``overwrite``; the folder is
    written beside it and put in its place whole, so an overwritten ``out`` holds no file of
    before and a failed export leaves it as it was. A BERT fine-tuned from a sentence-transformers
    folder is written back as one with ``sentence_transformer`` (that folder, or ``hf:<repo>``):
    :func:`zoo.models.sentence_transformers.write`. ``hf_class="zoo"`` writes the zoo's own format
    (a net its converter's class does not express: a GPT with ALiBi or a window). Returns (the class
    written, None for the zoo's format; the names of its weights the zoo net has no counterpart for)."""
    from lightning.fabric.utilities.data import AttributeDict

    from zoo.convert.hub import resolve
    from zoo.data.tokenizers import backend, role_tokens, save_folder
    from zoo.models import sentence_transformers
    from zoo.models.pooling import Pooling
    from zoo.nn import lora
    from zoo.data.pretrained import tokenizer_of
    from zoo.objectives.loading import load

    out = Path(out)
    _empty_out(out, overwrite)
    origin = Path(resolve(sentence_transformer)) if sentence_transformer else None
    if origin is not None and not sentence_transformers.is_sentence_transformer(origin):
        raise FileNotFoundError(f"sentence_transformer={sentence_transformer}: {origin} holds no "
                                f"{sentence_transformers.MODULES_FILE}, it is not a sentence-transformers folder")
    objective = load(ckpt)
    net, hparams = objective.net, objective.hparams
    named = hf_class is not None
    hf_class = None if hf_class == ZOO_FORMAT else \
        hf_class or classifier_class(BY_CONVERTER.get(hparams.get("converter")), hparams.net)
    tokenizer = tokenizer_of(ckpt) if hparams.get("tokenizer") else None
    if hf_class in FAMILIES:  # token ids the Hugging Face class reads otherwise than the run, renumbered first
        with _as_its_class(ckpt, hparams, hf_class, named):
            net, net_cfg, tokenizer = FAMILIES[hf_class].renumber(net, hparams.net, tokenizer)
        hparams = AttributeDict({**hparams, "net": net_cfg})
    adapted = None  # without merge_lora: (the example, the adapted net's outputs on it, its adapters)
    if hparams.get("lora") and merge_lora:
        net = lora.merge(net)
    elif hparams.get("lora"):
        if hf_class not in FAMILIES:
            raise ValueError(f"{ckpt} holds LoRA adapters of a net no transformers class holds: export them merged "
                             f"(merge_lora=true)")
        x = FAMILIES[hf_class].example(hparams.net)
        expected = FAMILIES[hf_class].ours(net.eval(), x)
        net, taken = lora.unload(net)
        adapted = (x, expected, taken)
    if origin is not None and hf_class != "BertForMaskedLM":
        raise ValueError(f"sentence_transformer= writes a BERT's sentence-transformers folder; {ckpt} is a "
                         f"{hf_class or 'zoo-format'} export")
    own = {role: hparams.get(f"{role}_id") for role in ("pad", "bos", "eos", "mask")}
    roles = role_tokens(tokenizer, own) if tokenizer is not None else {}
    ids = {role: i for role, i in own.items() if i is not None} | {
        role: backend(tokenizer).token_to_id(token) for role, token in roles.items()}
    with _written_whole(out) as partial:
        if hf_class is None:
            write_zoo(net, hparams.net, partial)
            untouched = []
        else:
            family = FAMILIES[hf_class] if hf_class in FAMILIES else None
            settings = _run_settings(family, hparams, ids) if family else {}
            with _as_its_class(ckpt, hparams, hf_class, named):
                hf, untouched = to_hf(net, hparams.net, hf_class, settings)
            if hf.can_generate():  # built from the family's defaults: the run's own ids (or none)
                for key in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
                    setattr(hf.generation_config, key, settings.get(f"{family.ids_prefix}{key}",
                                                                    getattr(hf.generation_config, key, None)))
                # the run's own decoding length (a seq2seq run's), not the family's default (Whisper's 448)
                hf.generation_config.max_new_tokens = (hparams.get("decoding") or {}).get("max_new_tokens")
            hf.save_pretrained(partial)
            for name, config in family.processors(hparams.net, hparams).items():
                (partial / name).write_text(json.dumps(config, indent=1))
            if adapted is not None:
                _write_adapters(net, hparams, family, hf, adapted, partial / ADAPTER_DIR, out.resolve())
        if tokenizer is not None:
            prompt = hparams.get("prompt")
            chat = hf_class is not None and FAMILIES[hf_class].chat_template and prompt
            save_folder(tokenizer, partial, roles, hparams.net.get("context"), _chat_template(prompt) if chat else None)
            if hf_class is not None:
                FAMILIES[hf_class].tokenizer_files(partial)
        if hparams.get("pooling") and hf_class is not None:  # a task=embed run: a sentence-transformers folder
            pooling = Pooling(hparams.pooling, bool(hparams.get("normalize")))
            sentence_transformers.write_modules(partial, pooling, hparams.net["block"]["d_model"], hparams.net["context"])
        if origin is not None:
            untouched = sentence_transformers.write(origin, partial, hf)
            hf_class = "BertModel"
        (partial / "zoo_export.json").write_text(json.dumps({"from": str(ckpt), "class": hf_class,
                                                            "untouched": untouched}, indent=1))
    return hf_class, untouched
