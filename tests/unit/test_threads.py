"""Eight threads train their own models on flagos:0 and flagos:1 at once (allocator, router,
autograd, optimizer and streams shared by all), each matching its CPU twin step by step, and
the device memory all of them used is returned at the end."""

from __future__ import annotations

import copy
import gc
import threading

import torch
from torch import nn

import torch_fl


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))


def train_against_cpu(thread: int, start: threading.Barrier, errors: list[str]) -> None:
    try:
        index = thread % torch.flagos.device_count()
        device = f"flagos:{index}"
        torch.flagos.set_device(index)  # per thread, as on cuda
        cpu_model = make_model(thread)
        flagos_model = copy.deepcopy(cpu_model).to(device)
        cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
        flagos_opt = torch.optim.AdamW(flagos_model.parameters(), lr=1e-2)
        data = torch.Generator().manual_seed(thread)
        side = torch.flagos.Stream(device)
        start.wait()
        for step in range(20):
            x = torch.randn(8, 16, generator=data)
            y = torch.randint(0, 4, (8,), generator=data)
            for model, opt, where in (
                (cpu_model, cpu_opt, "cpu"),
                (flagos_model, flagos_opt, device),
            ):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x.to(where)), y.to(where)).backward()
                opt.step()
            if step % 5 == 0:  # work on a side stream of the thread's device
                # after the step queued on the thread's current stream (a GPU runs them apart:
                # without the wait the side stream reads the weights before the step)
                side.wait_stream(torch.flagos.current_stream(device))
                with torch.no_grad(), torch.flagos.stream(side):
                    doubled = flagos_model[0].weight * 2
                side.synchronize()
                torch.testing.assert_close(
                    doubled.cpu(), cpu_model[0].weight.detach() * 2, atol=1e-4, rtol=1e-4
                )
        for name, (want, have) in zip(
            (n for n, _ in cpu_model.named_parameters()),
            zip(cpu_model.parameters(), flagos_model.parameters(), strict=True),
            strict=True,
        ):
            assert have.device == torch.device(device), name
            # (a GPU's kernels sum in another order than CPU's: 20 AdamW steps drift slightly)
            torch.testing.assert_close(
                have.detach().cpu(), want.detach(), atol=1e-4, rtol=1e-4, msg=name
            )
    except BaseException as error:  # noqa: BLE001  (reported by the main thread)
        errors.append(f"thread {thread}: {error!r}")


def allocated_by_tensors() -> list[int]:
    """Device memory held by live tensors. On CUDA, blocks freed on a side stream return to the
    pool only when the pool next processes its events (empty_cache does), and every new
    (thread, stream) pair gets a cuBLAS workspace from the same pool, held until cleared."""
    gc.collect()
    torch.flagos.synchronize()
    if torch_fl.build_config.ACCELERATOR != "cpu":
        torch._C._cuda_clearCublasWorkspaces()
    torch.flagos.empty_cache()
    return [torch.flagos.memory_allocated(i) for i in range(torch.flagos.device_count())]


def test_threads_train_on_flagos_as_on_cpu() -> None:
    before = allocated_by_tensors()
    errors: list[str] = []
    start = threading.Barrier(8)
    threads = [
        threading.Thread(target=train_against_cpu, args=(t, start, errors)) for t in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish"
    assert not errors, "\n".join(errors)
    assert allocated_by_tensors() == before
