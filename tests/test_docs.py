"""The README and docs/ point at things that exist: every relative link (and its #anchor)
resolves to a file of the repository, and every config choice they name (`experiment=NAME`,
`model=NAME`, `data=NAME`, any group under conf/) is a file conf/<group>/<NAME>.yaml; the
README's command list is every `python -m zoo` command, each composing and showing its --help;
its layout table names the folders that exist and every package of zoo/."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from conftest import ROOT
from zoo.cli.commands import COMMANDS, main
from zoo.convert.common import compose_config

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)  # [label]: target
HTML_LINK = re.compile(r"\b(?:src|href)=\"([^\"]+)\"")
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)[^\n]*?\1")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...
# A choice is a lower-case name (several for a multirun: model=gpt,vit). Upper-case words and
# <...> are placeholders in prose (model=X, experiment=NAME, model=<name>) and are not checked.
CHOICE = r"(?<![\w.])\+?({groups})=([a-z0-9_][a-z0-9_/-]*(?:,[a-z0-9_][a-z0-9_/-]*)*)"


def markdown_files(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _blank(match: re.Match) -> str:
    """The match with everything but its newlines turned into spaces (line numbers stay)."""
    return re.sub(r"[^\n]", " ", match.group())


def without_code(text: str) -> str:
    """The text with fenced code blocks and code spans blanked out: links are not read there."""
    return CODE_SPAN.sub(_blank, FENCE.sub(_blank, text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (a repeated heading gets -1, -2, ...)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub(_blank, text)):
        base = slug(heading)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def link_problems(path: Path, root: Path = ROOT) -> list[str]:
    """One message per relative link in ``path`` that names no file of ``root``, or an anchor
    that is no heading of its target."""
    text = without_code(path.read_text())
    found = [(m.start(1), m.group(1)) for rx in (LINK, REFERENCE, HTML_LINK) for m in rx.finditer(text)]
    problems = []
    for pos, target in sorted(found):
        if SCHEME.match(target):
            continue
        where = f"{path.relative_to(root)}:{text.count(chr(10), 0, pos) + 1}: link {target}"
        file_part, _, anchor = unquote(target).partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path.resolve()
        if not dest.is_relative_to(root.resolve()):
            problems.append(f"{where}: points outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: no such file {dest.relative_to(root.resolve())}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            problems.append(f"{where}: {dest.name} has no heading with anchor #{anchor}")
    return problems


def config_problems(path: Path, conf: Path = ROOT / "conf", root: Path = ROOT) -> list[str]:
    """One message per `group=name` in ``path`` (code included) with no conf/group/name.yaml."""
    groups = sorted(d.name for d in conf.iterdir() if d.is_dir())
    text = path.read_text()
    problems = []
    for m in re.finditer(CHOICE.format(groups="|".join(map(re.escape, groups))), text):
        group, names = m.groups()
        for name in names.split(","):
            if not (conf / group / f"{name}.yaml").is_file():
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{path.relative_to(root)}:{line}: {group}={name}: no conf/{group}/{name}.yaml")
    return problems


def test_the_docs_are_found():
    files = markdown_files()
    assert (ROOT / "docs" / "families" / "gpt.md") in files and all(f.is_file() for f in files)


def test_every_link_in_the_docs_resolves():
    problems = [p for f in markdown_files() for p in link_problems(f)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_config_choice_in_the_docs_exists():
    problems = [p for f in markdown_files() for p in config_problems(f)]
    assert not problems, "config choices that do not exist:\n" + "\n".join(problems)


def test_link_checker_reports_broken_links_and_anchors(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# ViT (`model=vit`, `data=cifar10`)\n\n## Notes\n\n## Notes\n")
    (tmp_path / "img.png").write_bytes(b"png")
    page = tmp_path / "a.md"
    page.write_text(
        "# Top\n"
        "[ok](docs/b.md) [ok](docs/b.md#vit-modelvit-datacifar10) [ok](docs/b.md#notes-1) ![ok](img.png)\n"
        "[ok](#top) [web](https://example.org/x.md) `[code](missing_in_code.md)`\n"
        "```\n[fenced](missing_in_fence.md)\n```\n"
        "[gone](docs/gone.md)\n"
        "[bad anchor](docs/b.md#no-such-heading) [bad self](#nowhere)\n"
        "[outside](../elsewhere.md)\n"
        "[ref]: missing_ref.md\n"
    )
    problems = link_problems(page, root=tmp_path)
    named = [p.split(": link ")[1].split(":")[0] for p in problems]
    assert named == ["docs/gone.md", "docs/b.md#no-such-heading", "#nowhere", "../elsewhere.md", "missing_ref.md"]
    assert problems[0].startswith("a.md:7: link docs/gone.md: no such file docs/gone.md")


def test_config_checker_reports_missing_choices_and_skips_placeholders(tmp_path):
    for group, name in [("model", "gpt"), ("model", "vit"), ("experiment", "gpt_cpu")]:
        (tmp_path / "conf" / group).mkdir(parents=True, exist_ok=True)
        (tmp_path / "conf" / group / f"{name}.yaml").write_text("{}\n")
    page = tmp_path / "a.md"
    page.write_text(
        "python train.py model=gpt experiment=gpt_cpu model.net.n_layers=2\n"
        "`model=X` or experiment=NAME or model=<name> stand for any choice; data=gone is no group here\n"
        "python train.py -m model=gpt,vit,nope\n"
        "    python train.py +experiment=missing\n"
    )
    problems = config_problems(page, conf=tmp_path / "conf", root=tmp_path)
    assert problems == ["a.md:3: model=nope: no conf/model/nope.yaml",
                        "a.md:4: experiment=missing: no conf/experiment/missing.yaml"]


def readme_section(marker: str, text: str | None = None) -> str:
    """The README's text between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    text = (ROOT / "README.md").read_text() if text is None else text
    found = re.search(rf"<!-- {marker} -->\n(.*?)\n<!-- /{marker} -->", text, re.S)
    assert found, f"README.md has no <!-- {marker} --> section"
    return found.group(1)


def readme_commands() -> list[tuple[str, list[str]]]:
    """(command, its overrides) for each line ``python -m zoo <command> key=value ...`` of the
    README's command list (a trailing ``# comment`` left out)."""
    commands = []
    for line in readme_section("commands").splitlines():
        words = shlex.split(line.split("  #")[0])
        assert words[:3] == ["python", "-m", "zoo"], f"not a zoo command: {line!r}"
        commands.append((words[3], words[4:]))
    return commands


def test_the_readme_lists_every_command_and_each_line_composes():
    commands = readme_commands()
    assert {name for name, _ in commands} == set(COMMANDS)
    for name, overrides in commands:
        compose_config(overrides, COMMANDS[name].config)  # an unknown key would be refused here


@pytest.mark.parametrize("name", sorted({name for name, _ in readme_commands()}))
def test_each_readme_command_shows_its_help(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["zoo", name, "--help"])
    with pytest.raises(SystemExit) as exit_:
        main()
    shown = capsys.readouterr().out
    assert exit_.value.code == 0
    missing = [key for key in compose_config([], COMMANDS[name].config) if f"\n{key}:" not in shown]
    assert not missing, f"`python -m zoo {name} --help` does not show {missing}:\n{shown}"


def layout_rows(text: str | None = None) -> dict[str, str]:
    """{path: what} for each row of the README's layout table (several paths in one cell: one entry each)."""
    text = (ROOT / "README.md").read_text() if text is None else text
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`"):
            rows |= {path: cells[1] for path in re.findall(r"`([^`]+)`", cells[0])}
    return rows


def test_the_layout_table_names_what_exists_and_every_package():
    rows = layout_rows()
    named = [path for path in rows if path.startswith("zoo/")]
    assert [p for p in rows if not (ROOT / p).exists()] == []
    # the files a folder's row names in its description are in that folder
    for folder in (p for p in named if p.endswith("/")):
        absent = [f for f in re.findall(r"`(\w+\.py)`", rows[folder]) if not (ROOT / folder / f).is_file()]
        assert not absent, f"the {folder} row names {absent}, which are not in {folder}"
    packages = {f"zoo/{p.name}/" for p in (ROOT / "zoo").iterdir() if (p / "__init__.py").is_file()}
    modules = {f"zoo/{p.name}" for p in (ROOT / "zoo").glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    assert sorted((packages | modules) - set(named)) == [], "packages or modules of zoo/ missing from the layout table"
    assert {"zoo/nn/", "zoo/models/", "zoo/train/", "zoo/cli/", "zoo/registry.py"} <= set(named)
