"""The `flagos` c10d backend on a real GPU (marker `gpu`; the H200): the NCCL tier and the
host-staged gloo tier order their work after what was queued on the current flagos stream, and
DDP trains a flagos module at world size 1. Multi-GPU runs: tests/manual/test_flagos_dist_live.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import torch_fl
from torch_fl import comm

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        torch_fl.build_config.ACCELERATOR != "cuda", reason="needs the cuda accelerator build"
    ),
]


@pytest.fixture(params=["nccl", "gloo"])
def tier(request, monkeypatch):
    monkeypatch.delenv(comm.ENV_HOST_STAGED, raising=False)
    monkeypatch.setenv(comm.ENV_TIER, request.param)
    dist.init_process_group("flagos", store=dist.HashStore(), rank=0, world_size=1)
    try:
        info = comm.tier_info()
        assert info.tier == request.param
        assert info.path == ("zero_copy" if request.param == "nccl" else "host_staged")
        yield request.param
    finally:
        dist.destroy_process_group()


def test_collective_waits_for_work_queued_on_the_current_stream(tier) -> None:
    n = 1 << 24
    src = torch.zeros(n, device="flagos")
    out = torch.zeros(n, device="flagos")
    torch.flagos.synchronize()
    side = torch.flagos.Stream()
    with torch.flagos.stream(side):
        torch.cuda._sleep(50_000_000)  # keeps the (shared) stream busy before the fill
        src.fill_(2.0)
        work = dist.all_gather_into_tensor(out, src, async_op=True)
        work.wait()
        result = out.sum()  # on the side stream, after wait()
    torch.flagos.synchronize()
    assert result.item() == 2.0 * n


def test_future_orders_the_consumer_stream(tier) -> None:
    t = torch.zeros(1 << 22, device="flagos")
    side = torch.flagos.Stream()
    with torch.flagos.stream(side):
        torch.cuda._sleep(50_000_000)
        t.fill_(3.0)
        fut = dist.all_reduce(t, async_op=True).get_future()
        (value,) = fut.wait()
        total = value.sum()
    torch.flagos.synchronize()
    assert value.device.type == "flagos"
    assert total.item() == 3.0 * t.numel()


def test_premul_sum_with_a_flagos_factor(tier) -> None:
    t = torch.full((1024,), 4.0, device="flagos")
    factor = torch.tensor(0.25, device="flagos")
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
    torch.testing.assert_close(t.cpu(), torch.full((1024,), 1.0))


def test_ddp_trains_a_flagos_module_like_plain_training(tier) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))

    data = [(torch.randn(16, 32), torch.randn(16, 8)) for _ in range(4)]
    reference = model()
    opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        opt.step()
    ddp = DDP(model().to("flagos"), bucket_cap_mb=0.001)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x.to("flagos")), y.to("flagos")).backward()
        opt.step()
    for p, q in zip(ddp.module.parameters(), reference.parameters(), strict=True):
        assert p.device.type == "flagos"
        torch.testing.assert_close(p.cpu(), q, atol=1e-4, rtol=1e-4)


def test_dtensor_random_ops_use_the_philox_state(tier) -> None:
    """DTensor's random ops move the (seed, offset) of the flagos generator, which on the cuda
    accelerator is CUDA's Philox state: a sharded dropout draws what dropout of the whole tensor
    draws from the same offset, and the generator ends past the whole tensor."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("flagos", (1,))
    torch.manual_seed(3)
    state = torch.flagos.get_rng_state()
    assert state.numel() == 16  # seed and offset, as DTensor reads them
    ones = torch.ones(64, 32, device="flagos")
    sharded = torch.nn.functional.dropout(distribute_tensor(ones, mesh, [Shard(0)]), 0.5)
    after = torch.flagos.get_rng_state()
    torch.flagos.set_rng_state(state)
    plain = torch.nn.functional.dropout(ones, 0.5)
    assert torch.equal(sharded.to_local().cpu(), plain.cpu())
    offset = lambda s: int(s[8:].view(torch.int64).item())  # noqa: E731
    assert offset(after) >= offset(state) + ones.numel() // 4
