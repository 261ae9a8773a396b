"""Layouts through the cpu_fallback that copies to host (a device accelerator's, and every
operator of a default dcu build): written tensors, views and out= results behave as on CPU.

On the cpu accelerator the copying fallback is forced with the test hook the other routing tests
use; each test also runs without it (zero-copy aliases, CPU's kernels). On the cuda build the
hook reaches only cpu_fallback operators, and the others run CUDA's kernels, compared with cuda
where the two devices legitimately differ.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import torch_fl

# The kernels flagos runs on a build's accelerator: CPU's, or CUDA's over aliases (where the
# forced host copies apply only to operators routed to cpu_fallback).
NATIVE = "cpu" if torch_fl.build_config.ACCELERATOR == "cpu" else "cuda"
# Elements written twice by one kernel race on a GPU; only CPU's kernels define the result.
cpu_kernels_only = pytest.mark.skipif(
    NATIVE != "cpu", reason="overlapping writes race in GPU kernels; compared on the cpu build"
)


@pytest.fixture(params=["aliases", "host copies"], autouse=True)
def fallback_mapping(request):
    torch_fl._C._routing_set_force_copy_fallback(request.param == "host copies")
    yield request.param
    torch_fl._C._routing_set_force_copy_fallback(False)


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("device", ["cpu", "flagos"])
def test_metadata_views_share_the_callers_memory(device: str) -> None:
    a = torch.zeros(6, device=device)
    windows = a.unfold(0, 2, 2)
    assert shares_memory(windows, a) and windows._base is a
    windows[0, 0] = 5
    z = torch.zeros(3, dtype=torch.complex64, device=device)
    z.real.fill_(1)
    z.imag.fill_(2)
    pairs = torch.zeros(3, 2, device=device)
    torch.view_as_complex(pairs)[0] = 1 + 2j
    assert a.tolist() == [5.0, 0, 0, 0, 0, 0]
    assert z.cpu().tolist() == [1 + 2j] * 3
    assert pairs[0].tolist() == [1.0, 2.0]


def test_an_in_place_update_through_unfold_reaches_the_gradient() -> None:
    def run(device: str) -> torch.Tensor:
        x = torch.arange(6.0, device=device, requires_grad=True)
        y = x * 1
        y.unfold(0, 2, 2).mul_(3)
        (y * y).sum().backward()
        return x.grad.cpu()

    torch.testing.assert_close(run("flagos"), run("cpu"))


OUT_CASES: dict[str, Callable[[str], torch.Tensor]] = {
    "add of a channels-last input": lambda d: torch.add(
        torch.arange(120.0, device=d)
        .reshape(2, 3, 4, 5)
        .contiguous(memory_format=torch.channels_last),
        1,
        out=torch.empty(0, device=d),
    ),
    "exp of a transposed input": lambda d: torch.exp(
        torch.arange(20.0, device=d).reshape(5, 4).t(), out=torch.empty(0, device=d)
    ),
    "sort of a transposed input": lambda d: torch.sort(
        torch.arange(20.0, device=d).reshape(5, 4).t(),
        0,
        out=(torch.empty(0, device=d), torch.empty(0, dtype=torch.long, device=d)),
    )[0],
}


@pytest.mark.parametrize("case", OUT_CASES)
def test_out_tensors_the_kernel_resizes_take_its_strides(case: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, got = OUT_CASES[case]("cpu"), OUT_CASES[case]("flagos")
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want)


def test_a_resized_out_view_writes_its_storage_in_the_kernels_order() -> None:
    def run(device: str) -> torch.Tensor:
        base = torch.zeros(30, device=device)
        t = torch.arange(20.0, device=device).reshape(5, 4).t()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.add(t, 1, out=base[:2])
        return base.cpu()

    torch.testing.assert_close(run("flagos"), run("cpu"))


def expanded(device: str) -> torch.Tensor:
    return torch.zeros(1, 6, device=device).expand(4, 6)


def ones(shape: tuple[int, ...], device: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.ones(shape, device=device, dtype=dtype)


# Written tensors whose elements overlap: CPU's kernels decide (write, warn or refuse), so flagos
# must come to the same decision and leave the same memory.
OVERLAP_CASES: dict[str, Callable[[str], object]] = {
    "zero_": lambda d: expanded(d).zero_(),
    "fill_": lambda d: expanded(d).fill_(1),
    "masked_fill_": lambda d: expanded(d).masked_fill_(ones((4, 6), d, torch.bool), 1.0),
    "index_fill_": lambda d: expanded(d).index_fill_(1, torch.tensor([0, 2], device=d), 3.0),
    "tril_": lambda d: expanded(d).tril_(),
    "sum out= expanded": lambda d: torch.sum(ones((4, 6, 3), d), 2, out=expanded(d)),
    "zeros out= expanded": lambda d: torch.zeros(4, 6, out=expanded(d)),
    "masked_select out= expanded": lambda d: torch.masked_select(
        ones((4, 6), d), ones((4, 6), d, torch.bool), out=expanded(d)
    ),
    "add_ into expanded": lambda d: expanded(d).add_(1),
    "overlapping as_strided fill_": lambda d: (
        torch.zeros(8, device=d).as_strided((3, 4), (1, 1)).fill_(2)
    ),
}


def outcome(case: str, device: str) -> tuple[str, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            OVERLAP_CASES[case](device)
            result = "ok"
        except RuntimeError as error:
            result = "refused: " + str(error).split("\n")[0]
    # The same warning, wherever the kernel that raised it lives.
    messages = sorted({str(w.message).split(" (Triggered internally at")[0] for w in caught})
    return result, messages


@pytest.mark.parametrize("case", OVERLAP_CASES)
def test_overlapping_written_tensors_are_judged_as_on_the_native_device(case: str) -> None:
    assert outcome(case, "flagos") == outcome(case, NATIVE)


@cpu_kernels_only
@pytest.mark.filterwarnings("ignore:Use of index_fill_ on expanded tensors is deprecated")
def test_overlapping_written_tensors_leave_the_same_memory() -> None:
    def run(device: str) -> list[torch.Tensor]:
        base = torch.zeros(1, 6, device=device)
        base.expand(4, 6).index_fill_(1, torch.tensor([1, 4], device=device), 7.0)
        strided = torch.arange(8.0, device=device)
        strided.as_strided((3, 4), (1, 1)).add_(1)
        return [base.cpu(), strided.cpu()]

    for got, want in zip(run("flagos"), run("cpu"), strict=True):
        torch.testing.assert_close(got, want)


def test_overlapping_views_of_large_tensors_are_judged_as_on_cpu() -> None:
    # An expanded column of a large matrix spans far more memory than it has elements; CPU
    # writes it (duplicates get the same value), and so must flagos, with the rest untouched.
    def run(device: str) -> torch.Tensor:
        m = torch.zeros(600, 100, device=device)
        column = m[:, :1].expand(600, 4)
        column.fill_(2.0)
        torch.sum(torch.ones(600, 3, 2, device=device), 2, out=m[:, 1:2].expand(600, 3))
        return m.cpu()

    torch.testing.assert_close(run("flagos"), run("cpu"))


@cpu_kernels_only
@pytest.mark.parametrize("update", ["mul_", "add_", "cumsum_"])
def test_overlap_without_zero_strides_is_written_as_on_cpu(update: str) -> None:
    # Element 4 is seen twice; CPU updates it twice.
    def run(device: str) -> torch.Tensor:
        base = torch.arange(10.0, device=device)
        view = base.as_strided((3, 2), (2, 4))
        {
            "mul_": lambda: view.mul_(2),
            "add_": lambda: view.add_(1),
            "cumsum_": lambda: view.cumsum_(0),
        }[update]()
        return base.cpu()

    torch.testing.assert_close(run("flagos"), run("cpu"))


def test_batch_norm_updates_its_running_statistics() -> None:
    # native_batch_norm updates running_mean/var in place without the schema saying so.
    torch.manual_seed(0)
    x = torch.randn(8, 3, 5)

    def run(device: str) -> list[torch.Tensor]:
        torch.manual_seed(1)
        norms = [torch.nn.BatchNorm1d(3), torch.nn.InstanceNorm1d(3, track_running_stats=True)]
        for norm in norms:
            norm.to(device)
            for _ in range(2):
                norm(x.to(device))
        mean, var = torch.zeros(3, device=device), torch.ones(3, device=device)
        torch.native_batch_norm(x.to(device), None, None, mean, var, True, 0.1, 1e-5)
        stats = [t for n in norms for t in (n.running_mean, n.running_var, n.num_batches_tracked)]
        return [t.cpu() for t in [*stats, mean, var]]

    for got, want in zip(run("flagos"), run("cpu"), strict=True):
        torch.testing.assert_close(got, want)


def test_non_dense_results_keep_the_kernels_strides() -> None:
    # lstsq's solution is a narrow of a column-major buffer on CPU.
    torch.manual_seed(0)
    a, b = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64)
    want = torch.linalg.lstsq(a, b).solution
    got = torch.linalg.lstsq(a.to("flagos"), b.to("flagos")).solution
    assert got.stride() == want.stride() and got.device.type == "flagos"
    torch.testing.assert_close(got.cpu(), want)


_NARROW_RESULT = torch.library.Library("fl_test_narrow_result", "DEF")
_NARROW_RESULT.define("first_column(Tensor x) -> Tensor")
# A CPU-only kernel whose result is a narrow slice of a buffer 64 times its size.
_NARROW_RESULT.impl("first_column", lambda x: x.repeat(1, 64)[:, :1], "CPU")
_NARROW_RESULT.define("broadcast_first_column(Tensor x) -> Tensor")
# An overlapping result (stride 0) over a buffer 64 times its distinct elements.
_NARROW_RESULT.impl(
    "broadcast_first_column", lambda x: x.repeat(1, 64)[:, :1].t().expand(8, -1), "CPU"
)


def test_a_narrow_slice_of_a_large_result_buffer_comes_back_dense(fallback_mapping: str) -> None:
    x = torch.arange(32.0).reshape(32, 1)
    got = torch.ops.fl_test_narrow_result.first_column(x.to("flagos"))
    assert got.device.type == "flagos"
    torch.testing.assert_close(got.cpu(), x)
    if fallback_mapping == "host copies" or NATIVE != "cpu":
        # Copied to the device: the slice's elements, not the buffer's span between them.
        assert got.is_contiguous() and got.untyped_storage().nbytes() == x.nbytes


def test_an_overlapping_result_keeps_its_layout_so_writes_are_refused_as_on_cpu() -> None:
    x = torch.arange(32.0).reshape(32, 1)
    want = torch.ops.fl_test_narrow_result.broadcast_first_column(x)
    got = torch.ops.fl_test_narrow_result.broadcast_first_column(x.to("flagos"))
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want)
    for result in (want, got):
        with pytest.raises(RuntimeError, match="single memory location"):
            result.add_(1)
