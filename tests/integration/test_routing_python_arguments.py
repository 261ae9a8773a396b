"""The argument objects the flagos_python route hands to Python kernels.

The route keeps the Python objects of read-only arguments between calls (re-pointed at the next
call's tensors) when the kernel let go of them. These tests check what a kernel and the caller
can observe: every call sees exactly its own arguments, nothing a kernel did to an argument
object shows in a later call, an argument a kernel keeps stays what it was, and a kept object
never holds flagos memory alive."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator

import pytest
import torch

import torch_fl
from torch_fl import routing

NATIVE = torch_fl._C._native_device_type()


@pytest.fixture
def kernel() -> Iterator[Callable[[str, Callable], None]]:
    """Registers Python kernels and routes their operators to flagos_python for one test."""
    registered: list[str] = []

    def register(op: str, fn: Callable) -> None:
        routing.register_python_kernel(op, fn)
        routing.set_route(op, "flagos_python")
        registered.append(op)

    yield register
    for op in registered:
        routing.set_route(op, None)
        routing.register_python_kernel(op, None)


def described(t: torch.Tensor) -> tuple:
    return (t.device.type, t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.data_ptr())


def test_each_call_sees_its_own_arguments(kernel):
    seen: list[tuple] = []

    def record(self, other):
        seen.append((described(self), described(other)))
        return torch.mul(self, other)

    kernel("mul.Tensor", record)
    base_cpu = torch.randn(6, 8, dtype=torch.float64)
    base = base_cpu.to("flagos")
    # (view of the first argument, the second argument), each made from a base tensor.
    cases: list[tuple[Callable, Callable]] = [
        (lambda t: t, lambda t: t + 1),  # contiguous
        (lambda t: t.t(), lambda t: t.t() + 2),  # transposed
        (lambda t: t[1:, 2:], lambda t: t[1:, 2:] - 3),  # storage offset
        (lambda t: t[::2, ::3], lambda t: t[::2, ::3] + 5),  # strided
        (lambda t: t.float(), lambda t: t.float() + 7),  # another dtype
        (lambda t: t[0].long(), lambda t: t[1].long()),  # integers, 1-d
        (lambda t: t.reshape(2, 3, 8), lambda t: t[0, :1]),  # broadcast
    ]
    for first, second in cases:
        a, b = first(base), second(base)
        seen.clear()
        result = torch.mul(a, b)
        torch.testing.assert_close(result.cpu(), first(base_cpu) * second(base_cpu))
        for t, got in zip((a, b), seen[0], strict=True):
            assert got[0] == NATIVE
            assert got[1:] == described(t)[1:]


def test_an_argument_the_kernel_keeps_stays_what_it_was(kernel):
    kept: list[torch.Tensor] = []

    def keeping(self):
        kept.append(self)
        return torch.relu(self)

    kernel("relu", keeping)
    a_cpu, b_cpu = torch.randn(4, 5), torch.randn(3, 2)
    a, b = a_cpu.to("flagos"), b_cpu.to("flagos")
    torch.relu(a)
    torch.relu(b)
    torch.relu(a.t())
    assert kept[0] is not kept[1] and kept[1] is not kept[2]
    assert described(kept[0])[1:] == described(a)[1:]
    assert described(kept[1])[1:] == described(b)[1:]
    assert described(kept[2])[1:] == described(a.t())[1:]
    torch.testing.assert_close(kept[0].cpu(), a_cpu)
    torch.testing.assert_close(kept[1].cpu(), b_cpu)
    # The kept alias holds the memory: it outlives the caller's tensor.
    del a
    torch.testing.assert_close(kept[0].cpu(), a_cpu)


def test_an_argument_object_carries_nothing_into_the_next_call(kernel):
    observed: list[tuple] = []
    refs: list[weakref.ref] = []

    def meddling(self):
        observed.append(
            (getattr(self, "note", None), self.requires_grad, self._backward_hooks is None)
        )
        mode = len(observed)
        if mode == 1:
            self.note = "left by call 1"
        elif mode == 2:
            self.requires_grad_()
        elif mode == 3:
            refs.append(weakref.ref(self))
        return torch.neg(self.detach())

    kernel("neg", meddling)
    x_cpu = torch.randn(3, 3)
    x = x_cpu.to("flagos")
    for _ in range(5):
        torch.testing.assert_close(torch.neg(x).cpu(), -x_cpu)
    assert observed == [(None, False, True)] * 5
    # The object a weak reference was taken to was not kept for reuse: it is gone.
    assert refs[0]() is None


def test_a_parked_argument_holds_no_flagos_memory(kernel):
    kernel("sigmoid", lambda self: torch.sigmoid(self))
    before = torch.flagos.memory_allocated()
    a = torch.randn(256, 256).to("flagos")
    r = torch.sigmoid(a)
    torch.sigmoid(a)
    del a, r
    assert torch.flagos.memory_allocated() == before


def test_a_result_viewing_an_argument_keeps_its_values(kernel):
    kernel("alias", lambda self: self.view(self.shape))
    a_cpu, b_cpu = torch.randn(4, 4), torch.randn(4, 4)
    a, b = a_cpu.to("flagos"), b_cpu.to("flagos")
    ra = torch.ops.aten.alias(a)
    rb = torch.ops.aten.alias(b)
    assert ra.device.type == "flagos" and ra.data_ptr() == a.data_ptr()
    torch.testing.assert_close(ra.cpu(), a_cpu)
    torch.testing.assert_close(rb.cpu(), b_cpu)
    a.add_(1)  # the result is a view of the caller's tensor, as natively
    torch.testing.assert_close(ra.cpu(), a_cpu + 1)


def test_inference_mode_and_normal_calls_alternate(kernel):
    modes: list[bool] = []

    def record(self):
        modes.append(self.is_inference())
        return torch.sin(self)

    kernel("sin", record)
    x_cpu = torch.randn(5)
    x = x_cpu.to("flagos")
    for inference in (True, False, True, False):
        if inference:
            with torch.inference_mode():
                r = torch.sin(x)
        else:
            r = torch.sin(x)
        torch.testing.assert_close(r.cpu(), x_cpu.sin())
    # A kernel's arguments belong to the mode the call runs in, as the aliases always did.
    assert modes == [True, False, True, False]


def test_threads_get_their_own_arguments(kernel):
    kernel("exp", lambda self: torch.exp(self))
    inputs = [torch.randn(32, 16) for _ in range(4)]
    errors: list[BaseException] = []

    def work(x_cpu: torch.Tensor) -> None:
        x = x_cpu.to("flagos")
        try:
            for _ in range(100):
                torch.testing.assert_close(torch.exp(x).cpu(), x_cpu.exp())
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(x,)) for x in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_keyword_only_arguments_reach_the_kernel(kernel):
    got: list[object] = []

    def add(self, other, *, alpha=1):
        got.append(alpha)
        return torch.add(self, other, alpha=alpha)

    kernel("add.Tensor", add)
    a_cpu, b_cpu = torch.randn(3), torch.randn(3)
    a, b = a_cpu.to("flagos"), b_cpu.to("flagos")
    for alpha in (1, 2, -0.5):
        torch.testing.assert_close(torch.add(a, b, alpha=alpha).cpu(), a_cpu + alpha * b_cpu)
    assert got == [1, 2, -0.5]
