"""The per-file unit runner: statuses, the teardown-crash tolerance, timeouts and its summary.

The fake test files import nothing heavy so each child interpreter starts quickly.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / ".github" / "scripts" / "run_unit_tests.py"


def _load_runner():
    spec = importlib.util.spec_from_file_location("run_unit_tests", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["run_unit_tests"] = module
    spec.loader.exec_module(module)
    return module


runner = _load_runner()

PASS_THEN_ABORT = """
import atexit, os
atexit.register(os.abort)  # runs after pytest printed its summary

def test_one():
    assert 1 + 1 == 2

def test_two():
    assert "a".upper() == "A"
"""

ABORT_IN_TEST = """
import os

def test_ok():
    assert True

def test_dies():
    os.abort()
"""

FAILING = """
def test_good():
    assert True

def test_bad():
    assert 1 == 2
"""

PASSING = """
import pytest

def test_a():
    assert [1, 2][::-1] == [2, 1]

@pytest.mark.skip(reason="demonstrates a skip")
def test_skipped():
    pass
"""

FAIL_THEN_ABORT = """
import atexit, os
atexit.register(os.abort)

def test_bad():
    assert False
"""

SLOW = """
import time
time.sleep(60)

def test_never():
    pass
"""


def write_files(directory: Path, files: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(textwrap.dedent(text))


def run_runner(args: list[str], allow: bool | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(runner.ALLOW_ENV, None)
    if allow is not None:
        env[runner.ALLOW_ENV] = "1" if allow else "0"
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def status_lines(stdout: str) -> dict[str, str]:
    """File name -> status word, from the runner's per-file lines."""
    result = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("PASS", "FAIL", "CRASH", "TIMEOUT"):
            result[Path(parts[1]).name] = parts[0]
    return result


@pytest.fixture(scope="module")
def fake_unit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("fake_unit")
    write_files(
        directory,
        {
            "test_pass_then_abort.py": PASS_THEN_ABORT,
            "test_abort_in_test.py": ABORT_IN_TEST,
            "test_failing.py": FAILING,
            "test_passing.py": PASSING,
            "test_fail_then_abort.py": FAIL_THEN_ABORT,
            "helper_not_a_test.py": "raise SystemExit('must not run')",
        },
    )
    return directory


@pytest.fixture(scope="module")
def allowed_run(fake_unit_dir: Path) -> subprocess.CompletedProcess:
    return run_runner(
        ["--timeout", "120", "--unit-dir", str(fake_unit_dir), "--", "-p", "no:cacheprovider"],
        allow=True,
    )


def test_teardown_crash_after_clean_summary_passes_when_allowed(
    allowed_run: subprocess.CompletedProcess,
) -> None:
    statuses = status_lines(allowed_run.stdout)
    assert statuses["test_pass_then_abort.py"] == "PASS", allowed_run.stdout
    assert "SIGABRT during interpreter teardown" in allowed_run.stdout


def test_crash_before_summary_fails_even_when_allowed(
    allowed_run: subprocess.CompletedProcess,
) -> None:
    statuses = status_lines(allowed_run.stdout)
    assert statuses["test_abort_in_test.py"] == "CRASH", allowed_run.stdout
    assert statuses["test_fail_then_abort.py"] == "CRASH", allowed_run.stdout


def test_statuses_counts_summary_and_exit_code(allowed_run: subprocess.CompletedProcess) -> None:
    statuses = status_lines(allowed_run.stdout)
    assert statuses == {
        "test_abort_in_test.py": "CRASH",
        "test_fail_then_abort.py": "CRASH",
        "test_failing.py": "FAIL",
        "test_pass_then_abort.py": "PASS",
        "test_passing.py": "PASS",
    }
    assert "(1 failed, 1 passed)" in allowed_run.stdout
    assert "(1 passed, 1 skipped)" in allowed_run.stdout
    assert allowed_run.stdout.rstrip().splitlines()[-1] == "2 passed, 3 failed"
    assert allowed_run.returncode == 1


@pytest.mark.parametrize("allow", [None, False])
def test_teardown_crash_is_a_failure_without_the_switch(fake_unit_dir: Path, allow) -> None:
    target = str(fake_unit_dir / "test_pass_then_abort.py")
    done = run_runner(["--timeout", "120", target], allow=allow)
    assert status_lines(done.stdout) == {"test_pass_then_abort.py": "CRASH"}, done.stdout
    assert "after a clean summary" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "0 passed, 1 failed"
    assert done.returncode == 1


def test_extra_pytest_args_after_double_dash_and_exit_zero(fake_unit_dir: Path) -> None:
    # Without `-k good` this file fails; the extra args reach pytest and make it pass.
    target = str(fake_unit_dir / "test_failing.py")
    done = run_runner(["--timeout", "120", target, "--", "-k", "good"], allow=None)
    assert status_lines(done.stdout) == {"test_failing.py": "PASS"}, done.stdout
    assert "1 passed, 1 deselected" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "1 passed, 0 failed"
    assert done.returncode == 0


def test_timeout_kills_and_fails(tmp_path: Path) -> None:
    write_files(tmp_path, {"test_slow.py": SLOW})
    done = run_runner(["--timeout", "1", str(tmp_path / "test_slow.py")], allow=True)
    assert status_lines(done.stdout) == {"test_slow.py": "TIMEOUT"}, done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "0 passed, 1 failed"
    assert done.returncode == 1


@pytest.mark.parametrize(
    "line,expected",
    [
        ("===== 3 passed in 0.52s =====", {"passed": 3}),
        ("3 passed, 1 skipped in 0.52s", {"passed": 3, "skipped": 1}),
        ("=== 1 failed, 2 passed, 1 warning in 1.00s (0:00:01) ===", None),
        ("==== 2 passed, 1 error in 0.1s ====", None),
        ("==== 4 passed, 2 xfailed, 3 warnings in 2.0s ====", {"passed": 4, "xfailed": 2}),
    ],
)
def test_parse_and_clean_summary(line: str, expected: dict | None) -> None:
    counts = runner.parse_summary("collected 3 items\n\n" + line + "\n")
    assert counts is not None
    assert runner.is_clean_summary(counts) == (expected is not None)
    if expected:
        assert {k: counts[k] for k in expected} == expected


def test_no_summary_is_never_clean() -> None:
    assert (
        runner.parse_summary("collected 2 items\ntest_x.py .Fatal Python error: Aborted\n") is None
    )
    assert not runner.is_clean_summary(None)
    assert not runner.is_clean_summary({})


def test_classify() -> None:
    clean = "===== 2 passed in 0.1s =====\n"
    dirty = "===== 1 failed, 1 passed in 0.1s =====\n"
    assert runner.classify(0, clean, False, False)[0] == "pass"
    assert runner.classify(1, dirty, False, True)[0] == "fail"
    assert runner.classify(-6, clean, False, True)[0] == "pass"
    assert runner.classify(-6, clean, False, False)[0] == "crash"
    assert runner.classify(-11, dirty, False, True)[0] == "crash"
    assert runner.classify(-11, "test_x.py .", False, True)[0] == "crash"
    assert runner.classify(None, "", True, True)[0] == "timeout"
    assert runner.classify(5, "no tests ran in 0.01s", False, True)[0] == "fail"
