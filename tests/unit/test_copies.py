"""Copies between cpu, flagos:0 and flagos:1 keep values, dtypes and layouts."""

from __future__ import annotations

import pytest
import torch

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
    torch.complex128,
]


def sample(dtype: torch.dtype, shape: tuple = (4, 6), seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 10).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


SOURCES = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.t(),
    "strided": lambda t: t[::2, 1::2],
    "expanded": lambda t: t[:1].expand(5, -1),
    "offset": lambda t: t[1:, 2:],
    "zero_dim": lambda t: t[1, 1],
    "empty": lambda t: t[:0],
    "as_strided_overlap": lambda t: t.reshape(-1).as_strided((3, 4), (2, 1)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_cpu_flagos_cpu(dtype: torch.dtype) -> None:
    src = sample(dtype)
    on = src.to("flagos")
    assert on.device == torch.device("flagos", 0) and on.dtype == dtype
    back = on.cpu()
    assert back.device.type == "cpu"
    assert torch.equal(back, src)


@pytest.mark.usefixtures("two_devices")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_flagos0_to_flagos1_and_back(dtype: torch.dtype) -> None:
    src = sample(dtype)
    d0 = src.to("flagos:0")
    d1 = d0.to("flagos:1")
    assert d1.device == torch.device("flagos", 1)
    assert d1.data_ptr() != d0.data_ptr()
    assert torch.equal(d1.cpu(), src)
    d1.zero_()  # independent memory
    assert torch.equal(d0.cpu(), src)
    assert torch.equal(d1.to("flagos:0").cpu(), torch.zeros_like(src))


@pytest.mark.parametrize("layout", sorted(SOURCES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float16, torch.bool], ids=str)
def test_noncontiguous_sources_every_direction(layout: str, dtype: torch.dtype) -> None:
    make = SOURCES[layout]
    base = sample(dtype)
    expected = make(base)
    # cpu -> flagos
    up = make(base).to("flagos")
    assert torch.equal(up.cpu(), expected)
    # flagos (non-contiguous) -> cpu
    on = base.to("flagos")
    assert torch.equal(make(on).cpu(), expected)
    assert make(on).cpu().shape == expected.shape
    # flagos -> flagos:1
    if torch.flagos.device_count() > 1:
        across = make(on).to("flagos:1")
        assert across.device.index == 1
        assert torch.equal(across.cpu(), expected)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided", "expanded", "offset"])
def test_copy_into_noncontiguous_destination(layout: str) -> None:
    make = SOURCES[layout]
    dst_base = torch.zeros(4, 6, device="flagos")
    dst_base_cpu = torch.zeros(4, 6)
    if layout == "expanded":  # writing to an expanded view is rejected everywhere
        with pytest.raises(RuntimeError):
            make(dst_base).copy_(torch.ones(5, 6))
        return
    src = sample(torch.float32, make(dst_base_cpu).shape, seed=3)
    make(dst_base).copy_(src)
    make(dst_base_cpu).copy_(src)
    assert torch.equal(dst_base.cpu(), dst_base_cpu)


def test_copy_with_dtype_conversion_and_broadcast() -> None:
    src = sample(torch.float64)
    dst = torch.empty(4, 6, dtype=torch.float16, device="flagos")
    dst.copy_(src)
    assert torch.equal(dst.cpu(), src.to(torch.float16))
    dst.copy_(src.to("flagos")[0])  # broadcast a row
    assert torch.equal(dst.cpu(), src[0].to(torch.float16).expand(4, 6))
    back = torch.empty(4, 6, dtype=torch.int32)
    back.copy_(src.to("flagos"))
    assert torch.equal(back, src.to(torch.int32))


def test_to_with_dtype_and_device_together() -> None:
    src = sample(torch.float32)
    moved = src.to("flagos", dtype=torch.float64)
    assert moved.dtype == torch.float64 and moved.device.type == "flagos"
    assert torch.equal(moved.cpu(), src.double())
    assert moved.to("flagos") is moved  # no-op to the same device
    assert moved.to(torch.device("flagos", 0)) is moved
    assert moved.to("flagos", copy=True) is not moved


@pytest.mark.parametrize("non_blocking", [False, True])
def test_non_blocking_copies(non_blocking: bool) -> None:
    src = sample(torch.float32, (64, 64))
    on = src.to("flagos", non_blocking=non_blocking)
    back = on.to("cpu", non_blocking=non_blocking)
    torch.flagos.synchronize()
    assert torch.equal(back, src)
    pinned = src.pin_memory()
    on2 = pinned.to("flagos", non_blocking=non_blocking)
    dst = torch.empty(64, 64).pin_memory()
    dst.copy_(on2, non_blocking=non_blocking)
    torch.flagos.current_stream().synchronize()
    assert torch.equal(dst, src)


def test_clone_and_contiguous_on_device() -> None:
    src = sample(torch.float32)
    on = src.to("flagos")
    c = on.t().clone()
    assert c.device == on.device and c.data_ptr() != on.data_ptr()
    assert c.stride() == src.t().clone().stride()  # preserve_format keeps the layout
    assert torch.equal(c.cpu(), src.t())
    cc = on.t().contiguous()
    assert cc.is_contiguous() and torch.equal(cc.cpu(), src.t())


def test_module_to_and_back() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    reference = {k: v.clone() for k, v in model.state_dict().items()}
    model.to("flagos")
    for v in model.state_dict().values():
        assert v.device.type == "flagos"
    model.cpu()
    for k, v in model.state_dict().items():
        assert torch.equal(v, reference[k])


def test_copy_to_flagos_rejects_bad_index() -> None:
    bad = torch.flagos.device_count()
    with pytest.raises((IndexError, RuntimeError), match=f"flagos:{bad}"):
        torch.ones(2).to(f"flagos:{bad}")


# Conjugate and negative views: copies must resolve the bit (this once recursed forever and
# killed the interpreter, which is why tests/unit runs one interpreter per file).
MATH_BIT_VIEWS = {
    "conj": lambda t: t.conj(),
    "neg_view": lambda t: t._neg_view(),
    "conj_imag": lambda t: t.conj().imag,
    "conj_transposed": lambda t: t.t().conj(),
}


@pytest.mark.parametrize("name", sorted(MATH_BIT_VIEWS))
def test_copies_of_math_bit_views(name: str) -> None:
    make = MATH_BIT_VIEWS[name]
    src = sample(torch.complex64, (3, 4), seed=5)
    on = src.to("flagos")
    view = make(on)
    expected = make(src).resolve_conj().resolve_neg()
    assert view.is_conj() == make(src).is_conj() and view.is_neg() == make(src).is_neg()
    assert view.untyped_storage().data_ptr() == on.untyped_storage().data_ptr()  # still lazy
    assert torch.equal(view.cpu().resolve_conj().resolve_neg(), expected)
    assert torch.equal(view.clone().cpu().resolve_conj().resolve_neg(), expected)
    assert torch.equal(view.resolve_conj().resolve_neg().cpu(), expected)
    assert torch.equal((view * 1).cpu(), expected)
    if torch.flagos.device_count() > 1:
        assert torch.equal(view.to("flagos:1").cpu().resolve_conj().resolve_neg(), expected)


def test_copy_into_conj_view_destination() -> None:
    src = sample(torch.complex64, (5,), seed=6)
    dst = torch.zeros(5, dtype=torch.complex64, device="flagos")
    dst_cpu = torch.zeros(5, dtype=torch.complex64)
    dst.conj().copy_(src.to("flagos"))
    dst_cpu.conj().copy_(src)
    assert torch.equal(dst.cpu(), dst_cpu)
    dst.conj().copy_(src)  # from cpu
    assert torch.equal(dst.cpu(), dst_cpu)


@pytest.mark.usefixtures("two_devices")
def test_deepcopy_keeps_device_and_copies_memory() -> None:
    import copy

    src = torch.arange(6.0).reshape(2, 3)
    x = src.to("flagos:1")
    y = copy.deepcopy(x)
    assert y.device == x.device and y.data_ptr() != x.data_ptr()
    y.zero_()
    assert torch.equal(x.cpu(), src)
    p = copy.deepcopy(torch.nn.Parameter(x))
    assert isinstance(p, torch.nn.Parameter) and p.device == x.device
    assert torch.equal(p.detach().cpu(), src)


def test_untyped_storage_operations() -> None:
    storage = torch.UntypedStorage(8, device="flagos")
    assert storage.device == torch.device("flagos", 0) and storage.is_flagos
    storage.copy_(torch.tensor([1.0, 2.0]).untyped_storage())
    assert storage.cpu().tolist() == torch.tensor([1.0, 2.0]).untyped_storage().tolist()
    storage.fill_(7)
    assert storage.cpu().tolist() == [7] * 8
    storage.resize_(16)
    assert storage.nbytes() == 16 and storage.cpu().tolist()[:8] == [7] * 8
