"""benchmarks/decoding.py at a tiny shape: every family's cached greedy decoding in the zoo gives
transformers' ``generate`` tokens on the same converted weights, and the Mistral cache's bytes stop
growing once the window is full (the script's own rows, as a user reads them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_decoding_benchmark_rows_say_same_tokens_and_a_flat_rolling_cache():
    out = subprocess.run(
        [sys.executable, "benchmarks/decoding.py", "--layers", "2", "--width", "32", "--heads", "4", "--ff", "64",
         "--vocab", "97", "--prompt", "11", "--new-tokens", "6", "--window", "8", "--cache-tokens", "16",
         "--repeats", "1", "--batches", "1", "3"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("| ")]
    decoded = [[cell.strip() for cell in row] for row in rows if len(row) == 6 and row[0].strip() != "family"]
    assert sorted({row[0] for row in decoded}) == ["gpt2", "llama", "mistral", "t5"]
    assert len(decoded) == 8 and all(row[5] == "yes" for row in decoded), decoded
    cache = [[int(cell) for cell in row] for row in rows if len(row) == 4 and row[0].strip().isdigit()]
    assert [row[0] for row in cache] == [4, 8, 16]  # window // 2, window, 2 x window (= --cache-tokens)
    zoo_kib = {row[2] for row in cache}
    assert len(zoo_kib) == 1 and zoo_kib == {row[3] for row in cache}, cache  # flat, as transformers' cache
