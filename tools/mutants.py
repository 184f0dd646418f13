"""``make mutants``: does the default suite catch a one-line mapping bug?

For each mutant in ``tools/mutant_list.py`` (exact original text -> replacement, in one named
file), the tracked tree (``git ls-files``, plus untracked files git does not ignore, so that
uncommitted work is checked too) is copied once into a scratch directory; the mutant is applied
there, the default-suite tests of the affected family run (``-x``, ``-m 'not slow'``), and the
file is put back. A mutant is *caught* when a test fails; it *survives* when they all pass. A
mutant whose original text is not in its file exactly once is refused before anything runs, and
a run that errors without a failing test (collection error, crash) is reported as ERROR, never
as caught. Equivalent mutants (the same function, so no test can catch them) are listed with
their reason and not run.

    python tools/mutants.py                 # every mutant, a table, exit 1 if one survives
    python tools/mutants.py gpt2 block_     # the mutants whose name contains any of these
    python tools/mutants.py --list          # names, files and tests, nothing run
    python tools/mutants.py --baseline      # first check the selected tests pass unmutated
    python tools/mutants.py -j 2            # two scratch copies, two mutants at a time
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutant_list import EQUIVALENT, FAMILY_TESTS, MUTANTS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PYTEST = ["-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def tests_of(mutant: dict) -> list[str]:
    """The test files / node ids a mutant runs: its families' tests, then its own extras."""
    tests = [t for family in mutant.get("families", ()) for t in FAMILY_TESTS[family]]
    return list(dict.fromkeys(tests + list(mutant.get("tests", ()))))


def check(mutants: list[dict]) -> None:
    """Refuse, before running anything, a mutant whose text is not in its file exactly once."""
    for m in mutants:
        text = (ROOT / m["file"]).read_text()
        count = text.count(m["old"])
        if count != 1:
            raise SystemExit(f"mutant {m['name']}: its original text occurs {count} times in {m['file']} "
                             f"(it must occur exactly once): {m['old']!r}")
        if m["old"] == m["new"]:
            raise SystemExit(f"mutant {m['name']}: the replacement is the original text")
        missing = [t for t in tests_of(m) if not (ROOT / t.split("::")[0]).is_file()]
        if missing:
            raise SystemExit(f"mutant {m['name']}: no such test file {missing}")


def scratch_copy(into: Path) -> Path:
    """The working tree's files that git tracks or would track, copied under ``into``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def run_tests(tree: Path, tests: list[str]) -> tuple[int, str]:
    env = os.environ | {"PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1",  # no stale .pyc across mutants
                        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run([sys.executable, *PYTEST, *tests], cwd=tree, env=env, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def run_mutant(tree: Path, mutant: dict) -> tuple[str, float, str]:
    """(verdict, seconds, pytest's output): verdict is the first failing test, SURVIVED or ERROR."""
    path = tree / mutant["file"]
    original = path.read_text()
    path.write_text(original.replace(mutant["old"], mutant["new"], 1))
    start = time.perf_counter()
    try:
        rc, output = run_tests(tree, tests_of(mutant))
    finally:
        path.write_text(original)
    seconds = time.perf_counter() - start
    failed = FAILED.search(output)
    if rc == 0:
        return "SURVIVED", seconds, output
    if rc == 1 and failed:
        return failed.group(1), seconds, output
    return f"ERROR (pytest exit {rc})", seconds, output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="run only the mutants whose name contains one of these")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="mutants at a time (one scratch copy each)")
    parser.add_argument("--list", action="store_true", help="list the mutants and their tests, run nothing")
    parser.add_argument("--baseline", action="store_true", help="first run the selected tests on the unmutated tree")
    parser.add_argument("-v", "--verbose", action="store_true", help="print pytest's output of survivors and errors")
    args = parser.parse_args(argv)

    names = {m["name"] for m in MUTANTS}
    if len(names) != len(MUTANTS):
        raise SystemExit("two mutants share a name")
    selected = [m for m in MUTANTS if not args.names or any(n in m["name"] for n in args.names)]
    if not selected:
        raise SystemExit(f"no mutant matches {args.names}: see python tools/mutants.py --list")
    check(selected)
    if args.list:
        for m in selected:
            print(f"{m['name']:32} {m['file']:28} {' '.join(tests_of(m))}")
        for m in EQUIVALENT:
            print(f"{m['name']:32} {m['file']:28} equivalent: {m['why']}")
        return 0

    with tempfile.TemporaryDirectory(prefix="zoo-mutants-") as scratch:
        trees = [scratch_copy(Path(scratch) / f"tree{i}") for i in range(max(1, args.jobs))]
        if args.baseline:
            tests = list(dict.fromkeys(t for m in selected for t in tests_of(m)))
            rc, output = run_tests(trees[0], tests)
            if rc != 0:
                print(output[-4000:])
                raise SystemExit("the selected tests fail on the unmutated tree: fix that first")
            print(f"baseline: {len(tests)} test files/ids pass unmutated")
        free = list(trees)

        def one(mutant: dict) -> tuple[dict, str, float, str]:
            tree = free.pop()
            try:
                return (mutant, *run_mutant(tree, mutant))
            finally:
                free.append(tree)

        start = time.perf_counter()
        print(f"{'mutant':32} {'file':28} {'caught by':60} {'s':>6}")
        results = []
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for mutant, verdict, seconds, output in pool.map(one, selected):
                results.append(verdict)
                print(f"{mutant['name']:32} {mutant['file']:28} {verdict:60} {seconds:6.1f}", flush=True)
                if args.verbose and (verdict == "SURVIVED" or verdict.startswith("ERROR")):
                    print(output[-3000:])
    bad = [v for v in results if v == "SURVIVED" or v.startswith("ERROR")]
    print(f"\n{len(results) - len(bad)} of {len(results)} mutants caught in {time.perf_counter() - start:.0f} s; "
          f"{len(EQUIVALENT)} equivalent mutants listed, not run (--list)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
