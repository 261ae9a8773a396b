"""Autograd stays intact on flagos under dispatch modes and function transforms: a Python
TorchDispatchMode around training, torch.func (vmap, grad, jacrev, jvp, hessian, per-sample
gradients), and double backward; each against the same computation on CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, hessian, jacrev, jvp, vmap
from torch.utils._python_dispatch import TorchDispatchMode

import torch_fl


class Recorder(TorchDispatchMode):
    """Passes every operator through and notes its name and result devices."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.devices: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.devices.add(t.device.type)
        return out


def cpu_and_flagos(*shape: int, n: int = 1, dtype=torch.float64):
    """n CPU tensors and their flagos copies, all requiring grad."""
    g = torch.Generator().manual_seed(0)
    cpu = [torch.randn(*shape, dtype=dtype, generator=g).requires_grad_() for _ in range(n)]
    return cpu, [t.detach().to("flagos").requires_grad_() for t in cpu]


# ---- dispatch modes ----


@pytest.mark.parametrize("causal", [False, True])
def test_attention_gradients_under_a_dispatch_mode(causal):
    """A Python dispatch mode must not cut attention out of the autograd graph (zero
    gradients would look plausible)."""
    cpu, flagos = cpu_and_flagos(2, 4, 8, 16, n=3)
    mode = Recorder()
    with mode:
        out = F.scaled_dot_product_attention(*flagos, is_causal=causal)
        assert out.grad_fn is not None
        forward = list(mode.ops)
        out.square().sum().backward()
    F.scaled_dot_product_attention(*cpu, is_causal=causal).square().sum().backward()
    assert mode.devices == {"flagos"}
    backward = mode.ops[len(forward) :]
    assert backward, "the backward did not pass through the mode"
    # A fused kernel (CPU's flash for float64) has a fused backward; where the native device
    # picks the math path (CUDA for float64), both directions decompose into plain operators.
    if any("attention" in op for op in forward):
        assert any("attention" in op and "backward" in op for op in backward), backward
    for c, f in zip(cpu, flagos, strict=True):
        assert f.grad.abs().sum() > 0
        torch.testing.assert_close(f.grad.cpu(), c.grad)


def test_training_under_a_dispatch_mode_equals_training_without_it():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).double()
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    results = []
    for with_mode in (False, True):
        model = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
        model = model.double().to("flagos")
        model.load_state_dict(layer.state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        mode = Recorder()
        with mode if with_mode else torch.enable_grad():
            for _ in range(2):
                opt.zero_grad()
                model(x.to("flagos")).square().mean().backward()
                opt.step()
        assert not with_mode or "aten.addmm.default" in mode.ops
        results.append([p.detach().cpu() for p in model.parameters()])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# ---- torch.func ----


def test_vmap_of_grad_and_per_sample_gradients():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, 4, dtype=torch.float64, generator=g)
    x = torch.randn(7, 4, dtype=torch.float64, generator=g)
    fw, fx = w.to("flagos"), x.to("flagos")

    def f(w, x):
        return torch.tanh(x @ w.t()).sum()

    per_example = vmap(grad(f), in_dims=(None, 0))
    torch.testing.assert_close(per_example(fw, fx).cpu(), per_example(w, x))

    torch.manual_seed(0)
    cpu_model = torch.nn.Linear(4, 3).double()
    model = torch.nn.Linear(4, 3).double().to("flagos")
    model.load_state_dict(cpu_model.state_dict())

    def loss(module):
        return lambda params, xi: functional_call(module, params, (xi,)).pow(2).sum()

    got = vmap(grad(loss(model)), in_dims=(None, 0))(
        {k: v.detach() for k, v in model.named_parameters()}, fx
    )
    expected = vmap(grad(loss(cpu_model)), in_dims=(None, 0))(
        {k: v.detach() for k, v in cpu_model.named_parameters()}, x
    )
    for name, value in expected.items():
        assert got[name].device.type == "flagos"
        torch.testing.assert_close(got[name].cpu(), value)


def test_jacrev_jvp_and_hessian():
    w = torch.randn(3, 4, dtype=torch.float64)
    x = torch.randn(4, dtype=torch.float64)
    fw, fx = w.to("flagos"), x.to("flagos")

    def softmax_of(weight):
        return lambda v: F.softmax(weight @ v, -1)

    torch.testing.assert_close(jacrev(softmax_of(fw))(fx).cpu(), jacrev(softmax_of(w))(x))
    tangent = torch.randn(4, dtype=torch.float64)
    out, jv = jvp(softmax_of(fw), (fx,), (tangent.to("flagos"),))
    ref_out, ref_jv = jvp(softmax_of(w), (x,), (tangent,))
    torch.testing.assert_close(out.cpu(), ref_out)
    torch.testing.assert_close(jv.cpu(), ref_jv)

    def energy(v):
        return (v.sin() ** 2).sum() + (v[:, None] * v[None, :]).tanh().sum()

    torch.testing.assert_close(hessian(energy)(fx).cpu(), hessian(energy)(x))


def test_vmap_randomness_is_per_sample_or_shared_as_asked():
    x = torch.ones(4, 1000, device="flagos")
    different = vmap(lambda r: F.dropout(r, 0.5), randomness="different")(x)
    same = vmap(lambda r: F.dropout(r, 0.5), randomness="same")(x)
    assert not torch.equal(different[0], different[1])
    assert all(torch.equal(same[0], same[i]) for i in range(1, 4))
    assert set(same.unique().cpu().tolist()) == {0.0, 2.0}
    with pytest.raises(RuntimeError, match="randomness"):
        vmap(lambda r: F.dropout(r, 0.5))(x)  # the default, "error", refuses random ops


# ---- double backward ----


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.softmax(x, -1).tanh(),
        lambda x: F.layer_norm(x, x.shape[-1:]).sigmoid(),
        lambda x: F.log_softmax(x @ x.t(), -1),
        lambda x: F.gelu(x).pow(3),
        lambda x: F.conv1d(x[None], x[:2, None, :3].expand(2, 3, 3).contiguous()),
    ],
    ids=["softmax_tanh", "layer_norm", "log_softmax_mm", "gelu_pow", "conv1d"],
)
def test_gradgradcheck(fn):
    x = torch.randn(3, 4, dtype=torch.float64, device="flagos", requires_grad=True)
    assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.skipif(
    torch_fl.build_config.ACCELERATOR != "cpu",
    reason="CUDA's attention has other kernels; a native CUDA backward cannot run beside flagos "
    "in one process (pytorch/pytorch#161129)",
)
def test_attention_double_backward_behaves_as_on_cpu():
    """torch's CPU attention kernel has no double backward; flagos (which runs it zero-copy on
    this accelerator) says the same rather than returning wrong second derivatives."""
    outcomes = []
    for device in ("cpu", "flagos"):
        qkv = [
            torch.randn(1, 2, 3, 4, dtype=torch.float64, device=device, requires_grad=True)
            for _ in range(3)
        ]
        try:
            outcomes.append(torch.autograd.gradgradcheck(F.scaled_dot_product_attention, qkv))
        except RuntimeError as err:
            outcomes.append(str(err).splitlines()[0])
    assert outcomes[0] == outcomes[1]


def test_setting_data_is_not_an_operator_call_under_modes_or_make_fx():
    # `param.data = t` asks _has_compatible_shallow_copy_type, which CPU and CUDA answer above
    # autograd: a dispatch mode must not see it (SchemaCheckMode failed on it), nor a make_fx
    # graph record it, on flagos as on cpu.
    from torch._subclasses.schema_check_mode import SchemaCheckMode
    from torch.fx.experimental.proxy_tensor import make_fx

    class Seen(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    def set_data(x, y):
        z = x.clone()
        z.data = y
        return z * 2

    seen: dict[str, list[str]] = {}
    graphs: dict[str, str] = {}
    for device in ("cpu", "flagos"):
        p = torch.nn.Parameter(torch.ones(2, device=device))
        with SchemaCheckMode():
            p.data = torch.zeros(2, device=device)
        assert p.device.type == device and float(p.sum()) == 0.0
        with Seen() as mode:
            torch.nn.Linear(2, 2).to(device)
        seen[device] = mode.ops
        x, y = torch.ones(3, device=device), torch.full((3,), 2.0, device=device)
        graphs[device] = make_fx(set_data)(x, y).code
    assert not any("shallow_copy" in op for op in seen["flagos"]), seen["flagos"]
    assert "shallow_copy" not in graphs["flagos"], graphs["flagos"]
    assert graphs["flagos"].replace("flagos", "cpu") == graphs["cpu"].replace("flagos", "cpu")
