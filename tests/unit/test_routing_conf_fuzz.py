"""Fuzzes the routing-table parser (libFuzzer with ASan/LSan/UBSan) for 100k inputs.

Needs clang++ (libFuzzer ships with clang: `apt-get install -y clang`); skipped without it.
FLAGOS_FUZZ_RUNS changes the number of inputs (for longer local runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "fuzz" / "run_conf_fuzz.sh"


@pytest.mark.skipif(
    shutil.which(os.environ.get("CLANG_CXX", "clang++")) is None,
    reason="clang++ not installed (libFuzzer ships with clang: apt-get install -y clang)",
)
def test_conf_parser_survives_100k_fuzz_inputs():
    runs = os.environ.get("FLAGOS_FUZZ_RUNS", "100000")
    r = subprocess.run(["bash", str(SCRIPT), runs], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Done {runs} runs" in r.stdout + r.stderr
