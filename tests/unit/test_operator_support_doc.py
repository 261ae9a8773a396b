"""docs/reference/operator-support.md is generated from the shipped tables, never edited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_operator_support_doc_matches_the_tables():
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_operator_support.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr
