"""Fingerprint every CPU-sized model config, to check that a refactor changes no number.

For each ``conf/model/*.yaml`` that builds under ``--max-params`` parameters (with the small
stand-in dims below), the network is built with a fixed seed, its parameters drawn away from
their init (``tests/exactness.py``'s ``randomise``), and these are recorded on a fixed batch:

- the initial weights as built (seed 0, as hashes), before the draw;
- the eval forward, without padding and (families that take it) with padding;
- ``features`` at the last state, after layer 1 and at layer -2;
- cached decoding (a prefix, then one position at a time) for decoders;
- the inspection path (every attention's ``keep_weights``: the outputs and the weights);
- the gradients of one train-mode step (dropout on) on a fixed scalar of the outputs (as hashes);
- the same under ``attention_backend=blocks`` (and, inference only, ``flex``) where the masks allow.

    python tools/fingerprint.py --save /tmp/fp_before.pt
    python tools/fingerprint.py --compare /tmp/fp_before.pt     # exit 1 on any difference

Bit-identical means ``torch.equal``: a refactor that only moves code keeps every entry.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import sys
from pathlib import Path

import hydra
import torch
from omegaconf import open_dict
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's zoo, not an installed one

from exactness import randomise  # noqa: E402
from zoo.config import compose_config  # noqa: E402
from zoo.nn.audio_conv import WaveEmbedder  # noqa: E402
from zoo.nn.attention import MultiHeadAttention  # noqa: E402
from zoo.nn.embedders import AudioEmbedder, PatchEmbedder, TokenEmbedder, TubeletEmbedder  # noqa: E402
from zoo.nn.multimodal import MultimodalEmbedder  # noqa: E402
from zoo.nn.tower import Tower, outer_towers  # noqa: E402

VOCAB, IMAGE, FRAMES, BATCH = 64, 16, 4, 2
DIMS = {"vocab_size": VOCAB, "mask_id": 3, "special_ids": [0, 1, 2, 3], "eos_id": 1, "bos_id": 2, "pad_id": 0,
        "image_token_id": VOCAB - 1, "prompt": "{question}", "metric": "exact_match", "num_classes": 5,
        "class_names": [f"c{i}" for i in range(5)], "pixel_mean": [0.5] * 3, "pixel_std": [0.25] * 3,
        "image_size": IMAGE, "channels": 3, "num_frames": FRAMES, "max_objects": 3}
LENGTH = {"bigbird": 208, "bigbird_base": 208, "modernbert": 80, "modernbert_base": 80}  # long enough to cut


def build(model: str, overrides: list[str]) -> nn.Module:
    cfg = compose_config([f"model={model}", *overrides])
    with open_dict(cfg):
        cfg.dims = DIMS
    torch.manual_seed(0)
    return hydra.utils.instantiate(cfg.model.net)


def n_params(model: str) -> int:
    cfg = compose_config([f"model={model}"])
    with open_dict(cfg):
        cfg.dims = DIMS
    with torch.device("meta"):
        return sum(p.numel() for p in hydra.utils.instantiate(cfg.model.net).parameters())


def tokens(gen: torch.Generator, length: int, low: int = 4) -> Tensor:
    return torch.randint(low, VOCAB - 1, (BATCH, length), generator=gen)


def padding(length: int) -> Tensor:
    """(B, L): row 1 ends in 3 padding positions."""
    real = torch.ones(BATCH, length, dtype=torch.bool)
    real[1, -3:] = False
    return real


# The token lengths of the forward's named inputs (any other: the model's own, LENGTH or 48, cut to
# its context): an encoder-decoder's source and target, a two-tower model's texts.
INPUT_LENGTH = {"source": 20, "target": 12, "tokens": 9}


def tower_input(tower: Tower, name: str, pad: str | None, length: int, gen: torch.Generator) -> tuple[dict, dict]:
    """(what the tower reads under the forward's input ``name``, the padding the padded batch adds
    under ``pad``, {} when this input has none), made from the tower's embedder."""
    emb = tower.embedder
    if isinstance(emb, AudioEmbedder):
        return {name: torch.randn(BATCH, emb.conv1.in_channels, 40, generator=gen)}, {}
    if isinstance(emb, WaveEmbedder):  # 0.2 s at 16 kHz; the padded batch's second wave ends in padding
        real = torch.ones(BATCH, 3200, dtype=torch.bool)
        plain = {name: torch.randn(BATCH, 3200, generator=gen)}
        real[1, 2400:] = False
        valid = emb.output_padding(real)
        return plain, {pad: valid, "padding": valid}
    if isinstance(emb, MultimodalEmbedder):
        n = emb.n_image_tokens
        ids = torch.cat([tokens(gen, 3), torch.full((BATCH, n), emb.image_token_id), tokens(gen, 9)], 1)
        size = emb.vision.image_size
        return {name: ids, "images": torch.randn(BATCH, 3, size, size, generator=gen)}, {pad: padding(ids.shape[1])}
    if isinstance(emb, TokenEmbedder):
        plain = {name: tokens(gen, length)}
        if emb.segments is not None:
            plain["segments"] = torch.randint(0, emb.segments.num_embeddings, (BATCH, length), generator=gen)
        return plain, {pad: padding(length)}
    if isinstance(emb, TubeletEmbedder):
        return {name: torch.randn(BATCH, *emb.shape, generator=gen)}, {}
    if isinstance(emb, PatchEmbedder):  # DetectionEmbedder too: at its size, or the data's where it resamples
        size = IMAGE if emb.interpolate else emb.image_size  # its positions to another grid (DINOv2-S: 224 px)
        return {name: torch.randn(BATCH, emb.patchify.in_channels, size, size, generator=gen)}, {}
    raise TypeError(f"no fingerprint input for {type(emb).__name__}")


def batch(net: nn.Module, model: str, gen: torch.Generator) -> tuple[dict, dict | None]:
    """(the forward's keyword arguments without padding, with padding or None when not taken): one
    input per tower that reads the net's input (``outer_towers``), named as the forward's parameters
    name them in order; its padding under ``<input>_padding``, or the first input's under
    ``key_padding``. A target is drawn before its source (the order of the recorded numbers), and a net
    that pools its texts at an end-of-text id (``eos_id``) reads texts ending in it."""
    towers = list(outer_towers(net).values())
    parameters = list(inspect.signature(net.forward).parameters)
    names = parameters[:len(towers)]
    plain: dict = {}
    pads: dict = {}
    for i in sorted(range(len(towers)), key=lambda i: names[i] != "target"):
        name = names[i]
        pad = f"{name}_padding" if f"{name}_padding" in parameters else "key_padding" if i == 0 else None
        length = INPUT_LENGTH.get(name) or min(LENGTH.get(model, 48), net.context)
        given, padded = tower_input(towers[i], name, pad, length, gen)
        if hasattr(net, "eos_id") and isinstance(towers[i].embedder, TokenEmbedder):
            given[name][:, -1] = net.eos_id if net.eos_id is not None else given[name].max()
        plain |= given
        pads |= padded
    return plain, (plain | pads if pads else None)


def tensors(out) -> list[Tensor]:
    """A forward's output as a list of tensors (a detection head returns a named tuple)."""
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in tensors(item)]
    if isinstance(out, dict):
        return [t for key in sorted(out) for t in tensors(out[key])]
    raise TypeError(type(out).__name__)


def digest(t: Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


def features(net: nn.Module, kwargs: dict) -> dict[str, Tensor]:
    """The hidden states at the last layer, after layer 1 and at layer -2 of a net whose ``features``
    takes the forward's inputs at any layer; {} for a net that gives them at no layer or not at each
    (two towers side by side: the text tower's alone; a staged hierarchy: its last state only)."""
    try:
        return {f"features/{layer}": net.features(**kwargs, layer=layer).clone() for layer in (None, 1, -2)}
    except (TypeError, ValueError):
        return {}


def decode_cached(net: nn.Module, kwargs: dict) -> Tensor:
    """Logits of a prefix, then of three positions one at a time, under a KV cache: the decoder tower
    reads the target (its memory encoded once, where it cross-attends) or the net's own inputs."""
    cache = net.new_cache()
    if outer_towers(net)["decoder"].cross_attention:
        memory = net.encode(kwargs["source"], kwargs.get("source_padding"))
        target = kwargs["target"]
        steps = [target[:, : -3]] + [target[:, i : i + 1] for i in range(target.shape[1] - 3, target.shape[1])]
        return torch.cat([net.decode(s, memory, kwargs.get("source_padding"), cache=cache) for s in steps], 1)
    ids = kwargs["inputs"]
    steps = [ids[:, : -3]] + [ids[:, i : i + 1] for i in range(ids.shape[1] - 3, ids.shape[1])]
    return torch.cat([net(s, cache=cache) for s in steps], 1)


def is_decoder(net: nn.Module) -> bool:
    """Whether the net decodes tokens: a tower named ``decoder`` reads its input through a plain token embedder."""
    decoder = outer_towers(net).get("decoder")
    return decoder is not None and type(decoder.embedder) is TokenEmbedder


def fingerprint(model: str, overrides: list[str], inference_only: bool = False) -> dict:
    net = build(model, overrides)
    # the initial weights (seed 0, as built): what the first training steps start from
    found: dict = {"init": {name: digest(t) for name, t in net.state_dict().items()}}
    net = randomise(net, seed=0).eval()
    gen = torch.Generator().manual_seed(0)
    plain, padded = batch(net, model, gen)
    with torch.no_grad():
        for name, kwargs in (("plain", plain), ("padded", padded)):
            if kwargs is None:
                continue
            for i, t in enumerate(tensors(net(**kwargs))):
                found[f"forward/{name}/{i}"] = t.clone()
        kwargs = padded or plain
        found |= features(net, kwargs)
        if is_decoder(net):
            found["cached"] = decode_cached(net, plain)
        attentions = [m for m in net.modules() if isinstance(m, MultiHeadAttention)]
        for m in attentions:
            m.keep_weights = True
        try:
            for i, t in enumerate(tensors(net(**kwargs))):
                found[f"inspect/out/{i}"] = t.clone()
            for i, m in enumerate(attentions):
                if m.last_weights is not None:
                    found[f"inspect/weights/{i}"] = m.last_weights.clone()
        finally:
            for m in attentions:
                m.keep_weights, m.last_weights = False, None
    if not inference_only:
        net.train()
        torch.manual_seed(1)
        outs = tensors(net(**kwargs))
        weight_gen = torch.Generator().manual_seed(2)
        loss = sum((t.float() * torch.randn(t.shape, generator=weight_gen)).sum() for t in outs if t.is_floating_point())
        loss.backward()
        found["train/loss"] = loss.detach().clone()
        found["train/grads"] = {name: None if p.grad is None else digest(p.grad) for name, p in net.named_parameters()}
    return found


def cpu_models(max_params: float) -> list[str]:
    names = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))
    kept = []
    for name in names:
        count = n_params(name)
        print(f"{name}: {count / 1e6:.1f}M parameters" + ("" if count <= max_params else " (skipped)"), flush=True)
        if count <= max_params:
            kept.append(name)
    return kept


def run(max_params: float, only: list[str] | None) -> dict:
    results: dict = {}
    for model in only or cpu_models(max_params):
        results[model] = fingerprint(model, [])
        for backend in ("blocks", "flex"):
            try:
                results[f"{model}+{backend}"] = fingerprint(model, [f"model.net.attention_backend={backend}"],
                                                            inference_only=backend == "flex")
            except Exception as err:  # noqa: BLE001 (a family the backend refuses, or fails on: recorded as such)
                results[f"{model}+{backend}"] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        print(f"{model}: {len(results[model])} entries", flush=True)
    return results


def same(a, b) -> bool:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


def compare(before: dict, after: dict) -> list[str]:
    problems = []
    for model in sorted(set(before) | set(after)):
        if model not in after or model not in before:
            problems.append(f"{model}: only {'before' if model in before else 'after'}")
            continue
        for key in sorted(set(before[model]) | set(after[model])):
            a, b = before[model].get(key), after[model].get(key)
            if not same(a, b):
                detail = ""
                if isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape:
                    detail = f" max|diff|={(a.double() - b.double()).abs().max().item():.3e}"
                elif isinstance(a, dict) and isinstance(b, dict):
                    detail = f" {sum(a.get(k) != b.get(k) for k in set(a) | set(b))} of {len(a)} differ"
                problems.append(f"{model}/{key}:{detail}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path)
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--max-params", type=float, default=50e6)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    results = run(args.max_params, args.only)
    if args.save:
        torch.save(results, args.save)
        print(f"saved {sum(len(v) for v in results.values())} entries of {len(results)} variants to {args.save}")
    if args.compare:
        before = torch.load(args.compare, weights_only=False)
        if args.only:
            before = {k: v for k, v in before.items() if k.split("+")[0] in args.only}
        problems = compare(before, results)
        print("\n".join(problems) or f"bit-identical: {sum(len(v) for v in results.values())} entries "
                                     f"of {len(results)} variants")
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
