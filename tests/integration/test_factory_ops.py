"""Factory operators create tensors on flagos with the dtype, shape and values of CPU ones.

Where values depend on the device's own kernels (random streams, linspace rounding), the
reference is the accelerator's native device: CPU on the cpu accelerator, cuda on the cuda one.
"""

from __future__ import annotations

import pytest
import torch

import torch_fl

FLAGOS = torch.device("flagos", 0)
NATIVE = "cuda" if torch_fl.build_config.ACCELERATOR == "cuda" else "cpu"

ALL_DTYPES = [
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
]
FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def assert_on_flagos_like(result: torch.Tensor, reference: torch.Tensor) -> None:
    assert result.device == FLAGOS
    assert result.dtype == reference.dtype
    assert result.shape == reference.shape
    torch.testing.assert_close(result.cpu(), reference, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_zeros_ones_full(dtype: torch.dtype) -> None:
    fill = True if dtype == torch.bool else 3
    for make in (
        lambda d: torch.zeros(2, 3, dtype=dtype, device=d),
        lambda d: torch.ones(4, dtype=dtype, device=d),
        lambda d: torch.full((3, 2), fill, dtype=dtype, device=d),
    ):
        assert_on_flagos_like(make("flagos"), make("cpu"))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_empty_has_dtype_shape_device(dtype: torch.dtype) -> None:
    t = torch.empty(5, 7, dtype=dtype, device="flagos")
    assert t.device == FLAGOS and t.dtype == dtype and t.shape == (5, 7)
    assert t.is_contiguous() and t.stride() == (7, 1)
    t.fill_(1)  # the memory is usable
    assert_on_flagos_like(t, torch.ones(5, 7, dtype=dtype))


def test_empty_zero_size_and_memory_format() -> None:
    assert torch.empty(0, device="flagos").numel() == 0
    assert torch.empty(3, 0, 2, device="flagos").shape == (3, 0, 2)
    cl = torch.empty(2, 3, 4, 5, device="flagos", memory_format=torch.channels_last)
    ref = torch.empty(2, 3, 4, 5, memory_format=torch.channels_last)
    assert cl.stride() == ref.stride()
    assert cl.is_contiguous(memory_format=torch.channels_last)


def test_full_infers_dtype_like_cpu() -> None:
    for value in (2, 2.5, True, 1 + 2j):
        assert_on_flagos_like(torch.full((3,), value, device="flagos"), torch.full((3,), value))


@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((10,), {}),
        ((2, 11, 3), {}),
        ((0.0, 1.0, 0.125), {}),
        ((-5, 5), {"dtype": torch.float64}),
        ((5, -5, -2), {"dtype": torch.int32}),
    ],
)
def test_arange(args: tuple, kwargs: dict) -> None:
    assert_on_flagos_like(
        torch.arange(*args, device="flagos", **kwargs), torch.arange(*args, **kwargs)
    )


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [torch.int64], ids=str)
def test_linspace_logspace(dtype: torch.dtype) -> None:
    assert_on_flagos_like(
        torch.linspace(-3, 7, 13, dtype=dtype, device="flagos"),
        torch.linspace(-3, 7, 13, dtype=dtype, device=NATIVE).cpu(),
    )
    if dtype.is_floating_point:
        assert_on_flagos_like(
            torch.logspace(0, 2, 5, dtype=dtype, device="flagos"),
            torch.logspace(0, 2, 5, dtype=dtype, device=NATIVE).cpu(),
        )


@pytest.mark.parametrize("shape", [(4,), (3, 5), (5, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_eye(shape: tuple, dtype: torch.dtype) -> None:
    assert_on_flagos_like(
        torch.eye(*shape, dtype=dtype, device="flagos"), torch.eye(*shape, dtype=dtype)
    )


@pytest.mark.parametrize(
    ("window", "args"),
    [
        (torch.kaiser_window, (7,)),
        (torch.kaiser_window, (7, False)),
        (torch.kaiser_window, (7, True, 8.0)),
        (torch.hann_window, (7,)),
        (torch.hamming_window, (7, True, 0.5, 0.3)),
        (torch.blackman_window, (7, False)),
        (torch.bartlett_window, (7,)),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_window_functions(window, args: tuple, dtype: torch.dtype) -> None:
    # kaiser_window's composite kernel calls a DispatchStub (kernels for CPU and CUDA only).
    result = window(*args, dtype=dtype, device="flagos")
    reference = window(*args, dtype=dtype, device=NATIVE)
    assert result.device == FLAGOS and result.dtype == dtype
    torch.testing.assert_close(result.cpu(), reference.cpu())


@pytest.mark.parametrize(
    ("overload", "args"),
    [("out", (6,)), ("periodic_out", (6, False)), ("beta_out", (6, True, 5.0))],
)
def test_kaiser_window_out_variants(overload: str, args: tuple) -> None:
    out = torch.empty(0, dtype=torch.float64, device="flagos")
    result = getattr(torch.ops.aten.kaiser_window, overload)(*args, out=out)
    assert result is out and out.device == FLAGOS
    torch.testing.assert_close(out.cpu(), torch.kaiser_window(*args, dtype=torch.float64))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_like_factories_keep_dtype_and_device(dtype: torch.dtype) -> None:
    src_cpu = torch.ones(3, 4, dtype=dtype)
    src = src_cpu.to("flagos")
    assert_on_flagos_like(torch.zeros_like(src), torch.zeros_like(src_cpu))
    assert_on_flagos_like(torch.ones_like(src), torch.ones_like(src_cpu))
    assert_on_flagos_like(torch.full_like(src, 1), torch.full_like(src_cpu, 1))
    e = torch.empty_like(src)
    assert e.device == FLAGOS and e.dtype == dtype and e.shape == src.shape
    assert e.data_ptr() != src.data_ptr()


def test_like_factories_move_between_devices() -> None:
    src_cpu = torch.arange(6.0).reshape(2, 3)
    on_flagos = torch.ones_like(src_cpu, device="flagos")
    assert_on_flagos_like(on_flagos, torch.ones_like(src_cpu))
    back = torch.zeros_like(on_flagos, device="cpu")
    assert back.device.type == "cpu"
    assert torch.equal(back, torch.zeros(2, 3))


def test_like_factories_preserve_strides() -> None:
    src = torch.empty(4, 6, device="flagos").t()
    like = torch.empty_like(src)
    assert like.stride() == torch.empty_like(torch.empty(4, 6).t()).stride()
    cl = torch.empty(2, 3, 4, 5, device="flagos", memory_format=torch.channels_last)
    assert torch.zeros_like(cl).is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 3, 4)])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str
)
def test_rand_randn_with_generator_match_native_generator_stream(
    shape: tuple, dtype: torch.dtype
) -> None:
    # flagos generators wrap a generator of the native device (CPU's Mersenne Twister, CUDA's
    # Philox): same seed, same numbers as that device's own generator.
    g_flagos = torch.Generator("flagos").manual_seed(1234)
    g_native = torch.Generator(NATIVE).manual_seed(1234)
    for fn in (torch.rand, torch.randn):
        result = fn(*shape, dtype=dtype, device="flagos", generator=g_flagos)
        expected = fn(*shape, dtype=dtype, device=NATIVE, generator=g_native).cpu()
        assert_on_flagos_like(result, expected)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32], ids=str)
def test_randint_randperm_with_generator(dtype: torch.dtype) -> None:
    g_flagos = torch.Generator("flagos").manual_seed(99)
    g_native = torch.Generator(NATIVE).manual_seed(99)
    result = torch.randint(3, 50, (64,), dtype=dtype, device="flagos", generator=g_flagos)
    expected = torch.randint(3, 50, (64,), dtype=dtype, device=NATIVE, generator=g_native)
    assert_on_flagos_like(result, expected.cpu())
    assert int(result.min()) >= 3 and int(result.max()) < 50
    perm = torch.randperm(20, device="flagos", generator=g_flagos)
    assert_on_flagos_like(perm, torch.randperm(20, device=NATIVE, generator=g_native).cpu())


def test_random_factories_without_generator_are_on_flagos_and_in_range() -> None:
    r = torch.rand(1000, device="flagos")
    assert r.device == FLAGOS and r.dtype == torch.float32
    assert 0 <= float(r.min()) and float(r.max()) < 1
    n = torch.randn(2000, dtype=torch.float64, device="flagos")
    assert n.device == FLAGOS and n.dtype == torch.float64
    assert abs(float(n.mean())) < 0.2 and 0.8 < float(n.std()) < 1.2
    i = torch.randint(10, (500,), device="flagos")
    assert i.device == FLAGOS and i.dtype == torch.int64
    assert set(i.cpu().tolist()) <= set(range(10))


def test_rand_like_family() -> None:
    src = torch.empty(4, 5, dtype=torch.float64, device="flagos")
    for fn in (torch.rand_like, torch.randn_like):
        out = fn(src)
        assert out.device == FLAGOS and out.dtype == torch.float64 and out.shape == (4, 5)
    out = torch.randint_like(src, 3, 7)
    assert out.device == FLAGOS and out.dtype == torch.float64
    assert 3 <= float(out.min()) and float(out.max()) < 7


def test_random_factory_rejects_generator_of_other_device_type() -> None:
    with pytest.raises(RuntimeError):
        torch.rand(3, device="flagos", generator=torch.Generator("cpu"))


@pytest.mark.parametrize(
    "data,dtype",
    [
        ([1, 2, 3], None),
        ([[1.5, -2.0], [3.25, 4.0]], None),
        ([True, False], None),
        ([1, 2, 3], torch.float16),
        ([[1, 2], [3, 4]], torch.int8),
        (3.5, None),
        ([1 + 1j, 2 - 1j], None),
    ],
)
def test_tensor_with_device(data: object, dtype: torch.dtype | None) -> None:
    assert_on_flagos_like(
        torch.tensor(data, dtype=dtype, device="flagos"), torch.tensor(data, dtype=dtype)
    )
    assert_on_flagos_like(
        torch.as_tensor(data, dtype=dtype, device="flagos"), torch.as_tensor(data, dtype=dtype)
    )


def test_tensor_from_numpy_and_from_tensor() -> None:
    np = pytest.importorskip("numpy")
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert_on_flagos_like(torch.tensor(array, device="flagos"), torch.tensor(array))
    src = torch.arange(5)
    copied = torch.tensor(src.tolist(), device="flagos")
    assert_on_flagos_like(copied, src)


@pytest.mark.parametrize(
    "size,stride",
    [
        ((2, 3), (3, 1)),
        ((2, 3), (1, 2)),
        ((4, 2, 3), (1, 12, 4)),
        ((3, 3), (0, 1)),
        ((0, 5), (5, 1)),
    ],
)
def test_empty_strided(size: tuple, stride: tuple) -> None:
    t = torch.empty_strided(size, stride, device="flagos")
    ref = torch.empty_strided(size, stride)
    assert t.device == FLAGOS and t.shape == ref.shape and t.stride() == ref.stride()
    assert t.untyped_storage().nbytes() >= ref.untyped_storage().nbytes()
    if t.numel() and 0 not in stride:  # a zero stride overlaps: nothing to write through
        values = torch.arange(ref.numel(), dtype=torch.float32).reshape(size)
        t.copy_(values)
        assert torch.equal(t.cpu(), values)


def test_new_factories_follow_source_tensor() -> None:
    src = torch.ones(2, dtype=torch.float64, device="flagos")
    src_cpu = src.cpu()
    assert_on_flagos_like(src.new_zeros(3, 2), src_cpu.new_zeros(3, 2))
    assert_on_flagos_like(src.new_ones(4), src_cpu.new_ones(4))
    assert_on_flagos_like(src.new_full((2, 2), 5.5), src_cpu.new_full((2, 2), 5.5))
    assert_on_flagos_like(src.new_tensor([1, 2]), src_cpu.new_tensor([1, 2]))
    e = src.new_empty(7)
    assert e.device == FLAGOS and e.dtype == torch.float64 and e.shape == (7,)


def test_factory_rejects_unsupported_options() -> None:
    # Sparse COO is supported (tests/integration/test_sparse.py); compressed layouts are not.
    with pytest.raises(NotImplementedError, match="not the compressed ones"):
        torch.empty(3, 3, device="flagos", layout=torch.sparse_csr)
    with pytest.raises(RuntimeError, match="pinned"):
        torch.empty(3, device="flagos", pin_memory=True)


def test_factory_results_feed_kernels() -> None:
    a = torch.arange(12, dtype=torch.float32, device="flagos").reshape(3, 4)
    b = torch.eye(4, device="flagos") * 2 + torch.ones(4, 4, device="flagos")
    ref = torch.arange(12, dtype=torch.float32).reshape(3, 4) @ (
        torch.eye(4) * 2 + torch.ones(4, 4)
    )
    assert_on_flagos_like(a @ b, ref)


@pytest.fixture
def deterministic_fill():  # noqa: ANN201
    """torch.use_deterministic_algorithms(True), which fills uninitialised memory by default."""
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


DETERMINISTIC_EMPTY = {
    "empty": lambda dev, dtype: torch.empty(4, 3, device=dev, dtype=dtype),
    "empty_strided": lambda dev, dtype: torch.empty_strided(
        (4, 3), (1, 4), device=dev, dtype=dtype
    ),
    "empty_like": lambda dev, dtype: torch.empty_like(torch.ones(5, device=dev, dtype=dtype)),
    "new_empty": lambda dev, dtype: torch.ones(1, device=dev).new_empty(3, dtype=dtype),
    "resize_ grown": lambda dev, dtype: torch.ones(2, device=dev, dtype=dtype).resize_(3, 4),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
@pytest.mark.parametrize("name", sorted(DETERMINISTIC_EMPTY))
def test_deterministic_algorithms_fill_new_memory_like_cpu(
    name: str, dtype: torch.dtype, deterministic_fill: None
) -> None:
    make = DETERMINISTIC_EMPTY[name]
    torch.full((64,), 7, device=FLAGOS).sum()  # leave used blocks in the cache
    expected = make("cpu", dtype)  # NaN for floating types, the dtype's maximum otherwise
    result = make(FLAGOS, dtype)
    assert result.device == FLAGOS
    torch.testing.assert_close(result.cpu(), expected, equal_nan=True, rtol=0, atol=0)


def test_without_deterministic_algorithms_empty_is_not_filled() -> None:
    assert not torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        block = torch.full((8,), 3.0, device=FLAGOS)
        del block
        # The cache hands the same block back, unfilled: what CPU and CUDA do with the flag off.
        assert not torch.isnan(torch.empty(8, device=FLAGOS).cpu()).any()
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = True
        torch.use_deterministic_algorithms(False)
