"""python -m torch_fl.tools.verify_routes end to end on the cpu accelerator, against the fake
FlagGems of tests/fixtures: a matching kernel is routed, a wrong one is kept with the failing
case named, a slow one with how much slower, views and CompositeImplicit operators are never
routed, and --resume continues from the state file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_python

FAKE = REPO_ROOT / "tests" / "fixtures" / "fake_flag_gems"
OPS = "add.Tensor,add.out,sub.Tensor,neg,transpose.int,pad,sqrt,relu"


def tool(tmp: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{REPO_ROOT}:{FAKE}", **(env or {}))
    env.pop("GEMS_VENDOR", None)
    args = [
        sys.executable, "-m", "torch_fl.tools.verify_routes",
        "--out", str(tmp / "backends_flaggems.conf"),
        "--json", str(tmp / "report.json"),
        "--state", str(tmp / "state.jsonl"),
        "--no-opinfo", "--reps", "5", "--dtypes", "float32,bfloat16",
        # CPU timing of Python kernels is noisy at these sizes; the slow fake is 2 ms a call.
        "--slower-tolerance", "5",
        *extra,
    ]  # fmt: skip
    return subprocess.run(args, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    tmp = tmp_path_factory.mktemp("verify")
    result = tool(tmp, "--ops", OPS)
    assert result.returncode == 0, result.stdout + result.stderr
    return tmp, result


def test_conf_routes_matching_operators_only(first_run) -> None:
    tmp, _ = first_run
    text = (tmp / "backends_flaggems.conf").read_text()
    routed = [line for line in text.splitlines() if line.endswith("= flagos_python")]
    # Each routes the dtypes its cases covered (--dtypes float32,bfloat16), no other.
    assert routed == [
        f"{op} [dtype = bfloat16|float32] = flagos_python"
        for op in ("add.Tensor", "add.out", "relu")
    ]


def test_conf_header_gives_provenance_and_reasons(first_run) -> None:
    tmp, _ = first_run
    text = (tmp / "backends_flaggems.conf").read_text()
    assert "python -m torch_fl.tools.verify_routes" in text
    assert "flag-gems 0.0.fake" in text and "torch " in text and "triton" in text
    reasons = {line.split()[1]: line for line in text.splitlines() if line.startswith("#   ")}
    assert "mismatch: sample 0, float32, transposed" in reasons["sub.Tensor"]
    assert "slower by" in reasons["neg"] and "us per call" in reasons["neg"]
    assert "view:" in reasons["transpose.int"]
    assert "composite: CompositeImplicitAutograd" in reasons["pad"]
    assert "missing:" in reasons["sqrt"]


def test_conf_is_a_valid_table(first_run) -> None:
    import torch_fl  # noqa: F401
    from torch_fl import routing

    tmp, _ = first_run
    lines = routing.parse_table(tmp / "backends_flaggems.conf", check_available=False)
    assert {op for op, route, *_ in lines} == {"aten::add.Tensor", "aten::add.out", "aten::relu"}
    assert {condition for *_, condition in lines} == {"dtype = bfloat16|float32"}


def test_json_report(first_run) -> None:
    tmp, _ = first_run
    report = json.loads((tmp / "report.json").read_text())
    results = report["results"]
    assert results["aten::add.Tensor"]["decision"] == "flagos_python"
    assert results["aten::add.Tensor"]["cases"] >= 5
    assert results["aten::add.Tensor"]["dtypes"] == ["bfloat16", "float32"]
    assert set(results["aten::add.Tensor"]["timing"]) == {"ref_us", "flagos_python_us", "case"}
    assert results["aten::sub.Tensor"]["category"] == "mismatch"
    assert report["reference_route"] == "cpu_fallback" and report["pending"] == []


def test_resume_keeps_results_and_marks_a_crashed_operator(tmp_path: Path, first_run) -> None:
    tmp, _ = first_run
    state = (tmp / "state.jsonl").read_text()
    # A run that died while verifying mul.Tensor: a start without a result.
    (tmp_path / "state.jsonl").write_text(state + '{"op": "aten::mul.Tensor", "event": "start"}\n')
    result = tool(tmp_path, "--ops", OPS + ",mul.Tensor", "--resume")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "add.Tensor:" not in result.stdout  # not verified again
    text = (tmp_path / "backends_flaggems.conf").read_text()
    assert "mul.Tensor" in text and "crashed: the process died" in text
    assert "add.Tensor [dtype = bfloat16|float32] = flagos_python" in text


def test_resume_verifies_again_a_result_without_dtypes(tmp_path: Path, first_run) -> None:
    """A state file from before results named their dtypes would route every dtype."""
    tmp, _ = first_run
    records = [json.loads(line) for line in (tmp / "state.jsonl").read_text().splitlines()]
    for record in records:
        if record["op"] == "aten::relu" and "decision" in record:
            del record["dtypes"]
    (tmp_path / "state.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = tool(tmp_path, "--ops", OPS, "--resume")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "relu: routed" in result.stdout and "add.Tensor:" not in result.stdout
    text = (tmp_path / "backends_flaggems.conf").read_text()
    assert "relu [dtype = bfloat16|float32] = flagos_python" in text
    assert "crashed" not in text


def test_time_budget_leaves_operators_pending(tmp_path: Path) -> None:
    result = tool(tmp_path, "--ops", "add.Tensor,relu", "--time-budget", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    text = (tmp_path / "backends_flaggems.conf").read_text()
    assert "not-verified: the run's time budget ran out" in text
    assert "= flagos_python" not in text


def test_unverified_dtypes_keep_the_reference_route(tmp_path: Path) -> None:
    """The fake's exp computes in float32: verified in float32 and bfloat16 it is routed for
    those dtypes only, so float64 calls (a gradcheck) keep the exact reference route; a line
    routing every dtype would hand them to the float32 kernel and fail the gradcheck."""
    result = tool(tmp_path, "--ops", "exp")
    assert result.returncode == 0, result.stdout + result.stderr
    conf = tmp_path / "backends_flaggems.conf"
    assert "exp [dtype = bfloat16|float32] = flagos_python" in conf.read_text()
    check = run_python(
        f"""
import torch, torch_fl
from torch.autograd.gradcheck import GradcheckError
from torch_fl import flaggems, routing
routing.load_table({str(conf)!r})
assert flaggems.install(flaggems.routed_to_python()) == ["aten::exp"]
x = torch.randn(3, 4, dtype=torch.float64, device="flagos", requires_grad=True)
routing.reset_stats()
assert torch.autograd.gradcheck(torch.exp, (x,))
torch.exp(torch.randn(4, device="flagos"))
stats = routing.stats()["aten::exp"]
assert set(stats) == {{routing.default_route(), "flagos_python"}}, stats
assert stats["flagos_python"] == 1, stats
routing.set_route("exp", "flagos_python")  # every dtype, as a plain line would route
try:
    torch.autograd.gradcheck(torch.exp, (x,))
except GradcheckError:
    print("float32 arithmetic fails the float64 gradcheck")
""",
        env={"PYTHONPATH": f"{REPO_ROOT}:{FAKE}", "GEMS_VENDOR": None},
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "float32 arithmetic fails the float64 gradcheck" in check.stdout


def test_a_dtype_that_differs_is_left_out(tmp_path: Path) -> None:
    """The fake's tanh is wrong in bfloat16 only: routed for float16 and float32, with the
    bfloat16 case named in the header and the report; bfloat16 calls keep the reference route.
    A wrong float32 or non-contiguous case still fails the whole operator (sub.Tensor)."""
    result = tool(tmp_path, "--ops", "tanh,sub.Tensor", "--dtypes", "float32,float16,bfloat16")
    assert result.returncode == 0, result.stdout + result.stderr
    conf = tmp_path / "backends_flaggems.conf"
    text = conf.read_text()
    routed = [line for line in text.splitlines() if line.endswith("= flagos_python")]
    assert routed == ["tanh [dtype = float16|float32] = flagos_python"]
    assert "#   tanh in bfloat16: sample 0, bfloat16, contiguous" in text
    report = json.loads((tmp_path / "report.json").read_text())["results"]
    assert set(report["aten::tanh"]["excluded_dtypes"]) == {"bfloat16"}
    assert "not in bfloat16" in report["aten::tanh"]["detail"]
    assert report["aten::sub.Tensor"]["category"] == "mismatch"
    check = run_python(
        f"""
import torch, torch_fl
from torch_fl import flaggems, routing
routing.load_table({str(conf)!r})
flaggems.install(flaggems.routed_to_python())
x = torch.randn(8, 16)
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    routing.reset_stats()
    got = torch.tanh(x.to(dtype).to("flagos")).cpu()
    torch.testing.assert_close(got, x.to(dtype).tanh())
    print(dtype, sorted(routing.stats()["aten::tanh"]))
""",
        env={"PYTHONPATH": f"{REPO_ROOT}:{FAKE}", "GEMS_VENDOR": None},
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "torch.float32 ['flagos_python']" in check.stdout
    assert "torch.float16 ['flagos_python']" in check.stdout
    assert "torch.bfloat16 ['cpu_fallback']" in check.stdout


def test_an_operator_out_of_time_is_a_timeout(tmp_path: Path) -> None:
    """The per-operator timer firing inside a FlagGems kernel ends the operator as `timeout`;
    it is not that case's failure (a `mismatch`), nor a dtype to leave out."""
    env = {"FAKE_FLAG_GEMS_SLOW_SECONDS": "5"}
    result = tool(tmp_path, "--ops", "neg", "--op-timeout", "1", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "report.json").read_text())["results"]
    assert report["aten::neg"]["category"] == "timeout", report["aten::neg"]
    assert "neg  timeout: not done in 1 s" in (tmp_path / "backends_flaggems.conf").read_text()
