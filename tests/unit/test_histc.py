"""torch.histc on flagos counts integer tensors, as CUDA's histc does (CPU's refuses them), and
floating ones exactly as CPU."""

from __future__ import annotations

import pytest
import torch

import torch_fl.routing

INTEGER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


def _values(dtype: torch.dtype) -> torch.Tensor:
    low = 0 if dtype == torch.uint8 else -5
    return torch.randint(low, 9, (64,), generator=torch.Generator().manual_seed(0)).to(dtype)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
@pytest.mark.parametrize("bounds", [(0, 3), (0, 0), (-2, 7), (4, 4)])
def test_integer_histogram_counts_like_a_float_one(dtype: torch.dtype, bounds) -> None:
    x = _values(dtype)
    lo, hi = bounds
    got = torch.histc(x.to("flagos"), bins=4, min=lo, max=hi)
    assert got.device.type == "flagos" and got.dtype == dtype
    want = torch.histc(x.double(), bins=4, min=lo, max=hi)
    assert torch.equal(got.cpu(), want.to(dtype))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
@pytest.mark.parametrize("bounds", [(0.5, 3.5), (-2.7, 6.9), (0.2, 0.7), (1.9, 2.1)])
def test_integer_histogram_truncates_fractional_bounds_as_cuda(dtype: torch.dtype, bounds) -> None:
    # CUDA's histc converts the bounds to the integer accumulate type before counting.
    x = _values(dtype)
    lo, hi = bounds
    got = torch.histc(x.to("flagos"), bins=3, min=lo, max=hi)
    want = torch.histc(x.double(), bins=3, min=int(lo), max=int(hi))
    assert torch.equal(got.cpu(), want.to(dtype))


def test_integer_histogram_out() -> None:
    x = _values(torch.int32)
    out = torch.empty(0, dtype=torch.int32, device="flagos")
    assert torch.histc(x.to("flagos"), bins=5, min=-5, max=8, out=out) is out
    assert torch.equal(out.cpu(), torch.histc(x.double(), bins=5, min=-5, max=8).int())
    # As CUDA's: the counts are copied into an out of another dtype.
    floats = torch.empty(0, device="flagos")
    torch.histc(x.to("flagos"), bins=5, min=-5, max=8, out=floats)
    assert floats.dtype == torch.float32 and torch.equal(floats.cpu(), out.cpu().float())


def test_floating_histogram_is_routed_and_equals_cpu() -> None:
    x = torch.randn(100, generator=torch.Generator().manual_seed(1))
    torch_fl.routing.reset_stats()
    got = torch.histc(x.to("flagos"), bins=7, min=-2, max=2)
    assert "aten::histc" in torch_fl.routing.stats()
    assert torch_fl.routing.reaches_router("histc")
    torch.testing.assert_close(got.cpu(), torch.histc(x, bins=7, min=-2, max=2))


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_unsigned_wide_integers_are_refused_as_on_cpu_and_cuda(dtype: torch.dtype) -> None:
    # CUDA's histc takes the classic integer dtypes only; these stay refused, as on CPU.
    with pytest.raises(NotImplementedError, match="not implemented"):
        torch.histc(torch.arange(3).to(dtype).to("flagos"), bins=3)


def test_integer_histogram_refuses_what_cpu_refuses() -> None:
    x = _values(torch.int32).to("flagos")
    with pytest.raises(RuntimeError, match="bins"):
        torch.histc(x, bins=0)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x, bins=3, min=5, max=1)
