"""Custom operators on flagos: the recipe of docs/custom-ops.md, runnable.

    python examples/custom_ops.py

Two operators of a library `fl_example`:

* `scaled_silu(x, scale)`: functional, with a fake kernel (for torch.compile and meta
  tensors), a backward, and an autocast rule for the flagos device type;
* `add_relu_(x, other)`: writes `x` in place, declared in `mutates_args`;

and on a GPU build with Triton, `triton_scale(x, scale)`: a Triton kernel as a
`torch.library.triton_op`. Each kernel runs on native views of the flagos tensors
(`torch_fl.native_view`: CUDA tensors on the cuda accelerator, CPU tensors on the cpu one), so
it can be any vendor or Triton kernel; outputs are allocated on flagos first, so their memory
is flagos memory, counted by torch.flagos.memory_allocated().
"""

from __future__ import annotations

import torch
from torch import Tensor

import torch_fl

LIB = "fl_example"


@torch.library.custom_op(f"{LIB}::scaled_silu", mutates_args=(), device_types="flagos")
def scaled_silu(x: Tensor, scale: float) -> Tensor:
    out = torch.empty_like(x)  # flagos memory
    native_out = torch_fl.native_view(out)
    torch.mul(torch.nn.functional.silu(torch_fl.native_view(x)), scale, out=native_out)
    return out


@scaled_silu.register_fake
def _(x: Tensor, scale: float) -> Tensor:
    return torch.empty_like(x)


def _setup(ctx, inputs: tuple, output: Tensor) -> None:
    x, scale = inputs
    ctx.save_for_backward(x)
    ctx.scale = scale


def _backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
    (x,) = ctx.saved_tensors
    s = torch.sigmoid(x)  # flagos operators: autograd of the backward works too
    return grad * ctx.scale * s * (1 + x * (1 - s)), None


scaled_silu.register_autograd(_backward, setup_context=_setup)
try:
    scaled_silu.register_autocast("flagos", torch.float16)  # runs in float16 under autocast
    AUTOCAST_REGISTERED = True
except ValueError:  # torch 2.11's register_autocast knows only "cuda" and "cpu"
    AUTOCAST_REGISTERED = False


@torch.library.custom_op(f"{LIB}::add_relu_", mutates_args=("x",), device_types="flagos")
def add_relu_(x: Tensor, other: Tensor) -> None:
    native = torch_fl.native_view(x)
    native.add_(torch_fl.native_view(other)).relu_()


def triton_scale(x: Tensor, scale: float) -> Tensor:
    """x * scale by a Triton kernel (GPU builds with Triton only)."""
    return _triton_ops()["scale"](x, scale)


_TRITON: dict = {}


def _triton_ops() -> dict:
    if _TRITON:
        return _TRITON
    import triton
    import triton.language as tl
    from torch.library import triton_op, wrap_triton

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, scale, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale, mask=mask)

    @triton_op(f"{LIB}::triton_scale", mutates_args=())
    def scale(x: Tensor, scale: float) -> Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        native_x, native_out = torch_fl.native_view(x), torch_fl.native_view(out)
        wrap_triton(scale_kernel)[(triton.cdiv(n, 1024),)](
            native_x, native_out, scale, n, BLOCK=1024
        )
        return out

    _TRITON["scale"] = scale
    return _TRITON


def main() -> None:
    x = torch.randn(64, 32, device="flagos", requires_grad=True)
    y = scaled_silu(x, 2.0)
    y.sum().backward()
    reference = x.detach().cpu().requires_grad_()
    (torch.nn.functional.silu(reference) * 2.0).sum().backward()
    torch.testing.assert_close(y.detach().cpu(), torch.nn.functional.silu(reference.detach()) * 2)
    torch.testing.assert_close(x.grad.cpu(), reference.grad)
    print("scaled_silu: forward and backward match CPU")

    if AUTOCAST_REGISTERED:
        with torch.autocast("flagos", dtype=torch.float16):
            assert scaled_silu(x, 2.0).dtype == torch.float16
        print("scaled_silu: float16 under torch.autocast('flagos')")

    compiled = torch.compile(lambda t: scaled_silu(t, 3.0) + 1, fullgraph=True)
    t = torch.randn(16, device="flagos")
    torch.testing.assert_close(compiled(t).cpu(), torch.nn.functional.silu(t.cpu()) * 3 + 1)
    print("scaled_silu: torch.compile(fullgraph=True) matches")

    a, b = torch.randn(8, device="flagos"), torch.randn(8, device="flagos")
    expected, version = (a.cpu() + b.cpu()).relu(), a._version
    add_relu_(a, b)
    torch.testing.assert_close(a.cpu(), expected)
    assert a._version > version
    print("add_relu_: in place, version counter bumped")

    if torch_fl.build_config.ACCELERATOR != "cpu":
        z = torch.randn(5000, device="flagos")
        torch.testing.assert_close(triton_scale(z, 0.5).cpu(), z.cpu() * 0.5)
        print("triton_scale: Triton kernel on flagos tensors matches")


if __name__ == "__main__":
    main()
