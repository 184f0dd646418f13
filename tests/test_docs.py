"""The README and docs/ point at things that exist: every relative link (and its #anchor)
resolves to a file of the repository, and every config choice they name (`experiment=NAME`,
`model=NAME`, `data=NAME`, any group under conf/) is a file conf/<group>/<NAME>.yaml."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

from conftest import ROOT

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
