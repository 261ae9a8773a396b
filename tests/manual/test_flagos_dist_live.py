"""Live multi-process check of the `flagos` c10d backend.

    python tests/manual/test_flagos_dist_live.py --world-size 2

starts one process per rank (rank r on flagos:r, rendezvous through a FileStore in a temporary
directory), runs every collective the backend implements, a DistributedDataParallel training
loop, nn.SyncBatchNorm, an FSDP2 (fully_shard) training loop, an HSDP one over a two-dimensional
DeviceMesh (whose groups torch splits off the default group; split_group too), a tensor-parallel
(DTensor) one and a distributed checkpoint of an FSDP2 model, and checks each result against a
reference computed in the same process without torch.distributed (every rank's input is a
function of its rank). On the cpu accelerator the ranks run on virtual devices
(FLAGOS_CPU_DEVICE_COUNT); on a GPU machine each rank takes one GPU.

Options: --scenario mesh runs only the split groups and HSDP (use --world-size 4 for a 2 x 2
mesh), --tier flagcx|nccl|gloo requests a tier (default: the first usable one),
--host-staged forces host staging on the gloo tier, --timeout bounds every collective.
pytest collects the same run as test_live (skipped with fewer devices than ranks).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------
# Worker side: one process per rank.
# --------------------------------------------------------------------------------------------


def _rank_input(r: int, shape=(4, 6), dtype=None, device="cpu"):
    import torch

    n = 1
    for s in shape:
        n *= s
    t = (torch.arange(n, dtype=torch.float64) % 7 + 1 + r).reshape(shape)
    return t.to(dtype or torch.float32).to(device)


def _check(name: str, got, want, done: list[str], atol: float = 1e-5) -> None:
    import torch

    got_cpu = got.detach().to("cpu")
    want_cpu = want.detach().to("cpu")
    if got_cpu.dtype != want_cpu.dtype or got_cpu.shape != want_cpu.shape:
        raise AssertionError(
            f"{name}: got {got_cpu.dtype}{tuple(got_cpu.shape)}, "
            f"want {want_cpu.dtype}{tuple(want_cpu.shape)}"
        )
    if not torch.allclose(got_cpu.double(), want_cpu.double(), atol=atol, rtol=1e-5):
        raise AssertionError(f"{name}: got\n{got_cpu}\nwant\n{want_cpu}")
    done.append(name)


def _wait_until_close(t, want, seconds: float = 10.0) -> None:
    import time

    import torch

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not torch.allclose(t.cpu().float(), want.float()):
        time.sleep(0.01)


def run_collectives(rank: int, world: int, device) -> list[str]:
    import torch
    import torch.distributed as dist

    done: list[str] = []
    inputs = [_rank_input(r) for r in range(world)]
    stacked = torch.stack(inputs)

    # all_reduce, every reduce op
    float_ops = {
        "SUM": stacked.sum(0),
        "AVG": stacked.mean(0),
        "PRODUCT": stacked.prod(0),
        "MIN": stacked.min(0).values,
        "MAX": stacked.max(0).values,
    }
    for name, want in float_ops.items():
        t = inputs[rank].to(device)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
        _check(f"all_reduce {name}", t, want, done)
    ints = [torch.tensor([0b1100, 0b1010, 7 + r], dtype=torch.int32) for r in range(world)]
    for name, fold in {
        "BAND": lambda a, b: a & b,
        "BOR": lambda a, b: a | b,
        "BXOR": lambda a, b: a ^ b,
    }.items():
        want = ints[0]
        for x in ints[1:]:
            want = fold(want, x)
        t = ints[rank].to(device)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
        _check(f"all_reduce {name}", t, want, done)
    t = inputs[rank].to(device)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    _check("all_reduce PREMUL_SUM", t, stacked.sum(0) * 0.5, done)

    # async handles: wait(), get_future(), then()
    t = inputs[rank].to(device)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    _check("all_reduce async wait", t, stacked.sum(0), done)
    # a work never waited on (its handle dropped, the ranks synchronised by a barrier): the
    # result still lands, as a gloo or NCCL work's does, emulated reduce ops and host-staged
    # copies included (they finish when the collective completes; polled a little, since that
    # happens on the backend's thread)
    for name, want in (("SUM", stacked.sum(0)), ("AVG", stacked.mean(0))):
        t = inputs[rank].to(device)
        dist.all_reduce(t, op=getattr(dist.ReduceOp, name), async_op=True)
        dist.barrier()
        _wait_until_close(t, want)
        _check(f"all_reduce {name} never waited on", t, want, done)
    t = torch.full((4, 6), float(rank), device=device)
    dist.broadcast(t, src=world - 1, async_op=True)
    dist.barrier()
    _wait_until_close(t, torch.full((4, 6), float(world - 1)))
    _check("broadcast never waited on", t, torch.full((4, 6), float(world - 1)), done)
    t = inputs[rank].to(device)
    fut = dist.all_reduce(t, async_op=True).get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    value = chained.wait()
    if value.device != t.device:
        raise AssertionError(f"future value on {value.device}, expected {t.device}")
    _check("all_reduce future then", value, stacked.sum(0) * 2, done)

    # on a side stream: the collective orders after the work queued on it
    side = torch.flagos.Stream(device=device)
    with torch.flagos.stream(side):
        t = inputs[rank].to(device) * 1
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        out = t + 0
    torch.flagos.synchronize(device)
    _check("all_reduce on a side stream", out, stacked.sum(0), done)

    # broadcast from the last rank
    src = world - 1
    t = inputs[rank].to(device)
    dist.broadcast(t, src=src)
    _check("broadcast", t, inputs[src], done)

    # all_gather (list) and all_gather_into_tensor
    outs = [torch.empty_like(inputs[0], device=device) for _ in range(world)]
    dist.all_gather(outs, inputs[rank].to(device))
    for r in range(world):
        _check(f"all_gather[{r}]", outs[r], inputs[r], done)
    out = torch.empty((world * 4, 6), device=device)
    dist.all_gather_into_tensor(out, inputs[rank].to(device))
    _check("all_gather_into_tensor", out, torch.cat(inputs), done)

    # reduce_scatter_tensor: SUM and AVG
    big = [_rank_input(r, shape=(world * 2, 5)) for r in range(world)]
    for op, fold in (("SUM", lambda s: s.sum(0)), ("AVG", lambda s: s.mean(0))):
        out = torch.empty((2, 5), device=device)
        dist.reduce_scatter_tensor(out, big[rank].to(device), op=getattr(dist.ReduceOp, op))
        want = fold(torch.stack(big))[rank * 2 : rank * 2 + 2]
        _check(f"reduce_scatter_tensor {op}", out, want, done)
    # list reduce_scatter
    out = torch.empty((2, 5), device=device)
    dist.reduce_scatter(out, list(big[rank].to(device).chunk(world)))
    _check("reduce_scatter", out, torch.stack(big).sum(0)[rank * 2 : rank * 2 + 2], done)

    # all_to_all_single: equal and uneven splits
    rows = [
        torch.arange(world * 3, dtype=torch.float32).reshape(world, 3) + 100 * r
        for r in range(world)
    ]
    out = torch.empty((world, 3), device=device)
    dist.all_to_all_single(out, rows[rank].to(device))
    _check("all_to_all_single", out, torch.stack([rows[r][rank] for r in range(world)]), done)

    # rank r sends r+1+j rows to rank j (uneven)
    def send_rows(r, j):
        return r + 1 + j

    def block(r):
        n = sum(send_rows(r, j) for j in range(world))
        return torch.arange(n, dtype=torch.float32) + 1000 * r

    in_splits = [send_rows(rank, j) for j in range(world)]
    out_splits = [send_rows(r, rank) for r in range(world)]
    out = torch.empty(sum(out_splits), device=device)
    dist.all_to_all_single(out, block(rank).to(device), out_splits, in_splits)
    pieces = []
    for r in range(world):
        start = sum(send_rows(r, j) for j in range(rank))
        pieces.append(block(r)[start : start + send_rows(r, rank)])
    _check("all_to_all_single uneven", out, torch.cat(pieces), done)

    # reduce, gather, scatter (root = 0)
    t = inputs[rank].to(device)
    dist.reduce(t, dst=0)
    if rank == 0:
        _check("reduce", t, stacked.sum(0), done)
    gathered = (
        [torch.empty_like(inputs[0], device=device) for _ in range(world)] if rank == 0 else None
    )
    dist.gather(inputs[rank].to(device), gathered, dst=0)
    if rank == 0:
        for r in range(world):
            _check(f"gather[{r}]", gathered[r], inputs[r], done)
    out = torch.empty_like(inputs[0], device=device)
    dist.scatter(out, [x.to(device) for x in inputs] if rank == 0 else None, src=0)
    _check("scatter", out, inputs[rank], done)

    # send / recv around a ring
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = torch.empty_like(inputs[0], device=device)
    reqs = [dist.isend(inputs[rank].to(device), nxt), dist.irecv(got, prv)]
    for req in reqs:
        req.wait()
    _check("send/recv", got, inputs[prv], done)
    got = torch.empty_like(inputs[0], device=device)
    ops = [dist.P2POp(dist.isend, inputs[rank].to(device), nxt), dist.P2POp(dist.irecv, got, prv)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    _check("batch_isend_irecv", got, inputs[prv], done)

    # coalesced variants
    a, b = inputs[rank].to(device), (inputs[rank] * 2).to(device)
    with dist._coalescing_manager(device=device, async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    _check("coalesced all_reduce[0]", a, stacked.sum(0), done)
    _check("coalesced all_reduce[1]", b, stacked.sum(0) * 2, done)
    outs = [torch.empty((world * 4, 6), device=device) for _ in range(2)]
    with dist._coalescing_manager(device=device, async_ops=True) as cm:
        dist.all_gather_into_tensor(outs[0], inputs[rank].to(device))
        dist.all_gather_into_tensor(outs[1], (inputs[rank] + 1).to(device))
    cm.wait()
    _check("coalesced all_gather_into_tensor[0]", outs[0], torch.cat(inputs), done)
    _check("coalesced all_gather_into_tensor[1]", outs[1], torch.cat(inputs) + 1, done)
    outs = [torch.empty((2, 5), device=device) for _ in range(2)]
    with dist._coalescing_manager(device=device, async_ops=True) as cm:
        dist.reduce_scatter_tensor(outs[0], big[rank].to(device))
        dist.reduce_scatter_tensor(outs[1], (big[rank] * 3).to(device))
    cm.wait()
    want = torch.stack(big).sum(0)[rank * 2 : rank * 2 + 2]
    _check("coalesced reduce_scatter_tensor[0]", outs[0], want, done)
    _check("coalesced reduce_scatter_tensor[1]", outs[1], want * 3, done)
    tensors = [inputs[rank].to(device), (inputs[rank] * 3).to(device)]
    dist.all_reduce_coalesced(tensors)
    _check("all_reduce_coalesced[0]", tensors[0], stacked.sum(0), done)
    _check("all_reduce_coalesced[1]", tensors[1], stacked.sum(0) * 3, done)

    # half precision travels unchanged
    t = inputs[rank].to(device=device, dtype=torch.bfloat16)
    dist.all_reduce(t)
    _check("all_reduce bfloat16", t, stacked.sum(0).to(torch.bfloat16), done, atol=0.5)

    # a subgroup gets its own ProcessGroupFlagOS
    sub = dist.new_group(list(range(world)))
    t = inputs[rank].to(device)
    dist.all_reduce(t, group=sub)
    _check("all_reduce on a new_group", t, stacked.sum(0), done)

    dist.barrier()
    done.append("barrier")
    return done


def _model(seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32),
        torch.nn.ReLU(),
        torch.nn.Linear(32, 32),
        torch.nn.ReLU(),
        torch.nn.Linear(32, 4),
    )


def run_ddp(rank: int, world: int, device, steps: int = 5) -> list[str]:
    """DDP on flagos against full-batch training in one process (no torch.distributed)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    gen = torch.Generator().manual_seed(1234)
    batch = 8 * world
    data = [
        (torch.randn(batch, 16, generator=gen), torch.randn(batch, 4, generator=gen))
        for _ in range(steps)
    ]

    reference = _model(7)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for x, y in data:
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()

    # Tiny buckets: several allreduce buckets per step, as in a real model.
    model = DDP(_model(7).to(device), device_ids=None, bucket_cap_mb=0.001)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    shard = slice(rank * 8, (rank + 1) * 8)
    for x, y in data:
        opt.zero_grad()
        out = model(x[shard].to(device))
        torch.nn.functional.mse_loss(out, y[shard].to(device)).backward()
        opt.step()
    done: list[str] = []
    for (name, p), q in zip(model.module.named_parameters(), reference.parameters(), strict=True):
        if p.device != torch.device(device):
            raise AssertionError(f"DDP parameter {name} moved to {p.device}")
        _check(f"DDP {name}", p, q, done, atol=1e-4)
    buckets = len(model.reducer._get_zeros_like_grad_buckets())
    if buckets < 2:
        raise AssertionError(f"DDP used {buckets} bucket(s); expected several")
    done.append(f"DDP buckets={buckets}")
    return done


def run_sync_batch_norm(rank: int, world: int, device, steps: int = 2) -> list[str]:
    """nn.SyncBatchNorm on flagos (statistics over every rank's batch) against BatchNorm2d on the
    whole batch in one process: outputs, running statistics and gradients."""
    import torch
    import torch.distributed as dist

    gen = torch.Generator().manual_seed(5)
    reference = torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5, generator=gen)
        reference.bias.uniform_(-0.5, 0.5, generator=gen)
    synced = torch.nn.SyncBatchNorm(3)
    synced.load_state_dict(reference.state_dict())
    synced.to(device)
    shard = slice(rank * 4, (rank + 1) * 4)
    done: list[str] = []
    for step in range(steps):
        x = torch.randn(4 * world, 3, 5, 5, generator=gen) * 2 + 1
        weights = torch.randn(4 * world, 3, 5, 5, generator=gen)
        whole = x.clone().requires_grad_()
        want = reference(whole)
        (want * weights).sum().backward()
        local = x[shard].to(device).requires_grad_()
        got = synced(local)
        (got * weights[shard].to(device)).sum().backward()
        _check(f"SyncBatchNorm output {step}", got, want[shard], done, atol=1e-4)
        _check(f"SyncBatchNorm input grad {step}", local.grad, whole.grad[shard], done, atol=1e-4)
    # Each rank holds its batch's share of the parameter gradients (DDP would sum them).
    for name in ("weight", "bias"):
        grad = getattr(synced, name).grad.clone()
        dist.all_reduce(grad)
        _check(f"SyncBatchNorm {name} grad", grad, getattr(reference, name).grad, done, atol=1e-3)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        _check(f"SyncBatchNorm {name}", getattr(synced, name), getattr(reference, name), done)
    return done


def run_fsdp(rank: int, world: int, device, steps: int = 3, mesh=None) -> list[str]:
    """FSDP2 (fully_shard) on flagos against plain training in one process; over a mesh of two
    dimensions, HSDP (replicated across the first, sharded across the second)."""
    import torch
    import torch.distributed as dist

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch without FSDP2
        return ["FSDP2 skipped (torch has no fully_shard)"]
    from torch.distributed.device_mesh import init_device_mesh

    label = "FSDP2" if mesh is None else f"HSDP{tuple(mesh.shape)}"
    mesh = mesh if mesh is not None else init_device_mesh("flagos", (world,))
    reference = _model(11)
    model = _model(11).to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(99)
    for _ in range(steps):
        x, y = torch.randn(8 * world, 16, generator=gen), torch.randn(8 * world, 4, generator=gen)
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
        shard = slice(rank * 8, (rank + 1) * 8)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[shard].to(device)), y[shard].to(device)).backward()
        opt.step()
    done: list[str] = []
    full = {name: p.full_tensor() for name, p in model.state_dict().items()}
    for name, q in reference.state_dict().items():
        if full[name].device.type != "flagos":
            raise AssertionError(f"{label} parameter {name} on {full[name].device}")
        _check(f"{label} {name}", full[name], q, done, atol=1e-4)
    dist.barrier()
    return done


def _all_reduce_check(
    name: str, rank: int, group, device, done: list[str], split: bool = True
) -> None:
    """all_reduce of each member's rank input over `group` against their sum. A group split
    off the default group has its tier and tensor path (a new_group without pg_options has
    the default ones, as torch's own backends' do)."""
    import torch.distributed as dist

    import torch_fl

    parent, info = torch_fl.comm.tier_info(), torch_fl.comm.tier_info(group)
    if split and (info.tier, info.path) != (parent.tier, parent.path):
        raise AssertionError(f"{name}: tier {info} differs from the default group's {parent}")
    members = dist.get_process_group_ranks(group)
    t = _rank_input(rank, device=device)
    dist.all_reduce(t, group=group)
    _check(f"{name} {members}", t, sum(_rank_input(r) for r in members), done)


def run_mesh(rank: int, world: int, device) -> list[str]:
    """Groups made by splitting the device-bound default group: a DeviceMesh of two dimensions,
    its flattening, dist.split_group after a new_group that left ranks out (they then disagree
    on the new group's name), and HSDP over the mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    done: list[str] = []
    shape = (2, world // 2) if world >= 4 and world % 2 == 0 else (1, world)
    mesh = init_device_mesh("flagos", shape, mesh_dim_names=("replicate", "shard"))
    for dim in ("replicate", "shard"):
        _all_reduce_check(f"mesh{shape} {dim}", rank, mesh.get_group(dim), device, done)
    if hasattr(mesh, "_flatten"):
        flat = mesh._flatten("replicate_shard")
        _all_reduce_check(f"mesh{shape} flattened", rank, flat.get_group(), device, done)
    half = dist.new_group(list(range(max(1, world // 2))))
    if rank < max(1, world // 2):
        _all_reduce_check("new_group", rank, half, device, done, split=False)
    parts = [p for p in (list(range(0, world, 2)), list(range(1, world, 2))) if p]
    import inspect

    if "current_accelerator" in inspect.getsource(dist.split_group):
        part = dist.split_group(split_ranks=parts)
        _all_reduce_check("split_group", rank, part, device, done)
    else:  # torch 2.11's split_group looks for a cuda backend only
        done.append("split_group skipped (this torch's split_group asks for cuda's backend)")
    dist.barrier()
    return done + run_fsdp(rank, world, device, mesh=mesh)


def run_dcp(rank: int, world: int, device, directory: str) -> list[str]:
    """A distributed checkpoint of an FSDP2 model and its optimizer (torch.distributed.checkpoint,
    every rank writing its shards) loaded into a differently initialised one: parameters, AdamW
    state and outputs come back."""
    import torch

    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        return ["DCP skipped (torch has no FSDP2 or state_dict helpers)"]
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("flagos", (world,))

    def trained(seed: int):
        model = _model(seed).to(device)
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(seed + rank)
        model(torch.randn(8, 16, generator=gen).to(device)).sum().backward()
        opt.step()
        return model, opt

    saved, saved_opt = trained(21)
    model_sd, optim_sd = get_state_dict(saved, saved_opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=directory)
    loaded, loaded_opt = trained(22)
    model_sd, optim_sd = get_state_dict(loaded, loaded_opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=directory)
    set_state_dict(
        loaded, loaded_opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )
    done: list[str] = []
    for (name, p), q in zip(saved.named_parameters(), loaded.parameters(), strict=True):
        if q.to_local().device != torch.device(device):
            raise AssertionError(f"DCP loaded {name} onto {q.to_local().device}")
        _check(f"DCP {name}", q.full_tensor(), p.full_tensor(), done, atol=0)
        moments = (saved_opt.state[p]["exp_avg"], loaded_opt.state[q]["exp_avg"])
        _check(f"DCP exp_avg {name}", moments[1].full_tensor(), moments[0].full_tensor(), done, 0)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(3)).to(device)
    _check("DCP output", loaded(x), saved(x), done)
    return done


def run_tp(rank: int, world: int, device, steps: int = 3) -> list[str]:
    """Tensor parallelism (DTensor column/row-wise Linear layers) against plain training in one
    process, and DTensor random ops where the flagos generator is a Philox counter (device
    accelerators: DTensor moves its offset to give each shard its own numbers)."""
    import torch
    import torch.distributed as dist

    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )
    except ImportError:  # torch without DTensor tensor parallelism
        return ["TP skipped (torch has no torch.distributed.tensor.parallel)"]

    mesh = init_device_mesh("flagos", (world,))
    reference = _model(13)
    plan = {
        "0": ColwiseParallel(),
        "2": RowwiseParallel(),
        "4": ColwiseParallel(output_layouts=Replicate()),
    }
    model = parallelize_module(_model(13).to(device), mesh, plan)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(5)
    done: list[str] = []
    for _ in range(steps):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(reference(x), y)
        ref_loss.backward()
        ref_opt.step()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
    _check("TP loss", loss, ref_loss, done, atol=1e-5)
    local = model[0].weight.to_local()
    if local.device != torch.device(device) or local.shape[0] != 32 // world:
        raise AssertionError(f"TP shard of layer 0: {local.device} {tuple(local.shape)}")
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        _check(f"TP {name}", full, q, done, atol=1e-4)

    if torch_fl_native_device() == "cpu":
        done.append("DTensor random ops skipped (the cpu accelerator's generator is mt19937)")
    else:
        torch.manual_seed(21)  # the same seed on every rank, as DTensor asks
        ones = distribute_tensor(torch.ones(8 * world, 64, device=device), mesh, [Shard(0)])
        local = torch.nn.functional.dropout(ones, 0.5).to_local().contiguous()
        shards = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(shards, local)
        if any(torch.equal(shards[0].cpu(), s.cpu()) for s in shards[1:]):
            raise AssertionError("DTensor dropout drew the same mask on two shards")
        replicated = distribute_tensor(torch.ones(64, device=device), mesh, [Replicate()])
        mask = torch.nn.functional.dropout(replicated, 0.5).to_local().contiguous()
        masks = [torch.empty_like(mask) for _ in range(world)]
        dist.all_gather(masks, mask)
        if not all(torch.equal(masks[0].cpu(), m.cpu()) for m in masks[1:]):
            raise AssertionError("DTensor dropout of a replicated tensor differs across ranks")
        done.append("DTensor random ops (sharded masks differ, replicated masks agree)")
    dist.barrier()
    return done


def torch_fl_native_device() -> str:
    import torch_fl

    return torch_fl._C._native_device_type()


def worker(args) -> int:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    import torch_fl

    rank, world = args.rank, args.world_size
    device = torch.device("flagos", rank % torch.flagos.device_count())
    torch.flagos.set_device(device)
    options = None
    if args.tier or args.host_staged:
        options = torch_fl.comm.Options(tier=args.tier, host_staged=args.host_staged or None)
    report: dict = {"rank": rank}
    try:
        dist.init_process_group(
            "flagos",
            init_method=f"file://{args.init_file}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=args.timeout),
            device_id=device,
            pg_options=options,
        )
        info = torch_fl.comm.tier_info()
        report["tier"] = {
            "tier": info.tier,
            "path": info.path,
            "profile": info.profile,
            "skip_reasons": info.skip_reasons,
            "unavailable": info.unavailable,
        }
        if args.scenario == "all":
            report["checks"] = (
                run_collectives(rank, world, device)
                + run_ddp(rank, world, device)
                + run_sync_batch_norm(rank, world, device)
                + run_fsdp(rank, world, device)
                + run_mesh(rank, world, device)
                + run_tp(rank, world, device)
                + run_dcp(rank, world, device, str(Path(args.init_file).parent / "dcp"))
            )
            dist.barrier()
        elif args.scenario == "mesh":
            report["checks"] = run_mesh(rank, world, device)
        elif args.scenario == "peer_exit":
            # The last rank leaves without taking part; the others must get an error, not hang.
            # It leaves only once every rank has finished init_process_group: leaving during
            # the others' connection setup would fail their init instead (a different path).
            store = dist.distributed_c10d._get_default_store()
            store.add("peer_exit_initialised", 1)
            if rank == world - 1:
                while store.add("peer_exit_initialised", 0) < world:
                    time.sleep(0.01)
                os._exit(0)
            t = torch.ones(4, device=device)
            start = time.monotonic()
            try:
                dist.all_reduce(t)
                torch.flagos.synchronize(device)
            except Exception as exc:  # the expected outcome
                report["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                report["seconds"] = time.monotonic() - start
            else:
                report["error"] = None
            # The same failure seen through the work's future says as much.
            try:
                dist.all_reduce(t, async_op=True).get_future().wait()
            except Exception as exc:
                report["future_error"] = f"{type(exc).__name__}: {exc}"[:2000]
            else:
                report["future_error"] = None
        elif args.scenario == "peer_silent":
            # The last rank stays alive but never joins the collective: a timeout, with a message.
            if rank == world - 1:
                time.sleep(args.timeout * 2)
                os._exit(0)
            t = torch.ones(4, device=device)
            start = time.monotonic()
            try:
                dist.all_reduce(t)
                torch.flagos.synchronize(device)
            except Exception as exc:
                report["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                report["seconds"] = time.monotonic() - start
            else:
                report["error"] = None
        else:
            raise ValueError(f"unknown scenario {args.scenario}")
    except Exception:
        report["failure"] = traceback.format_exc()
    Path(args.report).write_text(json.dumps(report))
    sys.stdout.flush()
    # Leave without destroy_process_group: a peer may be gone (peer_exit), and a clean exit
    # must not depend on it.
    os._exit(0 if "failure" not in report else 1)


# --------------------------------------------------------------------------------------------
# Launcher side.
# --------------------------------------------------------------------------------------------


def launch(
    world_size: int,
    scenario: str = "all",
    timeout: float = 60.0,
    tier: str | None = None,
    host_staged: bool = False,
    extra_env: dict | None = None,
) -> list[dict]:
    """Runs `scenario` on `world_size` processes; returns each rank's report."""
    env = dict(os.environ)
    env.setdefault("FLAGOS_CPU_DEVICE_COUNT", str(max(2, world_size)))
    env["GLOO_SOCKET_IFNAME"] = env.get("GLOO_SOCKET_IFNAME", "lo")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra_env or {})
    with tempfile.TemporaryDirectory(prefix="flagos_dist_") as tmp:
        procs = []
        for rank in range(world_size):
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                "--rank",
                str(rank),
                "--world-size",
                str(world_size),
                "--init-file",
                f"{tmp}/store",
                "--report",
                f"{tmp}/rank{rank}.json",
                "--scenario",
                scenario,
                "--timeout",
                str(timeout),
            ]
            if tier:
                cmd += ["--tier", tier]
            if host_staged:
                cmd.append("--host-staged")
            procs.append(
                subprocess.Popen(
                    cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            )
        deadline = time.monotonic() + timeout * 4 + 120
        outputs = []
        for proc in procs:
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                raise AssertionError(  # noqa: B904
                    f"rank processes still running after {timeout * 4 + 120:.0f} s: a hang"
                )
            outputs.append(out)
        reports = []
        for rank in range(world_size):
            path = Path(tmp) / f"rank{rank}.json"
            report = json.loads(path.read_text()) if path.exists() else {"rank": rank}
            report["output"] = outputs[rank][-4000:]
            report["returncode"] = procs[rank].returncode
            reports.append(report)
        return reports


def _device_count() -> int:
    import torch

    import torch_fl  # noqa: F401

    return torch.flagos.device_count()


def test_live(world_size: int = 2) -> None:
    import pytest

    if _device_count() < world_size:
        pytest.skip(f"needs {world_size} flagos devices")
    reports = launch(world_size)
    for report in reports:
        assert "failure" not in report, report.get("failure") or report["output"]
        assert report["returncode"] == 0, report["output"]
        assert any(c.startswith("DDP buckets=") for c in report["checks"]), report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--tier", choices=("flagcx", "nccl", "gloo"))
    parser.add_argument("--host-staged", action="store_true")
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument(
        "--scenario", default="all", choices=("all", "mesh", "peer_exit", "peer_silent")
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--init-file", help=argparse.SUPPRESS)
    parser.add_argument("--report", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    start = time.monotonic()
    reports = launch(args.world_size, args.scenario, args.timeout, args.tier, args.host_staged)
    ok = True
    for report in reports:
        rank = report["rank"]
        if "failure" in report or report["returncode"] != 0:
            ok = False
            print(f"rank {rank}: FAILED (exit {report['returncode']})")
            print(report.get("failure") or report["output"])
            continue
        tier = report.get("tier", {})
        print(
            f"rank {rank}: tier={tier.get('tier')} path={tier.get('path')} "
            f"profile={tier.get('profile')} skip_reasons={tier.get('skip_reasons')} "
            f"unavailable={tier.get('unavailable')}"
        )
        if "checks" in report:
            print(
                f"rank {rank}: {len(report['checks'])} checks passed: "
                + ", ".join(report["checks"])
            )
        if "error" in report:
            print(f"rank {rank}: error after {report.get('seconds', 0):.1f} s: {report['error']}")
    print(f"{'PASS' if ok else 'FAIL'} in {time.monotonic() - start:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
