#!/usr/bin/env python3
"""Runs every tests/unit/test_*.py in its own interpreter and reports each file.

    python .github/scripts/run_unit_tests.py --timeout 300 [FILE ...] [-- PYTEST_ARGS ...]

One file can take the whole interpreter down (on hardware, an invalid device address kills the
process before pytest reports anything), so each file gets a fresh `python -m pytest FILE`; one
bad file then costs only its own results. A file passes when pytest exits 0. With
UNIT_TESTS_ALLOW_TEARDOWN_CRASH=1, a file whose interpreter dies from a signal *after* pytest
printed a complete, clean summary (tests passed, none failed or errored) also passes: some
containers fault in library destructors at exit. A signal before the summary is always a
failure. The last line printed is "N passed, M failed" (files); the exit status is 1 if any
file failed.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ALLOW_ENV = "UNIT_TESTS_ALLOW_TEARDOWN_CRASH"

# "==== 3 passed, 1 skipped in 0.52s ====" or, with -q, "3 passed, 1 skipped in 0.52s".
_SUMMARY = re.compile(
    r"^=*\s*(?P<counts>\d+ [a-z]+(?:, \d+ [a-z]+)*) in [\d.]+s(?: \([^)]*\))?\s*=*$"
)
_COUNT = re.compile(r"(\d+) ([a-z]+)")
_BAD_OUTCOMES = ("failed", "error", "errors")
_GOOD_OUTCOMES = ("passed", "skipped", "xfailed", "xpassed", "deselected", "warning", "warnings")


@dataclass
class FileResult:
    path: str
    status: str  # pass, fail, crash, timeout
    returncode: int | None
    seconds: float
    counts: dict[str, int] = field(default_factory=dict)
    note: str = ""
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "pass"


def parse_summary(output: str) -> dict[str, int] | None:
    """The counts of pytest's final summary line, or None when pytest printed none."""
    for line in reversed(output.splitlines()):
        match = _SUMMARY.match(line.strip())
        if match:
            return {name: int(n) for n, name in _COUNT.findall(match.group("counts"))}
    return None


def is_clean_summary(counts: dict[str, int] | None) -> bool:
    """True for a complete summary that ran tests and reported no failure or error."""
    if not counts:
        return False
    if any(counts.get(name, 0) for name in _BAD_OUTCOMES):
        return False
    if any(name not in _GOOD_OUTCOMES for name in counts):
        return False
    return counts.get("passed", 0) + counts.get("xfailed", 0) + counts.get("skipped", 0) > 0


def classify(
    returncode: int | None, output: str, timed_out: bool, allow_teardown_crash: bool
) -> tuple[str, dict[str, int], str]:
    """(status, counts, note) of one file's run."""
    counts = parse_summary(output) or {}
    if timed_out:
        return "timeout", counts, ""
    if returncode == 0:
        return "pass", counts, ""
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        summary = parse_summary(output)
        if is_clean_summary(summary):
            if allow_teardown_crash:
                return (
                    "pass",
                    counts,
                    f"{name} during interpreter teardown, tolerated by {ALLOW_ENV}=1",
                )
            return "crash", counts, f"{name} after a clean summary (set {ALLOW_ENV}=1 to tolerate)"
        if summary is not None:
            return "crash", counts, f"{name} after a summary that reports failures"
        return "crash", counts, f"{name} before pytest's summary"
    if returncode == 5:
        return "fail", counts, "no tests collected"
    return "fail", counts, f"pytest exit status {returncode}"


def run_file(path: Path, pytest_args: list[str], timeout: float, allow: bool) -> FileResult:
    # Plain output whatever the terminal: the summary line is parsed.
    cmd = [sys.executable, "-m", "pytest", str(path), "--color=no", *pytest_args]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,  # a timeout kills the file's whole process group
    )
    timed_out = False
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    seconds = time.monotonic() - start
    status, counts, note = classify(proc.returncode, output, timed_out, allow)
    if timed_out:
        note = f"killed after {timeout:g}s"
    return FileResult(_display(path), status, proc.returncode, seconds, counts, note, output)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _format_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in counts.items()) or "no summary"


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    own, pytest_args = split_argv(list(sys.argv[1:] if argv is None else argv))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=300, help="seconds per file (300)")
    parser.add_argument(
        "--unit-dir",
        type=Path,
        default=REPO_ROOT / "tests" / "unit",
        help="directory whose test_*.py files run (tests/unit)",
    )
    parser.add_argument("files", nargs="*", type=Path, help="run only these files")
    args = parser.parse_args(own)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")

    files = args.files or sorted(args.unit_dir.glob("test_*.py"))
    if not files:
        print(f"no test_*.py files in {args.unit_dir}")
        print("0 passed, 1 failed")
        return 1
    allow = os.environ.get(ALLOW_ENV, "") == "1"

    results = []
    for path in files:
        result = run_file(path, pytest_args, args.timeout, allow)
        results.append(result)
        line = (
            f"{result.status.upper():8} {result.path} ({_format_counts(result.counts)}) "
            f"{result.seconds:.1f}s"
        )
        print(line + (f" [{result.note}]" if result.note else ""), flush=True)
        if not result.ok:
            tail = "\n".join(result.output.rstrip().splitlines()[-60:])
            print(f"---- output of {result.path} (last 60 lines) ----\n{tail}\n----", flush=True)

    failed = [r for r in results if not r.ok]
    if failed:
        print("failed files: " + ", ".join(f"{r.path} ({r.status})" for r in failed))
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
