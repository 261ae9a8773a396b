"""Custom operators on flagos (docs/custom-ops.md): the recipe in examples/custom_ops.py, and
torch_fl.native_view / torch_fl.flagos_view that its kernels use."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from tests.conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "custom_ops.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("fl_custom_ops_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ops = _load_example()  # registers fl_example::* once for this process


# ---- the views ----


def test_views_share_memory_and_layout_both_ways(two_devices):
    x = torch.arange(24.0, device="flagos:1").view(4, 6)[:, 1:5].t()
    native = torch_fl.native_view(x)
    assert native.device.type == torch_fl._C._native_device_type()
    assert (native.data_ptr(), native.shape, native.stride()) == (x.data_ptr(), x.shape, x.stride())
    native.fill_(7.0)  # writes land in the flagos memory
    assert torch.equal(x.cpu(), torch.full((4, 4), 7.0))
    back = torch_fl.flagos_view(native, "flagos:1")
    assert back.device == torch.device("flagos:1") and back.data_ptr() == x.data_ptr()
    with pytest.raises(ValueError, match="a view of flagos:1 memory, not flagos:0"):
        torch_fl.flagos_view(native, 0)
    fresh = torch.zeros(3, device=native.device)
    if fresh.device.index is None:  # cpu accelerator: host memory may become any device's
        assert torch_fl.flagos_view(fresh, 1).device == torch.device("flagos:1")
    else:  # cuda:N memory is flagos:N memory
        assert torch_fl.flagos_view(fresh).device.index == fresh.device.index


def test_flagos_view_keeps_the_native_memory_alive():
    native = torch_fl.native_view(torch.arange(1000.0, device="flagos"))
    kept = torch_fl.flagos_view(native * 1)  # a fresh native tensor nothing else holds
    del native
    assert torch.equal(kept.cpu(), torch.arange(1000.0))
    assert kept.device == torch.device("flagos", torch.flagos.current_device())


def _native_zeros() -> torch.Tensor:
    return torch_fl.native_view(torch.zeros(2, device="flagos"))


@pytest.mark.skipif(torch_fl.build_config.ACCELERATOR != "cpu", reason="host memory has no index")
def test_flagos_view_checks_the_index():
    with pytest.raises(IndexError, match="Invalid device flagos:99"):
        torch_fl.flagos_view(torch.zeros(2), 99)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: torch_fl.native_view(torch.zeros(2)), RuntimeError, "expects a flagos tensor"),
        (
            lambda: torch_fl.flagos_view(torch.zeros(2, device="flagos")),
            RuntimeError,
            "_native_to_flagos_view expects a",
        ),
        (lambda: torch_fl.flagos_view(_native_zeros(), "meta"), ValueError,
         "device must be a flagos device, not meta"),
    ],
)  # fmt: skip
def test_view_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def _views_over_flagos_memory() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.arange(4.0, device="flagos")
    return x, torch_fl.native_view(x)


def _views_over_native_memory() -> tuple[torch.Tensor, torch.Tensor]:
    native = torch.arange(4.0, device=_native_zeros().device)
    return torch_fl.flagos_view(native), native


@pytest.mark.parametrize("views", [_views_over_flagos_memory, _views_over_native_memory])
@pytest.mark.parametrize("grow", ["flagos", "native", "flagos_out"])
def test_views_pin_both_storages_as_numpy_pins_a_cpu_tensors(views, grow):
    # Growing either side would move its memory away from the other, or free it under the other
    # (the old memory would go to the next allocation); torch refuses to resize a cpu storage
    # numpy shares, and both views refuse in the same way. (A refused resize_ leaves the new
    # sizes behind, on cpu too: each case starts afresh.)
    numpy_shared = torch.zeros(4)
    numpy_shared.numpy()
    with pytest.raises(RuntimeError, match="not resizable") as cpu_refusal:
        numpy_shared.resize_(16)
    flagos, native = views()
    with pytest.raises(RuntimeError, match="not resizable") as refusal:
        if grow == "flagos_out":  # an out= that must grow
            torch.add(torch.ones(16, device="flagos"), 1, out=flagos)
        else:
            (flagos if grow == "flagos" else native).resize_(16)
    assert str(refusal.value).startswith(str(cpu_refusal.value))
    flagos, native = views()
    native.add_(1)
    flagos.add_(1)
    assert torch.equal(flagos.cpu(), torch.arange(2.0, 6.0))
    assert torch.equal(native.cpu(), torch.arange(2.0, 6.0))


@pytest.mark.parametrize("kept", ["flagos", "native"])
def test_a_tensor_grows_again_once_its_views_are_gone(kept):
    # Pinned while a view lives (two views: until both are gone), then as before.
    native_owned = torch.ones(4, device=_native_zeros().device)
    flagos_owned = torch.ones(4, device="flagos")
    owner = flagos_owned if kept == "flagos" else native_owned
    make_view = torch_fl.native_view if kept == "flagos" else torch_fl.flagos_view
    views = [make_view(owner), make_view(owner)]
    views.pop()
    with pytest.raises(RuntimeError, match="not resizable"):
        owner.clone().set_(owner.untyped_storage()).resize_(16)
    views.pop()
    assert owner.untyped_storage().resizable()
    owner.resize_(16)
    owner[4:] = 2.0
    assert torch.equal(owner.cpu(), torch.cat([torch.ones(4), torch.full((12,), 2.0)]))


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.ones(2, device="flagos").to_sparse(),
        lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], device="flagos"),
    ],
    ids=["sparse", "nested"],
)
def test_views_take_strided_tensors_only(make):
    flagos = make()
    with pytest.raises(ValueError, match="native_view takes strided tensors only"):
        torch_fl.native_view(flagos)
    with pytest.raises(ValueError, match="flagos_view takes strided tensors only"):
        torch_fl.flagos_view(flagos.to(_native_zeros().device))


@pytest.mark.skipif(
    torch_fl.build_config.ACCELERATOR != "cpu", reason="flagos memory is the host's on cpu only"
)
def test_a_shared_file_mapping_stays_in_place_as_on_cpu(tmp_path):
    # torch.from_file(shared=True): writes reach the file; growing the tensor is refused (it
    # would part the tensor from the file) on both devices.
    path = tmp_path / "four_floats.bin"
    files = {}
    for device in ("cpu", "flagos"):
        path.write_bytes(bytes(16))
        t = torch.from_file(str(path), shared=True, size=4, dtype=torch.float32, device=device)
        assert not t.untyped_storage().resizable()
        with pytest.raises(RuntimeError, match="not resizable"):
            t.resize_(8)
        t[0] = 42.0
        del t
        files[device] = path.read_bytes()
    assert files["flagos"] == files["cpu"] != bytes(16)


# ---- the recipe ----


def test_forward_and_backward_match_cpu():
    x = torch.randn(16, 8, dtype=torch.float64)
    fx = x.to("flagos").requires_grad_()
    cx = x.clone().requires_grad_()
    y = ops.scaled_silu(fx, 1.5)
    assert y.device == fx.device
    torch.testing.assert_close(y.detach().cpu(), F.silu(x) * 1.5)
    grad = torch.randn(16, 8, dtype=torch.float64)
    y.backward(grad.to("flagos"))
    (F.silu(cx) * 1.5).backward(grad)
    torch.testing.assert_close(fx.grad.cpu(), cx.grad)


def test_gradcheck():
    x = torch.randn(5, 3, dtype=torch.float64, device="flagos", requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: ops.scaled_silu(t, 0.7), (x,))


def test_outputs_are_flagos_memory():
    x = torch.randn(1 << 16, device="flagos")
    torch.flagos.synchronize()
    before = torch.flagos.memory_allocated()
    y = ops.scaled_silu(x, 2.0)
    assert torch.flagos.memory_allocated() - before >= y.numel() * y.element_size()
    del y
    assert torch.flagos.memory_allocated() == before


@pytest.mark.skipif(
    not ops.AUTOCAST_REGISTERED,
    reason="this torch's CustomOpDef.register_autocast accepts only cuda and cpu (torch 2.11)",
)
def test_autocast_runs_the_operator_in_float16():
    x = torch.randn(4, 4, device="flagos")
    with torch.autocast("flagos", dtype=torch.float16):
        y = ops.scaled_silu(x, 2.0)
    assert y.dtype == torch.float16
    torch.testing.assert_close(
        y.float().cpu(), F.silu(x.cpu().half()).float() * 2, atol=2e-3, rtol=2e-3
    )
    assert ops.scaled_silu(x, 2.0).dtype == torch.float32  # outside autocast


def test_fake_kernel_serves_meta_tensors_and_torch_compile():
    meta = ops.scaled_silu(torch.empty(3, 5, device="meta"), 1.0)
    assert meta.shape == (3, 5) and meta.device.type == "meta"
    compiled = torch.compile(
        lambda t: ops.scaled_silu(t, 3.0).sum(-1), fullgraph=True, dynamic=True
    )
    for rows in (2, 7):
        t = torch.randn(rows, 6, device="flagos")
        torch.testing.assert_close(compiled(t).cpu(), (F.silu(t.cpu()) * 3).sum(-1))


def test_opcheck_where_torch_supports_other_devices():
    """torch's autograd-registration check raises NYI for any device but CPU/CUDA/XPU; the
    others run."""
    x = torch.randn(4, 4, device="flagos", requires_grad=True)
    result = torch.library.opcheck(
        torch.ops.fl_example.scaled_silu.default,
        (x, 2.0),
        test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"),
    )
    assert set(result.values()) == {"SUCCESS"}


def test_a_mutating_operator_bumps_the_version_and_writes_in_place():
    a, b = torch.randn(10), torch.randn(10)
    fa, fb = a.to("flagos"), b.to("flagos")
    ptr, version = fa.data_ptr(), fa._version
    assert ops.add_relu_(fa, fb) is None
    assert fa.data_ptr() == ptr and fa._version > version
    torch.testing.assert_close(fa.cpu(), (a + b).relu())


def test_autograd_refuses_saved_tensors_the_operator_overwrote():
    x = torch.randn(6, device="flagos", requires_grad=True)
    y = x * 1  # a non-leaf
    w = y * y  # saves y
    ops.add_relu_(y, torch.ones(6, device="flagos"))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.sum().backward()


_CPU_ONLY = torch.library.Library("fl_test_cpu_only", "DEF")
_CPU_ONLY.define("bump_(Tensor(a!) x) -> ()")
_CPU_ONLY.define("bump_ret_(Tensor(a!) x) -> Tensor(a!)")
_CPU_ONLY.define("middle(Tensor(a) x) -> Tensor(a)")
_CPU_ONLY.define("same(Tensor(a) x) -> Tensor(a)")


def _bump(x):
    x.add_(1)


def _bump_ret(x):
    return x.add_(1)


def _middle(x):
    return x[1:-1]


_CPU_ONLY.impl("bump_", _bump, "CPU")
_CPU_ONLY.impl("bump_ret_", _bump_ret, "CPU")
_CPU_ONLY.impl("middle", _middle, "CPU")
_CPU_ONLY.impl("same", lambda x: x, "CPU")
_CPU_ONLY.define("doubled_on(Tensor x, Device device) -> Tensor")
_CPU_ONLY.impl("doubled_on", lambda x, device: (x * 2).to(device), "CPU")


@pytest.mark.parametrize("target", ["flagos", "flagos:1", "cpu"])
def test_a_device_argument_names_where_the_results_go(target: str) -> None:
    if target == "flagos:1" and torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices")
    x = torch.arange(4.0)
    got = torch.ops.fl_test_cpu_only.doubled_on(x.to("flagos"), torch.device(target))
    want = torch.device("flagos", torch.flagos.current_device()) if target == "flagos" else None
    assert got.device == (want or torch.device(target))
    torch.testing.assert_close(got.cpu(), x * 2)


@pytest.mark.parametrize("op", ["bump_", "bump_ret_"])
def test_a_cpu_kernel_updating_its_argument_shows_on_the_flagos_tensors_version(op):
    # An operator with only a CPU kernel runs on flagos through cpu_fallback; the kernel's own
    # in-place update must reach the flagos tensor's version counter as it does a cpu tensor's,
    # or backward silently uses the overwritten value.
    versions = {}
    for device in ("cpu", "flagos"):
        w = torch.ones(3, device=device, requires_grad=True)
        z = torch.full((3,), 2.0, device=device)
        y = (w * z).sum()  # saves z
        getattr(torch.ops.fl_test_cpu_only, op)(z)
        versions[device] = z._version
        torch.testing.assert_close(z.cpu(), torch.full((3,), 3.0))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()
    assert versions["flagos"] == versions["cpu"] > 0


@pytest.mark.skipif(
    torch_fl.build_config.ACCELERATOR != "cpu",
    reason="a device accelerator's cpu_fallback runs the kernel on host copies: no view",
)
def test_a_cpu_kernel_returning_a_view_gives_an_autograd_view_as_on_cpu():
    # `Tensor(a) x -> Tensor(a)`: the result is a view of the caller's tensor, so an in-place
    # update of it reaches the base's autograd history and gradients match cpu's.
    results = {}
    for device in ("cpu", "flagos"):
        x = torch.arange(6.0, device=device, requires_grad=True)
        base = x * 1
        view = torch.ops.fl_test_cpu_only.middle(base)
        assert view._is_view() and view._base is base
        view.mul_(3)  # through the view: base's history must show it
        assert base._version == view._version > 0
        (base * base).sum().backward()
        with torch.no_grad():
            plain = torch.ops.fl_test_cpu_only.middle(base)
        assert plain._is_view() and plain._base is base
        with torch.inference_mode():
            inference = torch.ops.fl_test_cpu_only.middle(torch.arange(6.0, device=device))
        assert not inference._is_view()
        results[device] = (base.detach().cpu(), x.grad.cpu(), view.detach().cpu())
    for flagos, cpu in zip(results["flagos"], results["cpu"], strict=True):
        torch.testing.assert_close(flagos, cpu)


@pytest.mark.parametrize("copying", [False, True])
def test_a_cpu_kernel_returning_its_argument_returns_the_callers_tensor(copying):
    # On cpu `same(x) is x` (a leaf stays a leaf, in-place on it refused as on a leaf); flagos
    # once returned a new as_strided view instead. Also through the host-copying fallback.
    torch_fl._C._routing_set_force_copy_fallback(copying)
    try:
        for device in ("cpu", "flagos"):
            x = torch.randn(3, device=device, requires_grad=True)
            y = torch.ops.fl_test_cpu_only.same(x)
            assert y is x and y.is_leaf and not y._is_view()
            base = x * 2
            assert torch.ops.fl_test_cpu_only.same(base) is base
    finally:
        torch_fl._C._routing_set_force_copy_fallback(False)


def test_a_cpu_tensor_has_no_kernel_of_a_flagos_operator():
    with pytest.raises(NotImplementedError, match="fl_example::scaled_silu"):
        ops.scaled_silu(torch.randn(3), 1.0)


def test_the_example_script_runs():
    r = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "scaled_silu: forward and backward match CPU" in r.stdout
    assert "add_relu_: in place, version counter bumped" in r.stdout


@pytest.mark.gpu
def test_triton_kernel_on_flagos_tensors():
    pytest.importorskip("triton")
    x = torch.randn(3000, device="flagos")
    torch.testing.assert_close(ops.triton_scale(x, 0.25).cpu(), x.cpu() * 0.25)
    y = torch.randn(33, 7, device="flagos").t()  # non-contiguous input
    torch.testing.assert_close(ops.triton_scale(y, -2.0).cpu(), y.cpu() * -2.0)
    assert ops.triton_scale(x, 1.0).device == x.device


# ---- operators defined again, kernels registered late ----


def test_an_operator_defined_again_maps_the_arguments_of_its_new_schema():
    # A custom operator dropped and defined again under the same name (a notebook cell run
    # twice with another signature) must be called by its new schema: its tensor-list argument
    # reaches the CPU kernel as cpu tensors and its out= result is the caller's tensor, as on
    # cpu. (The router once kept the first schema's plan: the list stayed flagos.)
    seen: list[list[str]] = []
    lib = torch.library.Library("fl_test_redefined", "DEF")
    lib.define("f(Tensor x) -> Tensor")
    lib.impl("f", lambda x: x * 2, "CPU")
    x = torch.arange(4.0, device="flagos")
    torch.testing.assert_close(torch.ops.fl_test_redefined.f(x).cpu(), torch.arange(4.0) * 2)
    del lib
    lib = torch.library.Library("fl_test_redefined", "DEF")
    lib.define("f(Tensor[] xs, Tensor(a!) out, *, float alpha=1.0) -> Tensor(a!)")

    def summed(xs, out, alpha=1.0):
        seen.append([t.device.type for t in xs])
        return out.copy_(xs[0] + alpha * xs[1])

    lib.impl("f", summed, "CPU")
    try:
        for device in ("cpu", "flagos"):
            xs = [torch.arange(4.0, device=device), torch.ones(4, device=device)]
            out = torch.empty(4, device=device)
            result = torch.ops.fl_test_redefined.f(xs, out, alpha=3.0)
            assert result is out
            torch.testing.assert_close(out.cpu(), torch.arange(4.0) + 3.0)
        native = torch_fl._C._native_device_type()
        assert seen == [["cpu", "cpu"], [native, native] if native == "cpu" else ["cpu", "cpu"]]
    finally:
        del lib


def test_a_python_kernel_of_an_operator_defined_again_gets_its_new_keywords():
    lib = torch.library.Library("fl_test_redefined_py", "DEF")
    lib.define("g(Tensor x, *, float alpha) -> Tensor")
    name = "fl_test_redefined_py::g"
    torch_fl.routing.register_python_kernel(name, lambda x, *, alpha: x * alpha)
    torch_fl.routing.set_route(name, "flagos_python")
    try:
        x = torch.arange(3.0, device="flagos")
        torch.testing.assert_close(
            torch.ops.fl_test_redefined_py.g(x, alpha=2.0).cpu(), torch.arange(3.0) * 2
        )
        del lib
        lib = torch.library.Library("fl_test_redefined_py", "DEF")
        lib.define("g(Tensor x, *, float beta, float gamma) -> Tensor")
        torch_fl.routing.register_python_kernel(name, lambda x, *, beta, gamma: x * beta + gamma)
        result = torch.ops.fl_test_redefined_py.g(x, beta=2.0, gamma=1.0)
        torch.testing.assert_close(result.cpu(), torch.arange(3.0) * 2 + 1)
    finally:
        torch_fl.routing.set_route(name, None)
        torch_fl.routing.register_python_kernel(name, None)
        del lib


def test_a_cpu_kernel_registered_after_the_first_call_is_used():
    # Registering a kernel announces nothing to the router, so the first refusal must not
    # stick: once the CPU kernel exists, the next call runs it (zero-copy on the cpu
    # accelerator, cpu_fallback on a device accelerator), as a cpu tensor's call would.
    lib = torch.library.Library("fl_test_late_kernel", "DEF")
    lib.define("f(Tensor x) -> Tensor")
    try:
        x = torch.arange(4.0, device="flagos")
        with pytest.raises(NotImplementedError, match="fl_test_late_kernel::f"):
            torch.ops.fl_test_late_kernel.f(x)
        lib.impl("f", lambda t: t * 2, "CPU")
        torch.testing.assert_close(
            torch.ops.fl_test_late_kernel.f(x).cpu(), torch.ops.fl_test_late_kernel.f(x.cpu())
        )
    finally:
        del lib


# ---- autograd through the kernels of operators without an autograd formula ----

_NO_AUTOGRAD = torch.library.Library("fl_test_no_autograd", "DEF")
_NO_AUTOGRAD.define("scale(Tensor x, float s) -> Tensor")
_NO_AUTOGRAD.define("pair(Tensor[] xs, Tensor w) -> (Tensor, Tensor, Tensor)")
_NO_AUTOGRAD.define("double_(Tensor(a!) x) -> ()")
_NO_AUTOGRAD.define("axpy_(Tensor(a!) y, Tensor x, float a) -> Tensor(a!)")
_NO_AUTOGRAD.impl("scale", lambda x, s: x * s, "CPU")
_NO_AUTOGRAD.impl(
    "pair", lambda xs, w: (xs[0] * w, (xs[0] + xs[1]).exp(), (xs[1] > 0).to(torch.int64)), "CPU"
)


def _double_(x):
    x.mul_(2)


_NO_AUTOGRAD.impl("double_", _double_, "CPU")
_NO_AUTOGRAD.impl("axpy_", lambda y, x, a: y.add_(x, alpha=a), "CPU")


def _no_autograd_run(device: str) -> list[torch.Tensor]:
    ops_ = torch.ops.fl_test_no_autograd
    torch.manual_seed(0)
    leaves = [torch.randn(4, requires_grad=True) for _ in range(3)]
    x, y, w = (t.detach().to(device).requires_grad_() for t in leaves)
    a = ops_.scale(x, 3.0)  # functional
    first, second, mask = ops_.pair([x, y], w)  # a list argument, several results
    b = x * 1
    ops_.double_(b)  # an in-place update of a non-leaf
    c = y * 1
    returned = ops_.axpy_(c, w, 0.5)
    assert returned is c and mask.dtype == torch.int64 and not mask.requires_grad
    loss = (a * a).sum() + (first * second).sum() + (b * b).sum() + (c * 3).sum()
    loss.backward()
    return [x.grad, y.grad, w.grad, a, first, second, b, c]


@pytest.fixture(params=["aliases", "host copies"])
def fallback_mapping(request):
    # "host copies": the cpu_fallback of a device accelerator (its arguments copied to host).
    torch_fl._C._routing_set_force_copy_fallback(request.param == "host copies")
    yield request.param
    torch_fl._C._routing_set_force_copy_fallback(False)


@pytest.mark.filterwarnings("ignore:.*autograd kernel was not registered")
def test_gradients_flow_through_a_cpu_kernel_without_an_autograd_formula(fallback_mapping):
    # torch's fallback for such operators leaves autograd on inside the kernel, so on cpu the
    # kernel's own torch calls record history. flagos once handed the kernel aliases without
    # history: no gradient for the functional operators, a wrong one (silently) for the
    # in-place one.
    for got, want in zip(_no_autograd_run("flagos"), _no_autograd_run("cpu"), strict=True):
        assert got.device.type == "flagos"
        torch.testing.assert_close(got.detach().cpu(), want.detach())


@pytest.mark.filterwarnings("ignore:.*autograd kernel was not registered")
def test_an_in_place_update_through_such_a_kernel_is_refused_where_cpu_refuses_it(
    fallback_mapping,
):
    for device in ("cpu", "flagos"):
        leaf = torch.ones(3, device=device, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            torch.ops.fl_test_no_autograd.double_(leaf)
        with torch.no_grad():  # no history to record: allowed on both
            torch.ops.fl_test_no_autograd.double_(leaf)
        assert leaf.detach().cpu().tolist() == [2.0, 2.0, 2.0]  # refused before it wrote
