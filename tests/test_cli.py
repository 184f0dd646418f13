"""The one command line: `python -m zoo` lists its commands and refuses an unknown one (exit 2),
a command's config is composed by Hydra (unknown keys refused, naming them), and the `zoo`
console script is the same entry point."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from conftest import ROOT
from zoo.cli.commands import COMMANDS, call, main


def zoo(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoo", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})


def test_no_command_or_an_unknown_one_lists_the_commands_and_exits_2():
    for args, said in (((), ""), (("tranzlate", "text=hi"), "unknown command 'tranzlate'")):
        out = zoo(*args)
        assert out.returncode == 2, out.stderr
        assert said in out.stderr and all(f"\n  {name} " in out.stderr for name in COMMANDS), out.stderr


def test_help_lists_the_commands(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["zoo", "--help"])
    main()
    shown = capsys.readouterr().out
    assert shown.startswith("usage: python -m zoo <command>") and all(f"\n  {name} " in shown for name in COMMANDS)


def test_a_command_refuses_an_unknown_key_naming_it(tmp_path):
    with pytest.raises(Exception, match="Could not override 'beem'"):
        call("translate", [f"ckpt={tmp_path / 'x.ckpt'}", "text=hi", "beem=false"])


def test_a_missing_required_key_is_named(tmp_path):
    with pytest.raises(Exception, match="Missing mandatory value: ckpt"):
        call("answer", [f"image={tmp_path / 'x.png'}"])


def test_every_command_has_its_config_and_function():
    for name, command in COMMANDS.items():
        assert (ROOT / "conf" / f"{command.config}.yaml").is_file(), name
        assert callable(command.load()), name


def test_the_console_script_is_the_module_entry_point():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"zoo": "zoo.__main__:main"}
    from zoo.__main__ import main as entry

    assert entry is main


def test_a_command_leaves_the_zoos_loggers_enabled(monkeypatch):
    """Hydra's logging set-up for a command must not disable the loggers that exist already (its
    `disabled` hydra_logging does): the zoo's warnings would be lost in that process."""
    import logging

    from zoo.cli.commands import hydra_main

    logger = logging.getLogger("zoo.train.milestones")  # exists before the command runs
    monkeypatch.setattr(sys, "argv", ["zoo", "--help"])
    with pytest.raises(SystemExit):
        hydra_main("describe")()
    assert not logger.disabled
