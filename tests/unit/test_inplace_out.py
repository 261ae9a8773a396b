"""In-place and out= operators return the caller's tensor and behave as on CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import torch_fl

# The device whose kernels flagos runs: CPU's on the cpu accelerator, CUDA's on the cuda one.
NATIVE_DEVICE = "cuda" if torch_fl.build_config.ACCELERATOR == "cuda" else "cpu"


def pair(*shape: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    cpu = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return cpu.to("flagos"), cpu


INPLACE = {
    "add_": lambda t, o: t.add_(o, alpha=2),
    "mul_scalar_": lambda t, o: t.mul_(3.5),
    "sub_": lambda t, o: t.sub_(o),
    "div_": lambda t, o: t.div_(o.abs() + 1),
    "clamp_": lambda t, o: t.clamp_(-0.5, 0.5),
    "relu_": lambda t, o: t.relu_(),
    "exp_": lambda t, o: t.exp_(),
    "zero_": lambda t, o: t.zero_(),
    "fill_": lambda t, o: t.fill_(2.5),
    "copy_": lambda t, o: t.copy_(o),
    "addcmul_": lambda t, o: t.addcmul_(o, o, value=0.5),
    "addr_": lambda t, o: t.addr_(o[0], o[1], beta=0.5, alpha=2),
    "masked_fill_": lambda t, o: t.masked_fill_(o > 0, -1.0),
    "index_put_": lambda t, o: t.index_put_((torch.tensor([0, 2], device=t.device),), o[:2]),
    # a permutation per column: with repeated indices the winner is unspecified on a GPU
    "scatter_": lambda t, o: t.scatter_(
        0, torch.tensor([3, 0, 2, 1], device=t.device).unsqueeze(1).expand(4, 4), o
    ),
    "transpose_": lambda t, o: t.t_(),
    "unsqueeze_": lambda t, o: t.unsqueeze_(0),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_returns_self_and_matches_cpu(name: str) -> None:
    fn = INPLACE[name]
    t, t_cpu = pair(4, 4)
    o, o_cpu = pair(4, 4, seed=1)
    ptr = t.data_ptr()
    result = fn(t, o)
    fn(t_cpu, o_cpu)
    assert result is t
    assert t.data_ptr() == ptr
    assert t.shape == t_cpu.shape and t.stride() == t_cpu.stride()
    torch.testing.assert_close(t.cpu(), t_cpu)


def test_inplace_on_noncontiguous_view_writes_base() -> None:
    base, base_cpu = pair(4, 6)
    for b in (base, base_cpu):
        view = b.t()[::2]
        out = view.mul_(10)
        assert out is view
    torch.testing.assert_close(base.cpu(), base_cpu)


def test_inplace_with_broadcast_and_cpu_scalar_tensor() -> None:
    t, t_cpu = pair(3, 4)
    row, row_cpu = pair(4, seed=2)
    t.add_(row).mul_(torch.tensor(2.0))
    t_cpu.add_(row_cpu).mul_(torch.tensor(2.0))
    torch.testing.assert_close(t.cpu(), t_cpu)


def test_inplace_dtype_rules_match_cpu() -> None:
    i = torch.arange(4, device="flagos")
    with pytest.raises(RuntimeError, match="can't be cast"):
        i.add_(0.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.arange(4).add_(0.5)
    f = torch.zeros(4, device="flagos")
    f.add_(torch.arange(4, device="flagos"))
    assert f.dtype == torch.float32 and torch.equal(f.cpu(), torch.arange(4.0))


def test_inplace_cannot_broadcast_self() -> None:
    t = torch.zeros(1, 4, device="flagos")
    with pytest.raises(RuntimeError):
        t.add_(torch.ones(3, 4, device="flagos"))


OUT_OPS = {
    "add": lambda a, b, out: torch.add(a, b, out=out),
    "mul": lambda a, b, out: torch.mul(a, b, out=out),
    "matmul": lambda a, b, out: torch.matmul(a, b.t(), out=out),
    "exp": lambda a, b, out: torch.exp(a, out=out),
    "sum_dim": lambda a, b, out: torch.sum(a, dim=1, out=out),
    "cat": lambda a, b, out: torch.cat([a, b], out=out),
    "clamp": lambda a, b, out: torch.clamp(a, min=-0.1, out=out),
    "where": lambda a, b, out: torch.where(a > b, a, b, out=out),
}


@pytest.mark.parametrize("name", sorted(OUT_OPS))
def test_out_resized_from_empty(name: str) -> None:
    fn = OUT_OPS[name]
    a, a_cpu = pair(3, 4)
    b, b_cpu = pair(3, 4, seed=1)
    out = torch.empty(0, device="flagos")
    result = fn(a, b, out)
    expected = fn(a_cpu, b_cpu, torch.empty(0))
    assert result is out
    assert out.device == a.device
    assert out.shape == expected.shape
    torch.testing.assert_close(out.cpu(), expected)
    assert out.untyped_storage().nbytes() >= expected.nbytes


@pytest.mark.parametrize("name", sorted(OUT_OPS))
def test_out_of_right_size_keeps_its_memory(name: str) -> None:
    fn = OUT_OPS[name]
    a, a_cpu = pair(3, 4)
    b, b_cpu = pair(3, 4, seed=1)
    expected = fn(a_cpu, b_cpu, torch.empty(0))
    out = torch.full(expected.shape, 123.0, device="flagos")
    ptr = out.data_ptr()
    result = fn(a, b, out)
    assert result is out
    assert out.data_ptr() == ptr
    torch.testing.assert_close(out.cpu(), expected)


def test_out_wrong_size_is_resized_with_warning_like_cpu() -> None:
    a, a_cpu = pair(3, 4)
    out = torch.zeros(7, device="flagos")
    out_cpu = torch.zeros(7)
    with pytest.warns(UserWarning, match="resized"):
        torch.add(a, 1, out=out)
    with pytest.warns(UserWarning, match="resized"):
        torch.add(a_cpu, 1, out=out_cpu)
    assert out.shape == (3, 4)
    torch.testing.assert_close(out.cpu(), out_cpu)


def test_out_larger_storage_preserves_pointer_when_it_fits() -> None:
    a, a_cpu = pair(2, 2)
    big = torch.zeros(100, device="flagos")
    out = big[:0]  # empty view with a large storage behind it
    ptr = big.data_ptr()
    torch.mul(a, 2, out=out)
    assert out.shape == (2, 2)
    assert out.data_ptr() == ptr  # resized within the existing storage
    torch.testing.assert_close(out.cpu(), a_cpu * 2)
    torch.testing.assert_close(big[:4].cpu(), (a_cpu * 2).reshape(-1))


def test_out_growth_is_seen_by_other_views_of_storage() -> None:
    out = torch.empty(0, device="flagos")
    alias = out.view(0)
    a, a_cpu = pair(10)
    torch.neg(a, out=out)
    assert out.untyped_storage().data_ptr() == alias.untyped_storage().data_ptr()
    assert alias.untyped_storage().nbytes() >= a.nbytes


def test_out_that_stays_empty_keeps_its_storage() -> None:
    out = torch.empty(0, device="flagos")
    alias = out.view(0)
    storage = out.untyped_storage()._cdata
    empty = torch.empty(0, device="flagos")
    assert torch.add(empty, empty, out=out) is out
    assert out.shape == (0,) and out.untyped_storage()._cdata == storage
    assert alias.untyped_storage()._cdata == storage
    # and it still grows like any empty out= tensor afterwards
    a, a_cpu = pair(3)
    torch.neg(a, out=out)
    torch.testing.assert_close(out.cpu(), -a_cpu)
    assert alias.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()


def test_out_noncontiguous_right_size_is_written_in_place() -> None:
    a, a_cpu = pair(3, 4)
    out = torch.zeros(4, 3, device="flagos").t()
    out_cpu = torch.zeros(4, 3).t()
    ptr = out.data_ptr()
    torch.mul(a, 2, out=out)
    torch.mul(a_cpu, 2, out=out_cpu)
    assert out.data_ptr() == ptr and out.stride() == out_cpu.stride()
    torch.testing.assert_close(out.cpu(), out_cpu)


def test_multiple_outs() -> None:
    a, a_cpu = pair(4, 5)
    values = torch.empty(0, device="flagos")
    indices = torch.empty(0, dtype=torch.long, device="flagos")
    result = torch.max(a, dim=1, out=(values, indices))
    expected = torch.max(a_cpu, dim=1)
    assert result[0] is values and result[1] is indices
    torch.testing.assert_close(values.cpu(), expected.values)
    torch.testing.assert_close(indices.cpu(), expected.indices)


def test_out_dtype_mismatch_rejected_like_cpu() -> None:
    a, a_cpu = pair(3)
    with pytest.raises(RuntimeError):
        torch.add(a_cpu, 1, out=torch.empty(3, dtype=torch.long))
    with pytest.raises(RuntimeError):
        torch.add(a, 1, out=torch.empty(3, dtype=torch.long, device="flagos"))


def test_out_on_wrong_device_rejected() -> None:
    a, _ = pair(3)
    with pytest.raises(RuntimeError, match="device"):
        torch.add(a, 1, out=torch.empty(3))


@pytest.mark.usefixtures("two_devices")
def test_out_on_other_flagos_device_rejected() -> None:
    a, _ = pair(3)
    with pytest.raises(RuntimeError, match="flagos:1"):
        torch.add(a, 1, out=torch.empty(3, device="flagos:1"))


def test_resize_preserves_prefix_and_pointer_when_shrinking() -> None:
    t = torch.arange(10.0, device="flagos")
    ptr = t.data_ptr()
    t.resize_(2, 3)
    assert t.shape == (2, 3) and t.data_ptr() == ptr
    assert torch.equal(t.cpu().reshape(-1), torch.arange(6.0))
    t.resize_(5, 5)
    assert t.shape == (5, 5)
    assert torch.equal(t.cpu().reshape(-1)[:10], torch.arange(10.0))


def test_set_and_is_set_to() -> None:
    src = torch.arange(6.0, device="flagos")
    t = torch.empty(0, device="flagos")
    t.set_(src)
    assert t.is_set_to(src)
    assert t.data_ptr() == src.data_ptr()
    t.set_(src.untyped_storage(), 2, (2, 2), (1, 2))
    expected = torch.arange(6.0).as_strided((2, 2), (1, 2), 2)
    assert torch.equal(t.cpu(), expected)
    t.set_()
    assert t.numel() == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda t, s: t.set_(s, 3, (4,), (-1,)),  # a reversed view, as numpy allows
        lambda t, s: t.set_(s, 0, (2, 2), (-1, 1)),
        lambda t, s: t.set_(s).resize_(2**62),
    ],
    ids=["negative_stride", "negative_stride_2d", "overflow"],
)
def test_set_and_resize_refuse_sizes_cpu_refuses_leaving_the_storage_alone(call) -> None:
    # Once, flagos made a negative stride positive and grew the shared storage under it.
    messages = {}
    for device in ("cpu", "flagos"):
        base = torch.tensor([10.0, 20.0, 30.0, 40.0], device=device)
        t = torch.empty(0, device=device)
        with pytest.raises(RuntimeError, match="Storage size calculation overflowed") as info:
            call(t, base.untyped_storage())
        messages[device] = str(info.value)
        assert base.untyped_storage().nbytes() == 16
        assert base.cpu().tolist() == [10.0, 20.0, 30.0, 40.0]
    assert messages["flagos"] == messages["cpu"]


@pytest.mark.usefixtures("two_devices")
@pytest.mark.parametrize("current", [0, 1])
def test_set_without_arguments_keeps_the_tensors_device(current: int) -> None:
    other = 1 - current
    t = torch.ones(3, device=f"flagos:{other}")
    with torch.flagos.device(current):
        assert t.set_() is t
    assert t.device == torch.device("flagos", other) and t.shape == (0,)
    assert t.untyped_storage().device == t.device
    t.resize_(2).fill_(4.0)  # the new storage grows on the tensor's device
    assert torch.equal(t.cpu(), torch.full((2,), 4.0))


# Arguments over one storage, as native kernels see them: what a call writes may not partly
# overlap what it reads (the kernels refuse before writing anything), and may overlap it exactly.
PARTIAL_OVERLAP = {
    "copy_": lambda x: x[1:].copy_(x[:-1]),
    "add_": lambda x: x[1:].add_(x[:-1]),
    "mul_out": lambda x: torch.mul(x[:-1], 2, out=x[1:]),
    "cumsum_out": lambda x: torch.cumsum(x[:-1], 0, out=x[1:]),
    "index_select_out": lambda x: torch.index_select(
        x, 0, torch.arange(9, -1, -1, device=x.device), out=x
    ),
    "index_put_": lambda x: x.index_put_((torch.tensor([1, 2, 3], device=x.device),), x[:3]),
    "cat_out": lambda x: torch.cat([x[:2], x[2:4]], out=x[1:5]),
    "gather_out": lambda x: torch.gather(
        x[:8], 0, torch.tensor([1, 0, 3, 2], device=x.device), out=x[2:6]
    ),
}

EXACT_OVERLAP = {
    "add_self": lambda x: x.add_(x),
    "copy_self": lambda x: x.copy_(x),
    "copy_same_region": lambda x: x[2:5].copy_(x[2:5]),
    "mul_out_self": lambda x: torch.mul(x, 2, out=x),
    "strided_add_": lambda x: x[::2].add_(x[::2]),
    "add_out_first_input": lambda x: torch.add(x[:5], x[5:], out=x[:5]),
    "addcmul_": lambda x: x[:4].addcmul_(x[4:8], x[:4]),
}


@pytest.mark.parametrize("name", sorted(PARTIAL_OVERLAP))
def test_partial_overlap_is_refused_like_native(name: str) -> None:
    # flagos runs the native device's kernel, so it refuses what that kernel refuses: every case
    # on CPU; CUDA's cumsum does not check overlap, and then flagos gives CUDA's result.
    fn = PARTIAL_OVERLAP[name]
    x_native = torch.arange(10.0, device=NATIVE_DEVICE)
    x = torch.arange(10.0, device="flagos")
    try:
        fn(x_native)
    except RuntimeError as on_native:
        with pytest.raises(RuntimeError) as on_flagos:
            fn(x)
        assert str(on_flagos.value).splitlines()[0] == str(on_native).splitlines()[0]
    else:
        assert NATIVE_DEVICE != "cpu", f"{name} no longer refuses partial overlap on CPU"
        fn(x)
    assert torch.equal(x.cpu(), x_native.cpu())  # a refused call wrote nothing


@pytest.mark.parametrize("name", sorted(EXACT_OVERLAP))
def test_exact_overlap_matches_cpu(name: str) -> None:
    fn = EXACT_OVERLAP[name]
    x_cpu = torch.arange(10.0)
    x = x_cpu.to("flagos")
    fn(x_cpu)
    fn(x)
    assert torch.equal(x.cpu(), x_cpu)


@pytest.mark.usefixtures("two_devices")
def test_overlap_between_devices_is_no_overlap() -> None:
    # The same bytes on flagos:0 and flagos:1 are two memories.
    x = torch.arange(10.0, device="flagos:0")
    y = x.to("flagos:1")
    y[1:].copy_(x[:-1].to("flagos:1"))
    assert torch.equal(y.cpu(), torch.cat([torch.zeros(1), torch.arange(9.0)]))


# An output that is also an input may not be resized to the broadcast shape (TensorIterator
# refuses it), where a separate output would be resized.
OUTPUT_IS_AN_INPUT = {
    "add_out": lambda x, y: torch.add(x, y, out=x),
    "add_out_second_input": lambda x, y: torch.add(y, x, out=x),
    "mul_out": lambda x, y: torch.mul(x, y, out=x),
    "maximum_out": lambda x, y: torch.maximum(x, y, out=x),
    "atan2_out": lambda x, y: torch.atan2(x, y, out=x),
    "logical_and_": lambda x, y: x.logical_and_(y),
    "ldexp_": lambda x, y: x.ldexp_(y),
    # a composite calling addr_out(self, self, ...), whose kernel tells the two apart by address
    "addr_": lambda x, y: x.addr_(y, y),
}


@pytest.mark.parametrize("name", sorted(OUTPUT_IS_AN_INPUT))
def test_an_output_that_is_an_input_is_not_resized(name: str) -> None:
    fn = OUTPUT_IS_AN_INPUT[name]
    x_native = torch.ones(5, 1, device=NATIVE_DEVICE)
    with pytest.raises(RuntimeError) as on_native:
        fn(x_native, torch.ones(5, device=NATIVE_DEVICE))
    x = torch.ones(5, 1, device="flagos")
    with pytest.raises(RuntimeError) as on_flagos:
        fn(x, torch.ones(5, device="flagos"))
    assert str(on_flagos.value).splitlines()[0] == str(on_native.value).splitlines()[0]
    assert x.shape == (5, 1) and torch.equal(x.cpu(), x_native.cpu())
    # A distinct output is still resized, as natively.
    out = torch.ones(5, 1, device="flagos")
    with pytest.warns(UserWarning, match="resized"):
        torch.add(x, torch.ones(5, device="flagos"), out=out)
    assert out.shape == (5, 5)


# An out= tensor that is also an element of a Tensor[] argument is one tensor to the kernel, as
# natively (cat refuses it even when it is empty; two aliases would let cat resize it).
LIST_ELEMENT_IS_THE_OUTPUT = {
    "cat_out": lambda x, y: torch.cat([x, y], out=x),
    "cat_out_second": lambda x, y: torch.cat([y, x], out=x),
    "hstack_out": lambda x, y: torch.hstack([x, y], out=x),
}


@pytest.mark.parametrize("name", sorted(LIST_ELEMENT_IS_THE_OUTPUT))
def test_an_output_in_an_input_list_is_refused_like_native(name: str) -> None:
    fn = LIST_ELEMENT_IS_THE_OUTPUT[name]
    with pytest.raises(RuntimeError) as on_native:
        fn(torch.empty(0, device=NATIVE_DEVICE), torch.ones(3, device=NATIVE_DEVICE))
    x = torch.empty(0, device="flagos")
    with pytest.raises(RuntimeError) as on_flagos:
        fn(x, torch.ones(3, device="flagos"))
    assert str(on_flagos.value).splitlines()[0] == str(on_native.value).splitlines()[0]
    assert x.shape == (0,)


def test_partial_overlap_is_refused_without_fast_kernels() -> None:
    # The boxed router (every operator without a fast kernel, or all with FLAGOS_FAST_PATH=0).
    script = """
import torch, torch_fl
for fn in (lambda x: x[1:].add_(x[:-1]), lambda x: torch.mul(x[:-1], 2, out=x[1:]),
           lambda x: x.index_put_((torch.tensor([1, 2, 3], device=x.device),), x[:3])):
    x = torch.arange(10.0, device="flagos")
    try:
        fn(x)
    except RuntimeError as e:
        assert "refer to a single memory location" in str(e), e
        assert torch.equal(x.cpu(), torch.arange(10.0))
    else:
        raise SystemExit("a partial overlap was not refused")
x = torch.ones(5, 1, device="flagos")
try:
    torch.add(x, torch.ones(5, device="flagos"), out=x)
except RuntimeError as e:
    assert "doesn't match the broadcast shape" in str(e), e
else:
    raise SystemExit("an output that is an input was resized")
assert x.shape == (5, 1)
x = torch.empty(0, device="flagos")
try:
    torch.cat([x, torch.ones(3, device="flagos")], out=x)
except RuntimeError as e:
    assert "refer to a single memory location" in str(e), e
else:
    raise SystemExit("an out= tensor that is also in the input list was resized")
x, x_cpu = torch.arange(10.0, device="flagos"), torch.arange(10.0)
x[::2].add_(x[::2])
x_cpu[::2].add_(x_cpu[::2])
assert torch.equal(x.cpu(), x_cpu)
print("ok")
"""
    env = dict(os.environ, FLAGOS_FAST_PATH="0")
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_conj_physical_in_place_on_complex(dtype: torch.dtype) -> None:
    # A composite whose kernel stub exists for CPU and CUDA alone: routed, it runs there.
    x_cpu = torch.tensor([1 + 2j, 3 - 4j, -5j], dtype=dtype)
    x = x_cpu.to("flagos")
    assert x.conj_physical_() is x
    assert torch.equal(x.cpu(), x_cpu.conj_physical_())


def on_both(make: object) -> list[torch.Tensor]:
    """Runs `make(device)` on the native device and on flagos; returns both results on the CPU."""
    return [make(device).cpu() for device in (NATIVE_DEVICE, "flagos")]  # type: ignore[operator]


def test_resize_to_the_same_shape_leaves_the_tensor_alone() -> None:
    def transposed(device: str) -> torch.Tensor:
        x = torch.arange(12.0, device=device).reshape(3, 4).t()
        assert x.resize_(x.shape).stride() == (1, 4)
        return x

    def sliced(device: str) -> torch.Tensor:
        x = torch.arange(12.0, device=device).reshape(3, 4)[:, ::2]
        return x.resize_(3, 2)

    def expanded(device: str) -> torch.Tensor:
        x = torch.arange(4.0, device=device).expand(3, 4)
        x.resize_(3, 4)
        assert x.stride() == (0, 1) and x.untyped_storage().nbytes() == 16  # nothing grown
        return x

    def resized_as(device: str) -> torch.Tensor:
        x = torch.arange(12.0, device=device).reshape(3, 4).t()
        return x.resize_as_(torch.empty(4, 3))

    for make in (transposed, sliced, expanded, resized_as):
        native, flagos = on_both(make)
        assert torch.equal(native, flagos), make.__name__


def test_an_out_view_that_grows_a_storage_it_shares_with_an_input_stays_on_it() -> None:
    # The out tensor views the input's storage: growing it grows that storage, as on CPU (the
    # input sees the result), whether the kernel is a fast one (add, cat) or boxed (exp, mm).
    def grow_empty_view(device: str) -> torch.Tensor:
        buf = torch.arange(4.0, device=device)
        out = buf[4:]
        torch.mul(buf, 2, out=out)
        assert out.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
        assert buf.untyped_storage().nbytes() == 32
        return buf.resize_(8)

    def grow(op: object) -> object:
        def run(device: str) -> torch.Tensor:
            b = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device)
            with pytest.warns(UserWarning, match="was resized"):
                op(b, b[2:])  # type: ignore[operator]
            return b

        run.__name__ = getattr(op, "__name__", "op")
        return run

    def add(b: torch.Tensor, out: torch.Tensor) -> None:
        torch.add(b[:2].view(2, 1), b[:2].view(1, 2), out=out)

    def cat(b: torch.Tensor, out: torch.Tensor) -> None:
        torch.cat([b[:2], b[:2]], out=out)

    def exp(b: torch.Tensor, out: torch.Tensor) -> None:
        torch.exp(b[:2].view(2, 1).expand(2, 2), out=out)

    def mm(b: torch.Tensor, out: torch.Tensor) -> None:
        torch.mm(b[:2].view(2, 1), b[:2].view(1, 2), out=out)

    for make in (grow_empty_view, grow(add), grow(cat), grow(exp), grow(mm)):
        native, flagos = on_both(make)
        assert torch.equal(native, flagos), make.__name__


def test_two_outs_over_one_storage_stay_on_it() -> None:
    x_cpu = torch.tensor([[3.0, 1.0], [2.0, 5.0]])

    def apart(device: str) -> torch.Tensor:
        # Both outs grow the storage they share with b (to 4 elements), without overlapping.
        b = torch.zeros(2, device=device)
        with pytest.warns(UserWarning, match="was resized"):
            torch.aminmax(x_cpu.to(device), dim=0, out=(b[0:1], b[2:3]))
        return b.resize_(4)

    native, flagos = on_both(apart)
    assert torch.equal(native, flagos)

    b = torch.zeros(2, device="flagos")
    with pytest.warns(UserWarning, match="was resized"):
        low, high = torch.aminmax(x_cpu.to("flagos"), dim=0, out=(b[0:1], b[1:2]))
    for out in (low, high):
        assert out.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    # Both grew to 2 elements over b's storage, so they overlap in part: refused as on CPU.
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        low.copy_(high)


def test_out_over_memory_that_cannot_grow_is_refused() -> None:
    from torch.utils.dlpack import from_dlpack, to_dlpack

    ops = (
        lambda x, y: torch.add(torch.ones(8, device=x.device), 1, out=y),
        lambda x, y: torch.cat([x, x], out=y),
    )
    for device in (NATIVE_DEVICE, "flagos"):
        for op in ops:
            x = torch.zeros(4, device=device)
            y = from_dlpack(to_dlpack(x))  # shares x's memory; its storage cannot be resized
            with pytest.raises(
                RuntimeError, match="Trying to resize storage that is not resizable"
            ):
                op(x, y)
            # y's storage is still x's memory (torch has already set y's sizes to the new
            # shape on CPU and CUDA too, so only the storage is compared).
            assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
            assert y.untyped_storage().nbytes() == 16


def test_a_math_bit_the_kernel_sets_on_its_out_tensor_reaches_the_caller() -> None:
    # lu_solve(left=False) solves the conjugate system and leaves its out= result lazily
    # conjugated: the bit must reach the caller's tensor, or the values read back conjugated.
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(3, 3, dtype=torch.cfloat, generator=gen) + 3 * torch.eye(3)
    b = torch.randn(4, 3, dtype=torch.cfloat, generator=gen)

    def solve(device: str) -> torch.Tensor:
        lu, pivots = torch.linalg.lu_factor(a.to(device))
        out = torch.empty(4, 3, dtype=torch.cfloat, device=device)
        returned = torch.linalg.lu_solve(lu, pivots, b.to(device), left=False, out=out)
        assert returned is out
        assert out.is_conj()  # as on the native device
        return out

    native, flagos = on_both(solve)
    torch.testing.assert_close(flagos, native)


@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: torch.mul(a, b, out=a),
        lambda a, b: torch.add(a, b, out=a),
        lambda a, b: torch.atan2(a, b, out=a),
        lambda a, b: torch.maximum(a, b, out=a),
        lambda a, b: a.logical_and_(b),
        lambda a, b: a.ldexp_(b),
    ],
    ids=["mul", "add", "atan2", "maximum", "logical_and_", "ldexp_"],
)
def test_an_empty_out_that_is_also_an_input_is_not_broadcast(op: object) -> None:
    # As with non-empty tensors: the output is the input, which TensorIterator does not resize.
    for device in (NATIVE_DEVICE, "flagos"):
        a = torch.zeros(0, 1, 3, device=device)
        b = torch.zeros(0, 10, 3, device=device)
        with pytest.raises(RuntimeError, match=r"output with shape \[0, 1, 3\] doesn't match"):
            op(a, b)  # type: ignore[operator]
        assert a.shape == (0, 1, 3), device
