"""The zoo's one command line: ``python -m zoo <command> key=value ...`` (or ``zoo <command> ...``).

Every command is a function of its composed config, conf/<config>.yaml: Hydra composes it from
the overrides, so ``--help``, ``key=value`` overrides and the errors for a missing (``???``) or
unknown key read the same for every command. ``python train.py`` and ``python generate.py``
run the same functions.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from zoo.config import CONF_DIR, compose_config

PACKAGE = Path(__file__).resolve().parents[1]  # zoo/
ERROR_FILE = "error.txt"  # a sweep's failed trial's error, in its folder (keep_error)
# A Hydra override's start: an optional +, ++ or ~, a key or group (with @package), then =.
OVERRIDE = re.compile(r"^(\+\+|\+|~)?[\w./@-]+=")


@dataclass(frozen=True)
class Command:
    config: str  # conf/<config>.yaml
    function: str  # "module:function", imported only when the command runs (the list stays quick)
    summary: str
    # Keys a bare word on the command line fills, in order (``zoo diff gpt mistral``: a=gpt b=mistral).
    positional: tuple[str, ...] = ()

    def load(self) -> Callable[[DictConfig], Any]:
        module, name = self.function.split(":")
        return getattr(importlib.import_module(module), name)


COMMANDS: dict[str, Command] = {
    "train": Command("train", "zoo.cli.train:main", "train a model on a dataset, then test it (= python train.py)"),
    "generate": Command("generate", "zoo.cli.generate:main",
                        "sample text from a language-model checkpoint (= python generate.py)"),
    "translate": Command("translate", "zoo.cli.translate:main", "translate a sentence with a seq2seq checkpoint"),
    "transcribe": Command("transcribe", "zoo.cli.transcribe:main",
                          "transcribe audio files with a speech-recognition checkpoint"),
    "answer": Command("answer", "zoo.cli.answer:main", "answer a question about an image with a LLaVA checkpoint"),
    "detect": Command("detect", "zoo.cli.detect:main",
                      "find the objects in an image with a detector checkpoint (YOLOS): JSON and a PNG"),
    "classify": Command("classify", "zoo.cli.classify:main",
                        "zero-shot classification of an image with a CLIP / SigLIP checkpoint: labels' scores"),
    "attention-maps": Command("attention_maps", "zoo.cli.attention_maps:main",
                              "draw a checkpoint's attention weights for one input"),
    "embed": Command("embed", "zoo.cli.embed:main", "write embeddings of texts or images from a checkpoint or folder"),
    "eval": Command("eval", "zoo.cli.evaluate:main",
                    "a checkpoint's test metrics on a data config's split (loss, perplexity, bits per byte): JSON"),
    "prepare": Command("prepare", "zoo.cli.prepare:main",
                       "tokenize a data=text source once into token shards (uint16 / uint32) for data=tokens"),
    "export": Command("export", "zoo.cli.export:main", "write a checkpoint as a folder transformers loads"),
    "describe": Command("describe", "zoo.cli.describe:main",
                        "print the family table; masks=DIR also draws each family's masks"),
    "samples": Command("samples", "zoo.cli.samples:main",
                       "write a speech clip and shapes images: the inputs of the README's Commands block"),
    "diff": Command("diff", "zoo.cli.diff:main",
                    "what differs between two configs (diff gpt mistral), grouped by axis", ("a", "b")),
    "compare": Command("compare", "zoo.cli.compare:main",
                       "run a study (conf/study/*.yaml): one axis, seeds, one budget; then its report"),
    "report": Command("report", "zoo.cli.report:main", "a study's table and pictures, from its folder"),
}


def positional_to_overrides(command: Command, arguments: list[str]) -> list[str]:
    """``arguments`` with each bare word (not ``key=value``, not a flag) given to the command's next
    positional key, quoted for Hydra: ``["gpt", "mistral x=1"]`` -> ``["a='gpt'", "b='mistral x=1'"]``;
    a positional key's value of several words, quoted for the shell alone (``"b=mistral x=1"``), too."""
    names = iter(command.positional)
    out = []
    for argument in arguments:
        key, _, value = argument.partition("=")
        if key in command.positional and " " in value.strip() and value[:1] not in "'\"":
            argument = quoted(key, value)
        if command.positional and not argument.startswith("-") and not OVERRIDE.match(argument):
            name = next(names, None)
            if name is None:
                print(f"error: {argument!r}: the command takes {len(command.positional)} words "
                      f"({' '.join(command.positional).upper()}); give other settings as key=value", file=sys.stderr)
                raise SystemExit(2)
            argument = quoted(name, argument)
        out.append(argument)
    return out


def quoted(key: str, value: str) -> str:
    """``key='value'``, quoted for Hydra's override parser (a value of several words is one)."""
    return f"{key}='" + value.replace("'", "\\'") + "'"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    return ("usage: python -m zoo <command> [key=value ...]   (or: zoo <command> ...)\n\ncommands:\n"
            + "\n".join(lines) + "\n\n`python -m zoo <command> --help` shows a command's keys and defaults.")


def one_line_refusals(function: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """``function`` with the zoo's own refusals (an error raised in the zoo's code: a bad value, a
    missing file, a wrong checkpoint) printed as one line on stderr, exit status 1, instead of
    Hydra's report and a traceback; HYDRA_FULL_ERROR=1 keeps the traceback, as for Hydra's own errors."""

    @functools.wraps(function)
    def run(cfg: DictConfig) -> Any:
        try:
            return function(cfg)
        except Exception as error:
            cause = constructor_error(error)
            if in_a_sweep():  # the sweeper records the trial as failed and goes on; its folder keeps why
                keep_error(cause)
            if os.environ.get("HYDRA_FULL_ERROR") == "1" or not raised_by_zoo(cause) or in_a_sweep():
                raise
            print(f"error: {with_full_key(str(cause), cfg)}", file=sys.stderr)
            raise SystemExit(1) from None

    return run


def keep_error(error: BaseException) -> None:
    """A sweep's failed trial: its error, one line, as error.txt in its output folder (what a
    study's report says of the run; Hydra shows only the first failed trial's)."""
    from hydra.core.hydra_config import HydraConfig

    folder = Path(HydraConfig.get().runtime.output_dir)
    if folder.is_dir():
        (folder / ERROR_FILE).write_text(f"{type(error).__name__}: {' '.join(str(error).split())}\n")


def constructor_error(error: BaseException) -> BaseException:
    """The error a constructor raised, out of Hydra's ``InstantiationException`` (one around it for
    each ``_target_`` being built: the objective around its net around its block ...)."""
    from hydra.errors import InstantiationException

    while isinstance(error, InstantiationException) and error.__cause__ is not None:
        error = error.__cause__
    return error


# A message's first ``name=value``: the setting a constructor's refusal names (``block.top_k=9``).
SETTING = re.compile(r"([A-Za-z_][\w.]*)=('[^']*'|[^\s:,;)]+)")


def with_full_key(message: str, cfg: DictConfig) -> str:
    """``message`` with the setting it names by its own key (a class's ``block.top_k=9``, ``window=1000``)
    named by its key in ``cfg`` (``model.net.block.top_k=9``), where one key of ``cfg`` ends so and holds
    that value: the key the user sets on the command line."""
    from omegaconf import OmegaConf

    found = SETTING.search(message)
    if found is None:
        return message
    name, value = found.groups()
    leaves = flat(OmegaConf.to_container(cfg, resolve=False))
    if name in leaves:
        return message
    keys = [k for k, v in leaves.items() if k.endswith(f".{name}") and str(v) == value.strip("'")]
    return message if len(keys) != 1 else message[: found.start()] + keys[0] + message[found.start(1) + len(name):]


def flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: value}`` of every leaf of a config container (list items by index)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else None
    if items is None:
        return {prefix.rstrip("."): node}
    return {k: v for key, value in items for k, v in flat(value, f"{prefix}{key}.").items()}


def in_a_sweep() -> bool:
    """Whether this is one job of a Hydra multirun (``-m``)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def raised_by_zoo(error: BaseException) -> bool:
    """Whether ``error`` was raised by the zoo's own code (its innermost frame is in the package)."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(PACKAGE)


def hydra_main(name: str, task: Callable[[DictConfig], Any] | None = None,
               command_in_argv: bool = False) -> Callable[[], Any]:
    """Command ``name`` (or ``task`` in its place) as a Hydra application: calling it checks the
    overrides in ``sys.argv[1:]`` that the config alone decides (:mod:`zoo.cli.precheck`, before
    torch loads and before any run directory exists), composes conf/<config>.yaml with them and runs
    the command on the result (what ``train.py``, ``generate.py`` and :func:`main` call).
    ``command_in_argv``: the command's name goes back into ``sys.argv`` while it runs (Lightning's
    DDP launcher starts each child process with ``sys.argv``: it must name the command)."""
    import hydra

    from zoo.cli import precheck

    command = COMMANDS[name]

    def run(cfg: DictConfig) -> Any:
        function = task or command.load()  # torch and Lightning load here, after the checks
        if command_in_argv:
            sys.argv.insert(1, name)
        try:
            return one_line_refusals(function)(cfg)
        finally:
            if command_in_argv:
                del sys.argv[1]

    # Hydra names the job (and finds nothing else) by the task's module: the command's own.
    run.__module__ = command.function.split(":")[0] if task is None else task.__module__
    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=command.config)(run)

    def start() -> Any:
        try:
            precheck.check(name, command.config, sys.argv[1:])
        except precheck.Refused as refusal:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"error: {refusal}", file=sys.stderr)
            raise SystemExit(2) from None
        return app()

    return start


def call(name: str, overrides: list[str]) -> Any:
    """Run command ``name`` in this process on its config composed from ``overrides``, as the
    command line composes it (for tests, and for calling a command from Python)."""
    cfg = compose_config(overrides, COMMANDS[name].config)
    return COMMANDS[name].load()(cfg)


def main() -> None:
    """``python -m zoo <command> key=value ...``; no command or an unknown one prints the list (with
    the closest command's name) and exits 2."""
    given = sys.argv[1] if len(sys.argv) > 1 else None
    if given in ("-h", "--help"):
        print(usage())
        return
    if given not in COMMANDS:
        from zoo.cli.precheck import did_you_mean

        said = "" if given is None else f"unknown command {given!r}{did_you_mean(given, list(COMMANDS))}\n\n"
        print(said + usage(), file=sys.stderr)
        raise SystemExit(2)
    del sys.argv[1]  # Hydra reads the overrides from sys.argv[1:]
    sys.argv[1:] = positional_to_overrides(COMMANDS[given], sys.argv[1:])
    hydra_main(given, command_in_argv=True)()
