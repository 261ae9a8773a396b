"""flagos against the native device for the common training and inference operators, forward
and backward: against cuda on the cuda accelerator, against the CPU on the cpu accelerator."""

from __future__ import annotations

import pytest
import torch

from tests.integration.ops.cases import TOLERANCE_BF16, OpCase, all_params, run_case

PARAMS = all_params()


@pytest.mark.parametrize(
    ("case", "dtype"), PARAMS, ids=[f"{c.name}-{str(d).removeprefix('torch.')}" for c, d in PARAMS]
)
def test_op_matches_native(
    case: OpCase, dtype: torch.dtype, reference_device: str, request: pytest.FixtureRequest
) -> None:
    if reference_device == "cuda":
        reference = request.getfixturevalue("cuda_reference")[f"{case.name}-{dtype}"]
        assert "error" not in reference, f"cuda reference failed: {reference.get('error')}"
    else:
        reference = run_case(case, dtype, "cpu")
    actual = run_case(case, dtype, "flagos")
    tol = TOLERANCE_BF16 if dtype == torch.bfloat16 else {"rtol": case.rtol, "atol": case.atol}
    assert len(actual["outputs"]) == len(reference["outputs"])
    for got, want in zip(actual["outputs"], reference["outputs"], strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, **tol)
    assert len(actual["grads"]) == len(reference["grads"])
    if case.grad:
        assert any(g is not None for g in actual["grads"]), f"{case.name}: no input gradient"
    for got, want in zip(actual["grads"], reference["grads"], strict=True):
        assert (got is None) == (want is None)
        if got is not None:
            torch.testing.assert_close(got, want, **tol)


def test_results_stay_on_flagos() -> None:
    x = torch.randn(4, 4, device="flagos", requires_grad=True)
    y = torch.nn.functional.softmax(x @ x, dim=-1).sum()
    y.backward()
    assert y.device.type == "flagos" and x.grad.device.type == "flagos"
