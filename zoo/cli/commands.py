"""The zoo's one command line: ``python -m zoo <command> key=value ...`` (or ``zoo <command> ...``).

Every command is a function of its composed config, conf/<config>.yaml: Hydra composes it from
the overrides, so ``--help``, ``key=value`` overrides and the errors for a missing (``???``) or
unknown key read the same for every command. ``python train.py`` and ``python generate.py``
run the same functions.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig


@dataclass(frozen=True)
class Command:
    config: str  # conf/<config>.yaml
    function: str  # "module:function", imported only when the command runs (the list stays quick)
    summary: str

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
    "attention-maps": Command("attention_maps", "zoo.cli.attention_maps:main",
                              "draw a checkpoint's attention weights for one input"),
    "embed": Command("embed", "zoo.cli.embed:main", "write embeddings of texts or images from a checkpoint or folder"),
    "export": Command("export", "zoo.cli.export:main", "write a checkpoint as a folder transformers loads"),
    "describe": Command("describe", "zoo.cli.describe:main",
                        "print the family table; masks=DIR also draws each family's masks"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    return ("usage: python -m zoo <command> [key=value ...]   (or: zoo <command> ...)\n\ncommands:\n"
            + "\n".join(lines) + "\n\n`python -m zoo <command> --help` shows a command's keys and defaults.")


def hydra_main(name: str, task: Callable[[DictConfig], Any] | None = None) -> Callable[[], Any]:
    """Command ``name`` (or ``task`` in its place) as a Hydra application: calling it composes
    conf/<config>.yaml with the overrides in ``sys.argv[1:]`` and runs the command on the result
    (what ``train.py``, ``generate.py`` and :func:`main` call)."""
    import hydra

    from zoo.convert.common import CONF_DIR  # (torch and Hydra load only once a command runs: the list is quick)

    command = COMMANDS[name]
    return hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=command.config)(task or command.load())


def call(name: str, overrides: list[str]) -> Any:
    """Run command ``name`` in this process on its config composed from ``overrides``, as the
    command line composes it (for tests, and for calling a command from Python)."""
    from zoo.convert.common import compose_config

    cfg = compose_config(overrides, COMMANDS[name].config)
    return COMMANDS[name].load()(cfg)


def main() -> None:
    """``python -m zoo <command> key=value ...``; no command or an unknown one prints the list and exits 2."""
    given = sys.argv[1] if len(sys.argv) > 1 else None
    if given in ("-h", "--help"):
        print(usage())
        return
    if given not in COMMANDS:
        print(("" if given is None else f"unknown command {given!r}\n\n") + usage(), file=sys.stderr)
        raise SystemExit(2)
    command = COMMANDS[given].load()

    @functools.wraps(command)
    def with_command_in_argv(cfg: DictConfig) -> Any:
        # Lightning's DDP launcher starts each child process with sys.argv: it must name the command.
        sys.argv.insert(1, given)
        try:
            return command(cfg)
        finally:
            del sys.argv[1]

    del sys.argv[1]  # Hydra reads the overrides from sys.argv[1:]
    hydra_main(given, with_command_in_argv)()
