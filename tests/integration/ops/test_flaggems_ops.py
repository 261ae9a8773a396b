"""FlagGems on the H200: every operator the shipped backends_flaggems.conf routes to
flagos_python matches the cuda route on recorded calls in every input variant, and the main
operator suite matches native cuda with that table in force. Skipped without a cuda build or
without FlagGems."""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.integration.ops.cases import TOLERANCE_BF16, OpCase, all_params, run_case
from torch_fl import flaggems, routing
from torch_fl.tools._verify import _cases, _check, _record

pytestmark = [pytest.mark.flaggems, pytest.mark.flaggems_python, pytest.mark.gpu]

# The table FlagGems' routes come from: backends_dcu.conf on DCU (backends_flaggems.conf with
# some operators pinned back), backends_flaggems.conf on NVIDIA.
TABLE = routing.CONFIG_DIR / (
    "backends_dcu.conf" if torch_fl.build_config.ACCELERATOR == "dcu" else "backends_flaggems.conf"
)


def routed_ops() -> list[str]:
    final = {op: r for op, r, *_ in routing.parse_table(TABLE, check_available=False)}
    return sorted(op for op, r in final.items() if r == "flagos_python")


@pytest.fixture(scope="module", autouse=True)
def flaggems_available() -> None:
    if torch_fl.build_config.ACCELERATOR not in ("cuda", "dcu"):
        pytest.skip("FlagGems runs on the cuda and dcu accelerators only")
    try:
        flaggems.load()
    except Exception as exc:
        pytest.skip(f"FlagGems is not importable: {exc}")


@pytest.fixture(scope="module")
def recorded() -> dict[str, list[_record.Call]]:
    return _record.record(routed_ops(), per_op=1, budget_s=40)


@pytest.fixture
def flaggems_table():
    """The shipped table's routes, whatever table this build has in force."""
    ops = routed_ops()
    flaggems.install(ops)
    previous = {op: routing._C._routing_get_override(op) for op in ops}
    for op in ops:
        routing.set_route(op, "flagos_python")
    yield ops
    for op, route in previous.items():
        routing.set_route(op, route)


OPS = routed_ops() or [pytest.param("none", marks=pytest.mark.skip("the table routes nothing"))]


@pytest.mark.parametrize("op", OPS)
def test_routed_operator_matches_cuda(op: str, recorded, flaggems_table) -> None:
    calls = recorded.get(op, [])
    if not calls:
        pytest.skip(f"no recorded call of {op}")
    overload = flaggems.aten_overload(op)
    cases = _cases.cases(
        overload, calls, "flagos", ["float32", "float16", "bfloat16"], list(_cases.VARIANTS)
    )
    verdict = _check.compare(op, overload, cases, "cuda")
    assert verdict.matched, verdict.failure
    assert verdict.cases > 0


PARAMS = all_params()


@pytest.mark.parametrize(
    ("case", "dtype"), PARAMS, ids=[f"{c.name}-{str(d).removeprefix('torch.')}" for c, d in PARAMS]
)
def test_op_suite_with_flaggems_table(
    case: OpCase, dtype: torch.dtype, cuda_reference: dict, flaggems_table
) -> None:
    reference = cuda_reference[f"{case.name}-{dtype}"]
    assert "error" not in reference, f"cuda reference failed: {reference.get('error')}"
    actual = run_case(case, dtype, "flagos")
    tol = TOLERANCE_BF16 if dtype == torch.bfloat16 else {"rtol": case.rtol, "atol": case.atol}
    for got, want in zip(actual["outputs"], reference["outputs"], strict=True):
        torch.testing.assert_close(got, want, **tol)
    for got, want in zip(actual["grads"], reference["grads"], strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got, want, **tol)
