"""scaled_dot_product_attention on flagos takes the fused kernel the native device would pick
(not the unfused math path) and matches the CPU result, forward and backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_fl

ACCELERATOR = torch_fl.build_config.ACCELERATOR
# The fused operators each accelerator reaches for inputs the native device can fuse.
# (On cuda, flash runs inside flagos' own overrideable kernel, which the router does not see.)
FUSED_OPS = {
    "cpu": {"aten::_scaled_dot_product_flash_attention_for_cpu"},
    "cuda": {
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
    },
}


def _attention(device, q, k, v, mask, causal, dropout=0.0):
    leaves = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
    m = None if mask is None else mask.to(device)
    out = F.scaled_dot_product_attention(*leaves, attn_mask=m, is_causal=causal, dropout_p=dropout)
    grad = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out.dtype).to(device)
    out.backward(grad)
    return out, [t.grad for t in leaves]


def _fused_ops_run() -> set[str]:
    routed = {op for op, routes in torch_fl.routing.stats().items() if any(routes.values())}
    return routed & FUSED_OPS.get(ACCELERATOR, set())


CASES = [
    pytest.param(torch.float32, None, True, id="fp32-causal"),
    pytest.param(torch.float32, "bool", False, id="fp32-bool-mask"),
    pytest.param(torch.float32, "float", False, id="fp32-additive-mask"),
    pytest.param(torch.bfloat16, None, True, id="bf16-causal"),
]


@pytest.mark.parametrize(("dtype", "mask_kind", "causal"), CASES)
def test_sdpa_matches_cpu_and_runs_fused(dtype, mask_kind, causal) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 24, 32, dtype=dtype) for _ in range(3))
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(24, 24) > 0.3
    elif mask_kind == "float":
        mask = torch.randn(24, 24, dtype=dtype)
    ref_out, ref_grads = _attention("cpu", q, k, v, mask, causal)
    torch_fl.routing.reset_stats()
    out, grads = _attention("flagos", q, k, v, mask, causal)
    assert out.device.type == "flagos" and all(g.device.type == "flagos" for g in grads)
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype != torch.float32 else {"rtol": 1e-4, "atol": 1e-4}
    torch.testing.assert_close(out.cpu(), ref_out, **tol)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g.cpu(), r, **tol)
    stats = torch_fl.routing.stats()
    # The unfused math path would run bmm and softmax; the fused one runs none of them.
    assert "aten::bmm" not in stats and "aten::_softmax" not in stats, sorted(stats)
    if ACCELERATOR == "cpu":
        assert _fused_ops_run(), sorted(stats)


@pytest.mark.gpu
@pytest.mark.skipif(ACCELERATOR != "cuda", reason="needs the cuda accelerator build")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_sdpa_reaches_flash_through_overrideable(dtype) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 8, 128, 64, dtype=dtype) for _ in range(3))
    ref_out, ref_grads = _attention("cpu", q.float(), k.float(), v.float(), None, True)
    torch_fl.routing.reset_stats()
    out, grads = _attention("flagos", q, k, v, None, True)
    torch.testing.assert_close(out.float().cpu(), ref_out, rtol=2e-2, atol=2e-2)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g.float().cpu(), r, rtol=3e-2, atol=3e-2)
    assert "aten::bmm" not in torch_fl.routing.stats()


@pytest.mark.gpu
@pytest.mark.skipif(ACCELERATOR != "cuda", reason="needs the cuda accelerator build")
def test_fused_dropout_is_reproducible_with_the_seed() -> None:
    q, k, v = (torch.randn(2, 4, 64, 64, dtype=torch.float16) for _ in range(3))
    runs = []
    for _ in range(2):
        torch.flagos.manual_seed(5)
        out, grads = _attention("flagos", q, k, v, None, False, dropout=0.3)
        runs.append([out.cpu(), *(g.cpu() for g in grads)])
    for a, b in zip(*runs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # Dropout really dropped something: the output differs from the no-dropout one.
    plain, _ = _attention("flagos", q, k, v, None, False)
    assert not torch.allclose(runs[0][0], plain.cpu())


@pytest.mark.gpu
@pytest.mark.skipif(ACCELERATOR != "cuda", reason="needs the cuda accelerator build")
def test_overrideable_attention_keeps_the_philox_state_where_the_kernel_put_it() -> None:
    # The flash kernel returns its philox seed and offset on the device or on the host (its
    # choice, by torch version); re-labelling a host tensor as flagos would hand the backward
    # a host pointer as device memory.
    q, k, v = (torch.randn(1, 2, 32, 64, dtype=torch.float16) for _ in range(3))
    flagos = [t.to("flagos") for t in (q, k, v)]
    native = torch.ops.aten._scaled_dot_product_flash_attention(*(t.cuda() for t in (q, k, v)), 0.2)
    got = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(*flagos, None, 0.2)
    for n, g in zip(native[6:8], got[6:8], strict=True):
        assert g.device.type == ("flagos" if n.device.type == "cuda" else n.device.type)

    # The backward, given this forward's state, matches the native flash backward given the
    # same tensors (zero-copy cuda views of them).
    def as_cuda(t: torch.Tensor) -> torch.Tensor:
        return torch_fl._C._flagos_to_cuda_view(t) if t.device.type == "flagos" else t

    grad_out = torch.randn_like(q).to("flagos")
    state = got[:6]
    ref_grads = torch.ops.aten._scaled_dot_product_flash_attention_backward(
        *(as_cuda(t) for t in (grad_out, *flagos)),
        *(as_cuda(t) if isinstance(t, torch.Tensor) else t for t in state),
        0.2,
        False,
        *(as_cuda(t) for t in got[6:8]),
    )
    got_grads = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad_out,
        *flagos,
        torch.empty(0, device="flagos"),  # no bias: flash takes none
        [True, True, True, False],
        *state,
        0.2,
        False,
        *got[6:8],
    )
    # (the backward may accumulate with atomics: equal up to the order of additions)
    for g, r in zip(got_grads[:3], ref_grads, strict=True):
        assert g.device.type == "flagos"
        torch.testing.assert_close(g.cpu(), r.cpu(), rtol=1e-3, atol=1e-3)
    # Dropout was applied: the output differs from attention without it.
    plain = F.scaled_dot_product_attention(*flagos)
    assert not torch.allclose(got[0].cpu(), plain.cpu())


def test_head_dim_needing_padding_still_matches() -> None:
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 16, 20) for _ in range(3))
    ref_out, ref_grads = _attention("cpu", q, k, v, None, True)
    out, grads = _attention("flagos", q, k, v, None, True)
    torch.testing.assert_close(out.cpu(), ref_out, rtol=1e-4, atol=1e-4)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g.cpu(), r, rtol=1e-4, atol=1e-4)


def test_a_mask_that_needs_a_gradient_gets_one() -> None:
    # The fused-kernel choice sees requires_grad as the native device would: CPU's flash kernel
    # cannot differentiate the mask, so a mask that needs a gradient must steer SDPA elsewhere.
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 8, 16, generator=g) for _ in range(3))
    mask = torch.randn(2, 2, 8, 8, generator=g)
    grads = {}
    for device in ("cpu", "flagos"):
        leaves = [t.detach().to(device).requires_grad_() for t in (q, k, v, mask)]
        out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=leaves[3])
        out.square().sum().backward()
        grads[device] = [t.grad for t in leaves]
    for want, have in zip(grads["cpu"], grads["flagos"], strict=True):
        assert have.device.type == "flagos"
        torch.testing.assert_close(have.cpu(), want, atol=2e-4, rtol=2e-4)
