"""Factories honour the flagos device index, and work on flagos:1 stays on flagos:1.

Every rank>0 worker of a distributed job builds tensors through factories; an output allocated
on device 0 while the kernel runs on device N is a cross-device write on real hardware.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("two_devices")

D0 = torch.device("flagos", 0)
D1 = torch.device("flagos", 1)

FACTORIES = {
    "empty": lambda d: torch.empty(3, 4, device=d),
    "zeros": lambda d: torch.zeros(3, 4, device=d),
    "ones": lambda d: torch.ones(3, 4, dtype=torch.int32, device=d),
    "full": lambda d: torch.full((3, 4), 1.5, device=d),
    "arange": lambda d: torch.arange(7, device=d),
    "linspace": lambda d: torch.linspace(0, 1, 9, device=d),
    "logspace": lambda d: torch.logspace(0, 1, 4, device=d),
    "eye": lambda d: torch.eye(3, device=d),
    "rand": lambda d: torch.rand(5, device=d),
    "randn": lambda d: torch.randn(5, device=d),
    "randint": lambda d: torch.randint(0, 9, (5,), device=d),
    "randperm": lambda d: torch.randperm(6, device=d),
    "tensor": lambda d: torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=d),
    "as_tensor": lambda d: torch.as_tensor([1, 2, 3], device=d),
    "empty_strided": lambda d: torch.empty_strided((2, 3), (1, 2), device=d),
    "tril_indices": lambda d: torch.tril_indices(4, 4, device=d),
    "bernoulli_fill": lambda d: torch.empty(4, device=d).bernoulli_(0.5),
}
DETERMINISTIC = [
    "zeros",
    "ones",
    "full",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "tensor",
    "as_tensor",
    "tril_indices",
]


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factory_output_on_requested_index(name: str) -> None:
    make = FACTORIES[name]
    assert make("flagos:1").device == D1
    assert make(D1).device == D1
    assert make("flagos:0").device == D0


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_factory_values_on_flagos1_match_cpu(name: str) -> None:
    make = FACTORIES[name]
    result = make("flagos:1")
    assert result.device == D1
    torch.testing.assert_close(result.cpu(), make("cpu"), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["empty", "zeros", "arange", "rand", "tensor", "eye"])
def test_factory_without_index_uses_current_device(name: str) -> None:
    make = FACTORIES[name]
    with torch.flagos.device(1):
        assert torch.flagos.current_device() == 1
        assert make("flagos").device == D1
    assert torch.flagos.current_device() == 0
    assert make("flagos").device == D0
    torch.flagos.set_device(1)
    assert make("flagos").device == D1
    assert make("flagos:0").device == D0  # an explicit index wins over the current device


def test_like_and_new_factories_follow_source_device() -> None:
    src = torch.ones(2, 3, device="flagos:1")
    for out in (
        torch.zeros_like(src),
        torch.ones_like(src),
        torch.empty_like(src),
        torch.full_like(src, 2),
        torch.rand_like(src),
        torch.randn_like(src),
        torch.randint_like(src, 5),
        src.new_zeros(4),
        src.new_empty(4),
        src.new_full((2,), 3.0),
        src.new_tensor([1.0]),
    ):
        assert out.device == D1
    assert torch.zeros_like(src, device="flagos:0").device == D0


def test_device_context_manager_nests_and_restores() -> None:
    assert torch.flagos.current_device() == 0
    with torch.flagos.device(1):
        assert torch.flagos.current_device() == 1
        with torch.flagos.device("flagos:0"):
            assert torch.flagos.current_device() == 0
            assert torch.zeros(1, device="flagos").device == D0
        assert torch.flagos.current_device() == 1
        with torch.flagos.device(D1):
            assert torch.flagos.current_device() == 1
    assert torch.flagos.current_device() == 0


def test_device_context_restores_after_exception() -> None:
    with pytest.raises(ValueError, match="inside"), torch.flagos.device(1):
        raise ValueError("inside")
    assert torch.flagos.current_device() == 0


def test_torch_device_context_reaches_flagos() -> None:
    with torch.device("flagos:1"):
        t = torch.ones(3)
    assert t.device == D1


UNARY_AND_BINARY = {
    "add": lambda a, b: a + b,
    "mul_scalar": lambda a, b: a * 3,
    "matmul": lambda a, b: a @ b.t(),
    "sum": lambda a, b: a.sum(dim=1),
    "cat": lambda a, b: torch.cat([a, b]),
    "stack": lambda a, b: torch.stack([a, b]),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "softmax": lambda a, b: torch.softmax(a, dim=-1),
    "max": lambda a, b: a.max(dim=0).values,
    "index": lambda a, b: a[torch.tensor([1, 0], device=a.device)],
    "clone": lambda a, b: a.clone(),
    "contiguous": lambda a, b: a.t().contiguous(),
    "to_dtype": lambda a, b: a.to(torch.float64),
    "nonzero": lambda a, b: (a > 0).nonzero(),
    "sort": lambda a, b: a.sort(dim=1).values,
}


@pytest.mark.parametrize("name", sorted(UNARY_AND_BINARY))
def test_ops_on_flagos1_produce_flagos1(name: str) -> None:
    fn = UNARY_AND_BINARY[name]
    a_cpu = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    b_cpu = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    result = fn(a_cpu.to("flagos:1"), b_cpu.to("flagos:1"))
    assert result.device == D1
    torch.testing.assert_close(result.cpu(), fn(a_cpu, b_cpu))


@pytest.mark.parametrize("name", ["add", "matmul", "cat", "index", "clone"])
def test_ops_on_flagos1_while_current_device_is_0(name: str) -> None:
    fn = UNARY_AND_BINARY[name]
    a_cpu, b_cpu = torch.arange(12.0).reshape(3, 4), torch.ones(3, 4)
    assert torch.flagos.current_device() == 0
    result = fn(a_cpu.to("flagos:1"), b_cpu.to("flagos:1"))
    assert result.device == D1
    assert torch.flagos.current_device() == 0  # the kernel's guard restored it
    torch.testing.assert_close(result.cpu(), fn(a_cpu, b_cpu))


def test_flagos1_results_are_accounted_on_flagos1() -> None:
    a = torch.ones(256, 256, device="flagos:1")
    before0 = torch.flagos.memory_allocated(0)
    before1 = torch.flagos.memory_allocated(1)
    b = a * 2  # produced by a kernel, not a factory
    c = torch.zeros(256, 256, device="flagos:1")
    assert torch.flagos.memory_allocated(0) == before0
    assert torch.flagos.memory_allocated(1) >= before1 + 2 * b.nbytes
    assert b.device == D1 and c.device == D1
    del b, c
    assert torch.flagos.memory_allocated(1) == before1


def test_inplace_and_out_on_flagos1() -> None:
    a = torch.ones(4, device="flagos:1")
    a.add_(1)
    assert a.device == D1 and torch.equal(a.cpu(), torch.full((4,), 2.0))
    out = torch.empty(0, device="flagos:1")
    torch.mul(a, 3, out=out)
    assert out.device == D1 and torch.equal(out.cpu(), torch.full((4,), 6.0))


def test_generator_on_flagos1_drives_flagos1_factory() -> None:
    g = torch.Generator("flagos:1").manual_seed(5)
    assert g.device == D1
    r = torch.rand(6, device="flagos:1", generator=g)
    assert r.device == D1
    expected = torch.rand(6, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(r.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("bad", ["flagos:2", "flagos:64", torch.device("flagos", 9)])
def test_invalid_index_rejected_by_factories(bad: object) -> None:
    for make in (
        lambda: torch.empty(3, device=bad),
        lambda: torch.zeros(3, device=bad),
        lambda: torch.tensor([1.0], device=bad),
        lambda: torch.empty_strided((2,), (1,), device=bad),
        lambda: torch.arange(3, device=bad),
    ):
        with pytest.raises((IndexError, RuntimeError), match=r"flagos:\d+"):
            make()


def test_invalid_index_rejected_by_copies_and_device_switches() -> None:
    with pytest.raises((IndexError, RuntimeError), match="Invalid device flagos:2"):
        torch.ones(3).to("flagos:2")
    with pytest.raises((IndexError, RuntimeError), match="Invalid device flagos:2"):
        torch.flagos.set_device(2)
    with (
        pytest.raises((IndexError, RuntimeError), match="Invalid device flagos:3"),
        torch.flagos.device(3),
    ):
        pass
    assert torch.flagos.current_device() == 0


def test_negative_index_rejected() -> None:
    with pytest.raises(RuntimeError):
        torch.device("flagos", -2)
    with pytest.raises(RuntimeError):
        torch.zeros(1, device="flagos:-1")
