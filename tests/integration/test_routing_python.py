"""The flagos_python route, driven by a provider of Python kernels written here: results,
in-place and out= semantics, autograd and errors must match the native route."""

from __future__ import annotations

import types
import weakref

import pytest
import torch

import torch_fl
from torch_fl import routing

# Python kernels receive zero-copy tensors of the accelerator's native device (cpu or cuda).
NATIVE = torch_fl._C._native_device_type()

CALLS: list[tuple[str, str]] = []


def k_add(self, other, *, alpha=1):
    CALLS.append(("add.Tensor", self.device.type))
    return torch.add(self, other, alpha=alpha)


def k_add_(self, other, *, alpha=1):
    CALLS.append(("add_.Tensor", self.device.type))
    return self.add_(other, alpha=alpha)


def k_add_out(self, other, *, alpha=1, out):
    CALLS.append(("add.out", out.device.type))
    return torch.add(self, other, alpha=alpha, out=out)


def k_mul(self, other):
    CALLS.append(("mul.Tensor", self.device.type))
    return torch.mul(self, other)


def k_relu(self):
    CALLS.append(("relu", self.device.type))
    return torch.relu(self)


def k_threshold_backward(grad_output, self, threshold):
    CALLS.append(("threshold_backward", self.device.type))
    return torch.ops.aten.threshold_backward(grad_output, self, threshold)


def k_max_dim(self, dim, keepdim=False):
    CALLS.append(("max.dim", self.device.type))
    return torch.max(self, dim, keepdim)


def k_broken(self, other):
    raise KeyError("kernel lost its key")


def k_custom_error(self, other):
    raise ValueError("bad shapes for this kernel")


def k_backward_error(grad_output, self, threshold):
    raise TypeError("backward kernel refuses")


def k_wrong_type(self):
    return "not a tensor"


PROVIDER = types.ModuleType("test_provider")
PROVIDER.FLAGOS_KERNELS = {
    "aten::add.Tensor": k_add,
    "add_.Tensor": k_add_,
    "add.out": k_add_out,
    "mul.Tensor": k_mul,
    "relu": k_relu,
    "threshold_backward": k_threshold_backward,
    "max.dim": k_max_dim,
}


@pytest.fixture
def provider():
    names = routing.register_provider(PROVIDER)
    for op in names:
        routing.set_route(op, "flagos_python")
    CALLS.clear()
    yield names
    for op in names:
        routing.set_route(op, None)
        routing.register_python_kernel(op, None)


def pair(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    cpu = torch.randn(*shape, generator=g)
    return cpu, cpu.to("flagos")


def test_provider_registers_and_routes(provider):
    assert set(provider) <= set(routing.python_kernels())
    assert routing.get_route("aten::add.Tensor") == "flagos_python"
    assert routing.route_origin("add.Tensor") == "api"


def test_results_match_and_kernels_see_native_tensors(provider):
    a_cpu, a = pair(5, 7)
    b_cpu, b = pair(5, 7, seed=1)
    routing.reset_stats()
    c = torch.add(a, b, alpha=2)
    assert c.device.type == "flagos"
    torch.testing.assert_close(c.cpu(), torch.add(a_cpu, b_cpu, alpha=2))
    assert CALLS == [("add.Tensor", NATIVE)]
    assert routing.stats()["aten::add.Tensor"] == {"flagos_python": 1}
    values, indices = torch.max(a, 1)
    exp_values, exp_indices = torch.max(a_cpu, 1)
    torch.testing.assert_close(values.cpu(), exp_values)
    torch.testing.assert_close(indices.cpu(), exp_indices)
    assert values.device.type == indices.device.type == "flagos"


def test_kernel_arguments_are_zero_copy(provider):
    seen = {}

    def spy(self):
        seen["ptr"] = self.data_ptr()
        return torch.relu(self)

    routing.register_python_kernel("relu", spy)
    _, a = pair(16)
    torch.relu(a)
    assert seen["ptr"] == a.data_ptr()


def test_a_fresh_result_becomes_the_callers_result_object(provider):
    # The tensor a kernel returns (and its Python object) is re-labelled as flagos in place when
    # nothing else holds it: the caller gets that very object, and its memory is accounted.
    returned = []

    def fresh(self):
        out = torch.relu(self)
        returned.append(weakref.ref(out))
        return out

    routing.register_python_kernel("relu", fresh)
    a_cpu, a = pair(64, 64)
    before = torch.flagos.memory_allocated()
    r = torch.relu(a)
    assert returned[0]() is r
    assert r.device == a.device
    torch.testing.assert_close(r.cpu(), torch.relu(a_cpu))
    assert torch.flagos.memory_allocated() >= before + r.nbytes
    del r
    assert returned[0]() is None
    assert torch.flagos.memory_allocated() == before


def test_a_result_the_kernel_keeps_is_not_relabelled(provider):
    kept: list[torch.Tensor] = []

    def keeping(self):
        out = torch.relu(self)
        kept.append(out)
        return out

    def parameter(self):
        return torch.nn.Parameter(torch.relu(self), requires_grad=False)

    a_cpu, a = pair(8, 8)
    routing.register_python_kernel("relu", keeping)
    r = torch.relu(a)
    assert kept[0].device.type == NATIVE and r.device.type == "flagos" and r is not kept[0]
    torch.testing.assert_close(kept[0].cpu(), torch.relu(a_cpu))
    torch.testing.assert_close(r.cpu(), torch.relu(a_cpu))
    routing.register_python_kernel("relu", parameter)  # a subclass object is never re-labelled
    p = torch.relu(a)
    assert type(p) is torch.Tensor and p.device.type == "flagos"
    torch.testing.assert_close(p.cpu(), torch.relu(a_cpu))
    # Nor one carrying autograd state: results leave the kernel as plain tensors.
    routing.register_python_kernel("relu", lambda self: torch.relu(self).requires_grad_())
    g = torch.relu(a)
    assert g.device.type == "flagos" and not g.requires_grad
    torch.testing.assert_close(g.cpu(), torch.relu(a_cpu))


def test_in_place_returns_the_callers_tensor(provider):
    a_cpu, a = pair(4, 4)
    b_cpu, b = pair(4, 4, seed=2)
    ptr = a.data_ptr()
    result = a.add_(b)
    assert result is a
    assert a.data_ptr() == ptr
    torch.testing.assert_close(a.cpu(), a_cpu.add_(b_cpu))
    assert ("add_.Tensor", NATIVE) in CALLS


def test_out_returns_the_callers_tensor_and_resizes(provider):
    a_cpu, a = pair(3, 6)
    b_cpu, b = pair(3, 6, seed=3)
    out = torch.empty(0, device="flagos")
    result = torch.add(a, b, out=out)
    assert result is out
    assert out.shape == (3, 6)
    torch.testing.assert_close(out.cpu(), a_cpu + b_cpu)
    assert ("add.out", NATIVE) in CALLS


def test_autograd_matches_native(provider):
    x_cpu, _ = pair(6, 5)
    w_cpu, _ = pair(6, 5, seed=4)
    x_cpu.requires_grad_()
    w_cpu.requires_grad_()
    x = x_cpu.detach().to("flagos").requires_grad_()
    w = w_cpu.detach().to("flagos").requires_grad_()
    torch.relu(x * w + x).sum().backward()
    torch.relu(x_cpu * w_cpu + x_cpu).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad)
    names = {name for name, _ in CALLS}
    assert {"mul.Tensor", "add.Tensor", "relu", "threshold_backward"} <= names


def test_exceptions_keep_their_type_and_name_the_operator(provider):
    _, a = pair(3)
    routing.register_python_kernel("mul.Tensor", k_broken)
    with pytest.raises(
        KeyError, match=r"aten::mul\.Tensor \(flagos_python route\): .*lost its key"
    ) as err:
        a * a
    assert isinstance(err.value.__cause__, KeyError)
    routing.register_python_kernel("mul.Tensor", k_custom_error)
    with pytest.raises(ValueError, match=r"aten::mul\.Tensor .*bad shapes for this kernel"):
        a * a


def test_exceptions_in_backward_propagate(provider):
    routing.register_python_kernel("threshold_backward", k_backward_error)
    x = torch.ones(3, device="flagos", requires_grad=True)
    y = torch.relu(x).sum()
    with pytest.raises(
        TypeError,
        match=r"aten::threshold_backward \(flagos_python route\): backward kernel refuses",
    ):
        y.backward()


def test_wrong_result_type_is_a_type_error(provider):
    routing.register_python_kernel("relu", k_wrong_type)
    _, a = pair(3)
    with pytest.raises(
        TypeError, match=r"aten::relu \(flagos_python route\): the Python kernel returned"
    ):
        torch.relu(a)


def test_missing_kernel_is_an_error():
    _, a = pair(3)
    with routing.route("aten::sigmoid", "flagos_python"):
        with pytest.raises(NotImplementedError, match="no Python kernel is registered for it"):
            torch.sigmoid(a)
    assert routing.get_route("sigmoid") == routing.default_route()


def test_provider_validation():
    with pytest.raises(TypeError, match="no FLAGOS_KERNELS mapping"):
        routing.register_provider(types.ModuleType("empty_provider"))
    with pytest.raises(RuntimeError, match="unknown operator 'aten::not_an_op'"):
        routing.register_provider({"not_an_op": k_relu})
    with pytest.raises(TypeError, match="must be callable"):
        routing.register_python_kernel("relu", 42)


def test_unregistering_a_kernel_while_other_threads_call_it_raises_cleanly():
    # A call waits for the GIL after its first check; a kernel unregistered meanwhile must give
    # the "no Python kernel" error, not a call through a null pointer (a segfault before).
    from tests.conftest import run_python

    script = """
import threading, time
import torch, torch_fl
from torch_fl import routing
op = "aten::neg"
def kernel(x):
    return torch.neg(x)
routing.register_python_kernel(op, kernel)
routing.set_route(op, "flagos_python")
x = torch.randn(16, device="flagos")
stop, seen, errors = False, set(), []
def call():
    while not stop:
        try:
            torch.testing.assert_close(torch.neg(x).cpu(), -x.cpu())
            seen.add("ran")
        except NotImplementedError as e:
            if "no Python kernel is registered" not in str(e):
                errors.append(repr(e))
            seen.add("unregistered")
        except Exception as e:  # a wrong result or another error: the test must see it
            errors.append(repr(e))
def toggle():  # a short stay in each state, so calls meet both and the changes between
    while not stop:
        routing.register_python_kernel(op, None)
        time.sleep(0.0002)
        routing.register_python_kernel(op, kernel)
        time.sleep(0.0002)
threads = [threading.Thread(target=call) for _ in range(2)] + [threading.Thread(target=toggle)]
for t in threads:
    t.start()
time.sleep(1.5)
stop = True
for t in threads:
    t.join()
print("done", sorted(seen), "errors", len(errors), errors[:3])
"""
    result = run_python(script, timeout=120)
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert "done ['ran', 'unregistered'] errors 0" in result.stdout, result.stdout
