"""Record the first batches of every data module, to check that a refactor of the data plumbing
changes no batch and no order.

Each ``conf/data/*.yaml`` is built (on the small generated corpora of
``tests/test_model_data_table.py``, every module offline, COCO and UCF101 included) once per batch
type it yields to a CPU preset, as train.py builds it (``serve``, ``prepare_data``, ``setup``);
recorded: ``dims``, the tokenizer's state, and for train / val / test the loader's length and its
first ``--batches`` batches, field by field (one entry per tensor).

    python tools/first_batches.py --cache /tmp/cache --save /tmp/batches_before.pt
    python tools/first_batches.py --cache /tmp/cache --compare /tmp/batches_before.pt   # exit 1 on any difference

Identical means ``torch.equal`` for every tensor and ``==`` for everything else.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import hydra
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tools")]  # this checkout's zoo, not an installed one

from fingerprint import compare  # noqa: E402  (entries compared as the model fingerprints are)
from test_model_data_table import CELLS, COMMON, DATA, DATA_CFGS, MODEL_CFGS, MODELS  # noqa: E402
from zoo.convert.common import compose_config  # noqa: E402
from zoo.train.compat import batch_type  # noqa: E402


def flatten(value: object, key: str, out: dict) -> None:
    """A batch (NamedTuples of tensors, lists of dicts, strings) into ``out``: one entry per leaf, by path."""
    if isinstance(value, (tuple, list)) and any(isinstance(v, (torch.Tensor, tuple, list, dict)) for v in value):
        for i, v in enumerate(value):
            flatten(v, f"{key}/{i}", out)
    elif isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{key}/{k}", out)
    else:
        out[key] = value


def record(model: str, data: str, folder: Path, cache: Path, batches: int) -> dict:
    """What the data module of ``data``, served the batch type ``model`` reads, yields first."""
    overrides = [f"model={model}", f"data={data}", *COMMON, *DATA[data](folder), *MODELS[model],
                 f"paths.data_dir={folder}", f"paths.cache_dir={cache}"]
    cfg = compose_config(overrides)
    kind = batch_type(cfg.model, cfg.data, model, data)
    torch.manual_seed(0)  # the run's seed, which shuffles where a module names no seed of its own
    module = hydra.utils.instantiate(cfg.data)
    module.serve(kind)
    module.prepare_data()
    module.setup("fit")
    out = {"type": kind.__name__, "dims": dict(module.dims),
           "tokenizer": module.tokenizer.state() if module.tokenizer is not None else None}
    for split in ("train", "val", "test"):
        loader = getattr(module, f"{split}_dataloader")()
        out[f"{split}/len"] = len(loader)
        it = iter(loader)
        for i in range(min(batches, len(loader))):
            flatten(next(it), f"{split}/{i}", out)
    return out


def run(batches: int, only: list[str] | None, cache: Path | None) -> dict[str, dict]:
    results = {}
    served = {}  # (data, batch type) -> the first model that reads it
    for model, data in CELLS:
        if not only or data in only:
            served.setdefault((data, batch_type(MODEL_CFGS[model], DATA_CFGS[data], model, data)), model)
    for (data, kind), model in sorted(served.items(), key=lambda item: (item[0][0], item[0][1].__name__)):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "data"
            folder.mkdir()
            results[f"{data}+{kind.__name__}"] = record(model, data, folder, cache or Path(tmp) / "cache", batches)
        print(f"{data} ({kind.__name__}, for model={model}): recorded", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path)
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="data config names")
    parser.add_argument("--cache", type=Path, help="the cache folder, kept between a --save and a --compare: a "
                        "WordPiece trained on a tiny corpus breaks its ties differently from run to run")
    args = parser.parse_args()
    results = run(args.batches, args.only, args.cache)
    if args.save:
        torch.save(results, args.save)
        print(f"saved the first batches of {len(results)} data modules x batch types to {args.save}")
    if args.compare:
        before = torch.load(args.compare, weights_only=False)
        if args.only:
            before = {k: v for k, v in before.items() if k.split("+")[0] in args.only}
        problems = compare(before, results)
        print("\n".join(problems) or f"identical: the first batches of {len(results)} data modules x batch types")
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
