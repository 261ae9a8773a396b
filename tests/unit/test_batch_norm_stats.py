"""nn.SyncBatchNorm's statistics kernels on flagos (batch_norm_stats, ..._gather_stats_with_counts,
..._elemt, ..._backward_reduce, ..._backward_elemt) against the batch norm they make up, computed
on CPU. Only CUDA has kernels for them; flagos computes them itself where there is no native
device kernel to route to (csrc/aten/native/sync_batch_norm.cpp). Two ranks' worth of them runs
in tests/manual/test_flagos_dist_live.py (SyncBatchNorm against BatchNorm2d)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

EPS = 1e-5


def _batch(dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(6, 3, 4, 5, generator=g) * 3 + 1).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_stats_are_the_per_channel_mean_and_inverse_std(dtype: torch.dtype) -> None:
    x = _batch(dtype)
    mean, invstd = torch.batch_norm_stats(x.to("flagos"), EPS)
    reference = x.double()
    assert mean.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    # float32 statistics of float32/bfloat16 input: float32's tolerance (CUDA's Welford and the
    # cpu accelerator's two-pass sums round differently).
    tolerance = {} if dtype == torch.float64 else {"rtol": 1.3e-6, "atol": 1e-5}
    torch.testing.assert_close(mean.cpu().double(), reference.mean((0, 2, 3)), **tolerance)
    want = (reference.var((0, 2, 3), unbiased=False) + EPS).rsqrt()
    torch.testing.assert_close(invstd.cpu().double(), want, rtol=1e-4, atol=1e-5)


def test_gathered_stats_of_two_ranks_equal_the_whole_batchs() -> None:
    x = _batch()
    parts = [x[:2], x[2:]]  # uneven ranks: 2 and 4 samples
    stats = [torch.batch_norm_stats(p.to("flagos"), EPS) for p in parts]
    means = torch.stack([m for m, _ in stats])
    invstds = torch.stack([s for _, s in stats])
    counts = torch.tensor([p[:, 0].numel() for p in parts], dtype=torch.float32)
    running_mean = torch.full((3,), 0.5, device="flagos")
    running_var = torch.full((3,), 2.0, device="flagos")
    mean, invstd = torch.batch_norm_gather_stats_with_counts(
        x.to("flagos"), means, invstds, running_mean, running_var, 0.1, EPS, counts.to("flagos")
    )
    torch.testing.assert_close(mean.cpu(), x.mean((0, 2, 3)), rtol=1e-5, atol=1e-5)
    want_invstd = (x.var((0, 2, 3), unbiased=False) + EPS).rsqrt()
    torch.testing.assert_close(invstd.cpu(), want_invstd, rtol=1e-4, atol=1e-5)
    # BatchNorm's running update: unbiased variance, momentum 0.1.
    torch.testing.assert_close(running_mean.cpu(), 0.9 * 0.5 + 0.1 * x.mean((0, 2, 3)))
    want_var = 0.9 * 2.0 + 0.1 * x.var((0, 2, 3), unbiased=True)
    torch.testing.assert_close(running_var.cpu(), want_var, rtol=1e-4, atol=1e-5)


def test_normalisation_and_its_gradients_match_batch_norm() -> None:
    x = _batch().double()
    weight = torch.tensor([0.5, 1.5, -1.0], dtype=torch.float64)
    bias = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
    grad_out = _batch(seed=1).double()
    leaf = x.clone().requires_grad_()
    w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    want = F.batch_norm(leaf, None, None, w, b, training=True, eps=EPS)
    want.backward(grad_out)

    xf, wf, bf, gf = (t.to("flagos") for t in (x, weight, bias, grad_out))
    mean, invstd = torch.batch_norm_stats(xf, EPS)
    out = torch.batch_norm_elemt(xf, wf, bf, mean, invstd, EPS)
    torch.testing.assert_close(out.cpu(), want.detach())
    sum_dy, sum_dy_xmu, grad_w, grad_b = torch.batch_norm_backward_reduce(
        gf, xf, mean, invstd, wf, True, True, True
    )
    torch.testing.assert_close(grad_w.cpu(), w.grad)
    torch.testing.assert_close(grad_b.cpu(), b.grad)
    count = torch.tensor([x[:, 0].numel()], dtype=torch.int32, device="flagos")
    grad_in = torch.batch_norm_backward_elemt(gf, xf, mean, invstd, wf, sum_dy, sum_dy_xmu, count)
    torch.testing.assert_close(grad_in.cpu(), leaf.grad)


def test_backward_reduce_returns_only_what_is_asked() -> None:
    x = _batch().to("flagos")
    mean, invstd = torch.batch_norm_stats(x, EPS)
    weight = torch.ones(3, device="flagos")  # CUDA's kernel takes grad_bias's options from it
    sum_dy, sum_dy_xmu, grad_w, grad_b = torch.batch_norm_backward_reduce(
        x, x, mean, invstd, weight, False, False, True
    )
    assert sum_dy is None and sum_dy_xmu is None and grad_w is None  # undefined, as on CUDA
    torch.testing.assert_close(grad_b.cpu(), x.cpu().sum((0, 2, 3)))
