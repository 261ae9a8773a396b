"""torch.compile (default Inductor backend) on flagos tensors.

Each test compares the compiled result with eager flagos and/or a CPU reference, and checks
that outputs and gradients stay on flagos. On the cpu accelerator Inductor generates C++
kernels for flagos; on cuda it generates Triton (the `gpu` tests check that part).

With FLAGOS_USE_FLAGTREE=1 in the environment every compile first asserts that the active
Triton is FlagTree (see docs/compile.md); the FlagTree tests here set up their own
environment in a subprocess, so they hold with or without FlagTree installed.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend
from torch._inductor.utils import run_and_get_code

import torch_fl

ACCELERATOR = torch_fl.build_config.ACCELERATOR
# A DCU's hipified torch reports "cuda" devices too, and Inductor generates Triton for both.
ON_CUDA = torch_fl._C._native_device_type() == "cuda"
REPO = Path(__file__).resolve().parents[2]
FLAGOS = torch.device("flagos", 0)
TOL = {"atol": 1e-4, "rtol": 1e-4}

# The guide's remedy, which the FLAGOS_USE_FLAGTREE failure must print.
FLAGTREE_PIP = 'python3 -m pip install "flagtree===0.6.2a1+hcu3.6"'
FLAGTREE_INDEX = "https://resource.flagos.net/repository/flagos-pypi-hosted/simple"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


def rand(*shape: int, device: torch.device | str = FLAGOS, **kw) -> torch.Tensor:
    return torch.randn(*shape, **kw).to(device)


def assert_on_flagos(*tensors: torch.Tensor, index: int = 0) -> None:
    for t in tensors:
        assert t.device == torch.device("flagos", index), t.device


def assert_close(actual: torch.Tensor, expected: torch.Tensor, **tol) -> None:
    torch.testing.assert_close(actual.cpu(), expected.cpu(), **(tol or TOL))


def check_against_eager_and_cpu(fn, *args: torch.Tensor, **tol):
    """Runs fn compiled and eager on flagos and eager on CPU copies; returns compiled output."""
    compiled = torch.compile(fn)(*args)
    eager = fn(*args)
    reference = fn(*[a.cpu() for a in args])
    outs = compiled if isinstance(compiled, tuple) else (compiled,)
    eagers = eager if isinstance(eager, tuple) else (eager,)
    refs = reference if isinstance(reference, tuple) else (reference,)
    for c, e, r in zip(outs, eagers, refs, strict=True):
        assert_on_flagos(c)
        assert c.dtype == e.dtype and c.shape == e.shape
        assert_close(c, e, **tol)
        assert_close(c, r, **tol)
    return compiled


def run_python(code: str, extra_path: list[str] | None = None, **env: str):
    environ = dict(os.environ)
    environ.update(env)
    paths = [*(extra_path or []), str(REPO), environ.get("PYTHONPATH", "")]
    environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=600,
        cwd=str(REPO),
    )


# --------------------------------------------------------------------------- registration


def test_import_stays_lazy_and_first_compile_registers():
    result = run_python(
        """
        import sys
        import torch, torch_fl
        assert "torch._inductor.codegen.common" not in sys.modules, "inductor loaded at import"
        assert "torch._dynamo.device_interface" not in sys.modules, "dynamo loaded at import"
        import torch_fl.compile as c
        assert not c.is_registered()
        out = torch.compile(lambda x: x * 2 + 1)(torch.ones(4, device="flagos"))
        assert out.device.type == "flagos" and out.cpu().eq(3).all()
        assert c.is_registered()
        from torch._dynamo.device_interface import get_interface_for_device
        from torch._inductor.codegen.common import get_scheduling_for_device
        from torch_fl.compile.device_interface import FlagosInterface
        assert get_interface_for_device("flagos") is FlagosInterface
        from torch._inductor.codegen.common import custom_backend_passes
        assert custom_backend_passes["flagos"] is not None  # keys the FX graph cache
        print(get_scheduling_for_device("flagos").__name__)
        """
    )
    assert result.returncode == 0, result.stderr[-4000:]
    expected = "FlagosTritonScheduling" if ON_CUDA else "FlagosCppScheduling"
    assert result.stdout.strip().splitlines()[-1] == expected


def test_a_compilation_before_import_torch_fl_leaves_flagos_compilable():
    # With autoload off, torch.compile may run before torch_fl is imported; Inductor looks for
    # a renamed PrivateUse1 device's code generation only at its first compilation.
    result = run_python(
        """
        import torch
        assert torch.compile(lambda x: x.sin() + 1)(torch.ones(3)).shape == (3,)
        import torch_fl
        x = torch.arange(6.0)
        out = torch.compile(lambda x: x.softmax(0) * 2)(x.to("flagos"))
        assert out.device.type == "flagos", out.device
        torch.testing.assert_close(out.cpu(), x.softmax(0) * 2)
        print("ok")
        """,
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.strip().splitlines()[-1] == "ok"


@pytest.mark.parametrize(("value", "wanted"), [("1", True), ("no", False), ("", False)])
def test_flagtree_switch_reads_booleans_and_refuses_others(monkeypatch, value, wanted):
    from torch_fl.compile import _runtime

    monkeypatch.setenv("FLAGOS_USE_FLAGTREE", value)
    assert _runtime.flagtree_wanted() is wanted
    monkeypatch.setenv("FLAGOS_USE_FLAGTREE", "maybe")
    with pytest.raises(ValueError, match="FLAGOS_USE_FLAGTREE='maybe' is not a boolean"):
        _runtime.flagtree_wanted()


def test_registering_flagos_first_keeps_the_builtin_device_op_overrides():
    # torch 2.11 loads Inductor's built-in overrides only into an empty registry and gives any
    # device missing afterwards the CPU's no-op ones ('with pass:' guards in cuda graphs).
    result = run_python(
        """
        import torch, torch_fl
        import torch_fl.compile as c
        c.register()
        from torch._inductor.codegen.common import get_device_op_overrides
        print(get_device_op_overrides("cuda").device_guard(0))
        print(get_device_op_overrides("flagos").device_guard(1))
        """
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.split() == ["torch.cuda._DeviceGuard(0)", "torch.flagos.device(1)"]


def test_generated_code_matches_the_accelerator():
    def fn(x):
        return torch.sigmoid(x) * x + 1

    x = rand(64)
    out, (code, *_) = run_and_get_code(torch.compile(fn), x)
    assert_on_flagos(out)
    assert_close(out, fn(x))
    if ON_CUDA:
        assert "triton_heuristics" in code and "get_raw_stream" in code
        assert "torch.flagos.device(0)" in code
        assert "type='flagos'" not in code  # Triton kernels target the native device
    else:
        assert "cpp_fused" in code and "triton" not in code


# ------------------------------------------------------------------------------ operators


def test_elementwise():
    def fn(x, y):
        a = torch.sin(x) * torch.cos(y) + x.exp().clamp(max=4.0)
        b = torch.where(x > y, F.gelu(a), F.silu(y)) / (1 + y.abs())
        return a, b, (x + 1).to(torch.float64)

    check_against_eager_and_cpu(fn, rand(33, 17), rand(33, 17))


def test_broadcast_strided_and_integer_inputs():
    def fn(x, b, idx):
        y = x.t() + b  # transposed input, broadcast bias
        return y * 2, (idx * 3 + 1) % 7

    x = rand(16, 8)
    check_against_eager_and_cpu(fn, x, rand(16), torch.arange(10).to(FLAGOS))


def test_reductions():
    def fn(x):
        return (
            x.sum(dim=1),
            x.mean(dim=0, keepdim=True),
            x.amax(dim=-1),
            x.var(dim=1),
            torch.softmax(x, dim=-1),
            torch.logsumexp(x, dim=0),
            x.argmax(dim=1),
            x.sum(),
        )

    check_against_eager_and_cpu(fn, rand(37, 129), atol=1e-4, rtol=1e-3)


def test_a_zero_dim_cpu_tensor_first_keeps_results_on_flagos():
    # Eager lets a 0-dim cpu tensor meet a tensor of any device; Inductor's pointwise lowering
    # would compute on the first input's device (flagos is not in its GPU list).
    scale = torch.tensor(2.5)

    def fn(s, x, w):
        return (
            s * x,
            s - x,
            torch.lerp(x, x * 2, s),
            torch.maximum(s, x),
            (s * x).relu() @ w,
            torch.tensor(2.0) * x,
            (s * x).sum(),
        )

    check_against_eager_and_cpu(fn, scale, rand(8, 8), rand(8, 8))

    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.scale = torch.tensor(0.5)  # a plain attribute: stays on the cpu

        def forward(self, x):
            return self.scale * self.lin(x)

    model = Scaled()
    reference = model(torch.ones(2, 8))
    model.lin.to(FLAGOS)
    out = torch.compile(model)(torch.ones(2, 8, device=FLAGOS))
    assert_on_flagos(out)
    assert_close(out, reference)


def test_argmax_over_every_dimension_of_non_contiguous_inputs():
    # The index is the logical (row-major) one whatever the memory layout.
    def fn(t, c):
        return t.argmax(), t.argmin(keepdim=True), c.argmax(), c.argmin(), t.argmax(dim=0)

    transposed = rand(6, 4).t()
    channels_last = rand(2, 3, 4, 4).to(memory_format=torch.channels_last)
    check_against_eager_and_cpu(fn, transposed, channels_last)


def test_matmul():
    def fn(a, b, c, w, bias):
        return torch.relu(a @ b + 1), torch.bmm(c, c.transpose(1, 2)), F.linear(a, w, bias)

    check_against_eager_and_cpu(
        fn, rand(16, 32), rand(32, 8), rand(3, 8, 16), rand(24, 32), rand(24), atol=1e-4, rtol=1e-3
    )


def test_inplace_mutation_of_an_input():
    def fn(x, y):
        x.mul_(2).add_(y)
        return x.sum()

    x, y = rand(8, 8), rand(8, 8)
    expected_x = x.cpu() * 2 + y.cpu()
    total = torch.compile(fn)(x, y)
    assert_on_flagos(x, total)
    assert_close(x, expected_x)
    assert_close(total, expected_x.sum())


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention and an MLP."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def test_transformer_block():
    block = Block().eval()
    block_cpu = copy.deepcopy(block)
    block.to(FLAGOS)
    x = rand(2, 8, 32)
    with torch.no_grad():
        out = torch.compile(block)(x)
        eager = block(x)
        reference = block_cpu(x.cpu())
    assert_on_flagos(out)
    assert_close(out, eager, atol=1e-4, rtol=1e-3)
    assert_close(out, reference, atol=1e-4, rtol=1e-3)


# ------------------------------------------------------------------------------- training


def _models(module: nn.Module):
    eager = copy.deepcopy(module).to(FLAGOS)
    compiled_model = copy.deepcopy(module).to(FLAGOS)
    return module, eager, compiled_model


# The fused attention kernel eager flagos picks (the native device's choice: flash, cuDNN or
# memory-efficient on a GPU, flash on CPU) is the one compiled code calls: the choice is made
# on memory-less twins of the fake tensors Dynamo traces, so no math decomposition is inlined.
FUSED_SDPA_CALL = "torch.ops.aten._scaled_dot_product_"


def test_attention_compiles_to_the_fused_kernel_with_matching_gradients():
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    dtype = torch.float16 if ON_CUDA else torch.float32
    tol = {"atol": 2e-3, "rtol": 2e-3} if ON_CUDA else TOL
    leaves = [torch.randn(2, 4, 32, 16, dtype=dtype) for _ in range(3)]
    q, k, v = (t.to(FLAGOS).requires_grad_() for t in leaves)
    out, (code, *_) = run_and_get_code(torch.compile(attend), q, k, v)
    assert FUSED_SDPA_CALL in code and "_math" not in code, code
    q_ref, k_ref, v_ref = (t.to(FLAGOS).requires_grad_() for t in leaves)
    ref = attend(q_ref, k_ref, v_ref)
    assert_on_flagos(out)
    assert_close(out, ref, **tol)
    grad = torch.randn_like(ref)
    out.backward(grad)
    ref.backward(grad)
    for compiled_grad, eager_grad in (
        (q.grad, q_ref.grad),
        (k.grad, k_ref.grad),
        (v.grad, v_ref.grad),
    ):
        assert_on_flagos(compiled_grad)
        assert_close(compiled_grad, eager_grad, **tol)


def test_attention_with_dynamic_shapes_falls_back_to_math_and_matches():
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    compiled = torch.compile(attend, dynamic=True)
    for seq in (16, 24):
        q, k, v = (rand(2, 4, seq, 8) for _ in range(3))
        assert_close(compiled(q, k, v), attend(q, k, v))


def test_training_backward_gradients_match_and_stay_on_flagos():
    cpu, eager, model = _models(Block())
    compiled = torch.compile(model)
    x = rand(2, 8, 32, device="cpu")
    target = rand(2, 8, 32, device="cpu")

    for m, xin, tin in ((cpu, x, target), (eager, x.to(FLAGOS), target.to(FLAGOS))):
        F.mse_loss(m(xin), tin).backward()
    xc = x.to(FLAGOS).requires_grad_()
    loss = F.mse_loss(compiled(xc), target.to(FLAGOS))
    loss.backward()

    assert_on_flagos(loss, xc.grad)
    for (name, p), pe, pc in zip(
        model.named_parameters(), eager.parameters(), cpu.parameters(), strict=True
    ):
        assert p.grad is not None, name
        assert_on_flagos(p.grad)
        assert_close(p.grad, pe.grad, atol=1e-4, rtol=1e-3)
        assert_close(p.grad, pc.grad, atol=1e-4, rtol=1e-3)


def test_checkpointed_dropout_compiles_and_its_gradient_follows_the_mask():
    # Inductor replays the checkpointed dropout's randomness itself (the AOT path without
    # Inductor needs torch's run_and_save_rng_state, which knows no flagos: docs/compile.md).
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = nn.Linear(8, 8).to(FLAGOS)
    x = torch.randn(16, 8, device=FLAGOS)

    def f(t: torch.Tensor) -> torch.Tensor:
        return checkpoint(lambda u: F.dropout(lin(u), 0.5, training=True), t, use_reentrant=False)

    out = torch.compile(f)(x)
    out.sum().backward()
    assert_on_flagos(out, lin.bias.grad)
    kept = (out != 0).float()  # the mask the forward drew; the recomputation must draw it again
    assert 0 < kept.mean().item() < 1
    assert_close(lin.bias.grad, kept.sum(0) * 2)


@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
def test_convolution_net_compiles_and_trains_like_eager(channels_last: bool):
    # Compiled code checks each convolution's result against the strides torch's fake tensors
    # predict for an out-of-tree device (contiguous); a channels-last model used to fail there.
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3, stride=2)
    )  # fmt: skip
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    cpu, eager, model = (m.to(memory_format=fmt) for m in _models(net))
    compiled = torch.compile(model)
    x = rand(2, 3, 10, 10, device="cpu").to(memory_format=fmt)
    outs = []
    for m, xin in ((cpu, x), (eager, x.to(FLAGOS)), (compiled, x.to(FLAGOS))):
        out = m(xin)
        out.square().sum().backward()
        outs.append(out)
    assert_on_flagos(outs[2])
    assert_close(outs[2], outs[1], atol=1e-4, rtol=1e-3)
    assert_close(outs[2], outs[0], atol=1e-4, rtol=1e-3)
    for pc, pe, pm in zip(cpu.parameters(), eager.parameters(), model.parameters(), strict=True):
        assert_on_flagos(pm.grad)
        assert_close(pm.grad, pe.grad, atol=1e-4, rtol=1e-3)
        assert_close(pm.grad, pc.grad, atol=1e-4, rtol=1e-3)


def test_training_loop_follows_eager():
    net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    _, eager, model = _models(net)
    compiled = torch.compile(model)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(4):
        x, y = rand(8, 16), torch.randint(0, 4, (8,)).to(FLAGOS)
        pair = []
        for m, opt in ((eager, opt_e), (compiled, opt_c)):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            pair.append(loss.item())
        losses.append(pair)
    for le, lc in losses:
        assert abs(le - lc) < 1e-4, losses
    for pe, pc in zip(eager.parameters(), model.parameters(), strict=True):
        assert_on_flagos(pc)
        assert_close(pc, pe, atol=1e-5, rtol=1e-4)


def test_compiled_optimizer_step():
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    _, eager, model = _models(net)
    opt_e = torch.optim.Adam(eager.parameters(), lr=1e-2)
    opt_c = torch.optim.Adam(model.parameters(), lr=1e-2)

    @torch.compile
    def compiled_step():
        opt_c.step()

    for _ in range(3):
        x = rand(4, 8)
        for m, opt in ((eager, opt_e), (model, opt_c)):
            opt.zero_grad()
            m(x).square().mean().backward()
        opt_e.step()
        compiled_step()
    for pe, pc in zip(eager.parameters(), model.parameters(), strict=True):
        assert_on_flagos(pc)
        assert_close(pc, pe, atol=1e-5, rtol=1e-4)
        for key in ("exp_avg", "exp_avg_sq"):
            assert_on_flagos(opt_c.state[pc][key])
            assert_close(opt_c.state[pc][key], opt_e.state[pe][key], atol=1e-6, rtol=1e-4)


# ------------------------------------------------------------- dynamic shapes, graph breaks


def test_dynamic_true_compiles_once_for_many_sizes():
    def fn(x):
        return F.layer_norm(x * 2, (x.shape[-1],)).relu().sum(0)

    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(fn, backend=counter, dynamic=True)
    for n in (3, 5, 9, 17):
        x = rand(n, 12)
        out = compiled(x)
        assert_on_flagos(out)
        assert_close(out, fn(x.cpu()), atol=1e-5, rtol=1e-4)
    assert counter.frame_count == 1


def test_mark_dynamic_bounds_recompiles():
    def fn(x, w):
        return torch.tanh(x @ w).mean(dim=1)

    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(fn, backend=counter)
    w = rand(6, 4)
    for n in (4, 7, 10, 31):
        x = rand(n, 6)
        torch._dynamo.mark_dynamic(x, 0)
        out = compiled(x, w)
        assert_on_flagos(out)
        assert out.shape == (n,)
        assert_close(out, fn(x.cpu(), w.cpu()), atol=1e-5, rtol=1e-4)
    assert counter.frame_count == 1


def test_graph_break_in_the_middle():
    def fn(x):
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()
        return torch.cos(y) + y.sum()

    counter = CompileCounterWithBackend("inductor")
    x = rand(5, 7)
    out = torch.compile(fn, backend=counter)(x)
    assert counter.frame_count == 2
    assert_on_flagos(out)
    assert_close(out, fn(x))
    assert_close(out, fn(x.cpu()))


# -------------------------------------------------------------------- AMP, devices, streams


def test_autocast_bfloat16_under_compile():
    net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    _, eager, model = _models(net)
    compiled = torch.compile(model)
    x = rand(4, 16)

    outs, grads = [], []
    for m in (eager, compiled):
        with torch.autocast("flagos", dtype=torch.bfloat16):
            out = m(x)
            loss = out.float().square().mean()
        loss.backward()
        outs.append(out)
        grads.append([p.grad for p in m.parameters()])

    eager_out, compiled_out = outs
    assert compiled_out.dtype == torch.bfloat16 == eager_out.dtype
    assert_on_flagos(compiled_out)
    assert_close(compiled_out.float(), eager_out.float(), atol=2e-2, rtol=2e-2)
    for ge, gc in zip(*grads, strict=True):
        assert gc.dtype == torch.float32
        assert_on_flagos(gc)
        assert_close(gc, ge, atol=2e-2, rtol=5e-2)


def test_outputs_on_flagos_including_views_and_new_tensors():
    def fn(x):
        z = torch.zeros_like(x) + torch.arange(x.shape[-1], device=x.device)
        return x[:, 1:3], x.view(-1), z, torch.ones(3, device=x.device) * x.sum()

    x = rand(4, 6)
    outs = check_against_eager_and_cpu(fn, x)
    assert outs[0].data_ptr() == x[:, 1:3].data_ptr()  # views alias their input


def test_cpp_wrapper_and_aot_inductor_refuse_with_the_reason():
    # Inductor's C++ wrapper names devices through a table of torch's own; without the refusal
    # it failed an assertion ("flagos not found in DEVICE_TO_ATEN") deep in code generation.
    from torch._inductor.exc import InductorError

    model = nn.Linear(8, 4).to(FLAGOS)
    x = rand(2, 8)
    with pytest.raises(InductorError, match="cpp_wrapper=True and AOTInductor"):
        torch.compile(model, options={"cpp_wrapper": True})(x)
    program = torch.export.export(model, (x,))
    with pytest.raises(InductorError, match="do not support flagos tensors"):
        torch._inductor.aoti_compile_and_package(program)
    assert_close(torch.compile(model)(x), model(x))  # the default wrapper still works


@pytest.mark.skipif(ON_CUDA, reason="the cpu accelerator's C++ code generation")
def test_combo_kernels_are_refused_with_the_reason():
    import torch._inductor.config as inductor_config
    from torch._inductor.exc import InductorError

    def fn(x, y):
        return (x * 2).sum(0), (y + 1).relu()

    x, y = rand(8, 8), rand(16)
    with inductor_config.patch(combo_kernels=True):
        with pytest.raises(InductorError, match="combo_kernels=True does not work for flagos"):
            torch.compile(fn)(x, y)
    torch._dynamo.reset()
    check_against_eager_and_cpu(fn, x, y)  # off, as by default: compiles


@pytest.mark.skipif(torch.flagos.device_count() < 2, reason="needs two flagos devices")
def test_second_device_stays_on_its_index():
    def fn(x, y):
        return (x * y).relu() + torch.ones_like(x)

    x, y = rand(9, 5, device="flagos:1"), rand(9, 5, device="flagos:1")
    out = torch.compile(fn)(x, y)
    assert_on_flagos(out, index=1)
    assert_close(out, fn(x.cpu(), y.cpu()))
    assert torch.flagos.current_device() == 0


def test_compiled_code_on_a_non_default_stream():
    def fn(x, w):
        return torch.softmax(x @ w, dim=-1) * 3

    x, w = rand(64, 32), rand(32, 16)
    compiled = torch.compile(fn)
    expected = fn(x.cpu(), w.cpu())
    compiled(x, w)  # compile outside the stream; run inside it
    stream = torch.flagos.Stream()
    stream.wait_stream(torch.flagos.current_stream())
    with torch.flagos.stream(stream):
        assert torch.flagos.current_stream() == stream
        out = compiled(x, w)
    stream.synchronize()
    assert_on_flagos(out)
    assert_close(out, expected, atol=1e-5, rtol=1e-4)


def test_accelerator_synchronize_inside_compiled_code():
    # docs/compile.md says to use torch.accelerator.* inside compiled code; its synchronization
    # has no device of its own, and Inductor wrote it (and freed the kernel's input) before the
    # C++ kernel it still held back, which then read a freed name.
    def fn(x):
        y = x + 1
        torch.accelerator.synchronize()
        return y * 2

    def fn_more(x, w):
        h = torch.relu(x @ w)
        torch.accelerator.synchronize()
        return h.sum(0) + 1, x.mean()

    x, w = rand(6, 4), rand(4, 3)
    assert_close(torch.compile(fn)(x), fn(x.cpu()))
    out = torch.compile(fn_more)(x, w)
    for got, want in zip(out, fn_more(x.cpu(), w.cpu()), strict=True):
        assert_on_flagos(got)
        assert_close(got, want, atol=1e-5, rtol=1e-4)


# -------------------------------------------------------------------------------- FlagTree


def _fake_triton(root: Path, flagtree: bool) -> str:
    """A `triton` package stand-in: stock (no _flagtree_backend) or FlagTree-shaped."""
    pkg = root / "triton"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "3.6.0"\n')
    if flagtree:
        (pkg / "_flagtree_backend.py").write_text('FLAGTREE_BACKEND = "hcu"\n')
    return str(root)


def test_flagtree_required_compile_fails_clearly_without_it(tmp_path):
    # A `triton` that cannot be imported hides whatever Triton this environment has.
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text('raise ImportError("hidden by the test")\n')
    result = run_python(
        """
        import torch, torch_fl
        torch.compile(lambda x: x + 1)(torch.ones(2, device="flagos"))
        """,
        extra_path=[str(tmp_path)],
        FLAGOS_USE_FLAGTREE="1",
    )
    assert result.returncode != 0
    message = result.stderr
    assert "FlagTreeNotActiveError" in message, message[-3000:]
    assert "no importable triton" in message
    assert "FlagTree" in message and FLAGTREE_PIP in message and FLAGTREE_INDEX in message


def test_flagtree_required_with_the_installed_triton():
    """Where this environment's own triton is stock (the H200's 3.6.0), compiling refuses."""
    result = run_python(
        """
        import importlib.util, sys
        if importlib.util.find_spec("triton") is None:
            sys.exit(print("NO_TRITON"))
        import torch, torch_fl
        from torch_fl.compile._runtime import flagtree_backend
        if flagtree_backend() is not None:
            sys.exit(print("FLAGTREE"))
        torch.compile(lambda x: x + 1)(torch.ones(2, device="flagos"))
        """,
        FLAGOS_USE_FLAGTREE="1",
    )
    if result.stdout.strip() in ("NO_TRITON", "FLAGTREE"):
        pytest.skip(f"the installed triton: {result.stdout.strip()}")
    assert result.returncode != 0
    assert "not a FlagTree build" in result.stderr, result.stderr[-3000:]
    assert FLAGTREE_PIP in result.stderr and FLAGTREE_INDEX in result.stderr


def test_flagtree_check_rejects_stock_triton_and_accepts_flagtree(tmp_path):
    code = """
        import torch
        from torch_fl.compile import FlagTreeNotActiveError, check_flagtree
        try:
            print(check_flagtree())
        except FlagTreeNotActiveError as exc:
            print("REJECTED", exc)
        """
    stock = run_python(code, [_fake_triton(tmp_path / "stock", False)], FLAGOS_USE_FLAGTREE="1")
    assert stock.returncode == 0, stock.stderr[-3000:]
    assert stock.stdout.startswith("REJECTED"), stock.stdout
    assert "triton 3.6.0" in stock.stdout and "not a FlagTree build" in stock.stdout
    assert "pip uninstall -y triton" in stock.stdout and FLAGTREE_PIP in stock.stdout
    assert FLAGTREE_INDEX in stock.stdout

    flagtree = run_python(code, [_fake_triton(tmp_path / "ft", True)], FLAGOS_USE_FLAGTREE="1")
    assert flagtree.returncode == 0, flagtree.stderr[-3000:]
    assert flagtree.stdout.strip() == "hcu"

    unset = run_python(code, [_fake_triton(tmp_path / "off", False)], FLAGOS_USE_FLAGTREE="0")
    assert unset.returncode == 0, unset.stderr[-3000:]
    assert unset.stdout.strip() == "None"


# ------------------------------------------------------------------------------ GPU only


@pytest.mark.gpu
@pytest.mark.skipif(not ON_CUDA, reason="Triton code generation runs on the cuda accelerator")
def test_gpu_triton_kernels_launch_on_the_current_flagos_stream():
    from torch_fl.compile._runtime import get_raw_stream

    def fn(x):
        return (x.sin() * 2 + x.cos()).sum(dim=-1)

    x = rand(512, 1024)
    compiled = torch.compile(fn)
    out, (code, *_) = run_and_get_code(compiled, x)
    assert "triton_heuristics" in code and "type='cuda'" in code and "type='flagos'" not in code
    assert "from torch_fl.compile._runtime import get_raw_stream" in code
    assert_close(out, fn(x), atol=1e-3, rtol=1e-4)

    stream = torch.flagos.Stream()
    stream.wait_stream(torch.flagos.current_stream())
    with torch.flagos.stream(stream):
        # The raw stream the generated code launches on is this flagos stream's CUDA stream.
        assert get_raw_stream(0) == torch.cuda.current_stream(0).cuda_stream
        assert get_raw_stream(0) != torch.cuda.default_stream(0).cuda_stream
        assert torch.cuda.current_stream(0).stream_id == stream.stream_id
        out = compiled(x)
    stream.synchronize()
    assert_on_flagos(out)
    assert_close(out, fn(x.cpu()), atol=1e-3, rtol=1e-4)
