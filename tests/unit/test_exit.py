"""A script that ends right after a backward on flagos exits cleanly.

autograd runs a flagos backward on its worker thread for the device, which can drop its last
graph task after the caller returned; on torch 2.13 that takes the GIL, and during interpreter
finalization it aborted the process ("terminate called without an active exception", status
134) in about one run in four under load. torch_fl's exit handler (torch_fl/_autograd_exit.py)
lets the worker threads finish first. Scripts run three at a time, for load.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import torch

import torch_fl
from tests.conftest import run_python

BACKWARD_THEN_EXIT = (
    "import torch, torch_fl\n"
    "x = torch.randn(8, 8, device='flagos:{index}', requires_grad=True)\n"
    "(x * 2).sum().backward()\n"
)
GRAD_THEN_EXIT = (
    "import torch, torch_fl\n"
    "x = torch.randn(8, 8, device='flagos:{index}', requires_grad=True)\n"
    "(g,) = torch.autograd.grad(x.exp().sum(), [x])\n"
)


def run(code: str) -> subprocess.CompletedProcess:
    return run_python(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})


def test_scripts_ending_right_after_a_backward_exit_cleanly() -> None:
    devices = torch.flagos.device_count()
    scripts = [
        (BACKWARD_THEN_EXIT if i % 2 == 0 else GRAD_THEN_EXIT).format(index=i % devices)
        for i in range(12)
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(run, scripts))
    for done in results:
        assert done.returncode == 0, done.stderr[-2000:]
        assert "terminate called" not in done.stderr


def test_draining_the_device_threads_leaves_user_state_alone() -> None:
    x = torch.randn(4, device="flagos", requires_grad=True)
    (x * 3).sum().backward()
    grad = x.grad.clone()
    torch_fl._autograd_exit.drain_device_threads()
    assert torch.equal(x.grad, grad)
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 3.0))
