"""At interpreter exit, lets autograd's device threads finish their last graph task first.

A backward on flagos runs on autograd's worker thread for the device (as on cuda). Since torch
2.13 every backward also keeps a Python object (the caller's contextvars context) in the
thread-local state the graph task captures, and the worker thread can drop the last reference to
that task after the caller has returned; dropping it takes the GIL. When that happens while the
interpreter finalizes (a script that ends right after a backward), Python tears the thread down
inside a noexcept frame and the process aborts: "terminate called without an active exception",
exit status 134 (seen in about 1 run in 20 on an idle 2-core machine, half the runs under load).

(A task whose result holds tensors that Python has seen, as `torch.autograd.grad` returns,
has the same race.) An exit handler, which Python runs before finalizing, pushes one tiny
backward per flagos device through the engine directly (no context object kept for it, nothing
in its result): each worker thread finishes the previous graph task, taking the GIL while this
thread waits with it released, before it runs this one. It does nothing in a bad fork, or on
a device accelerator whose runtime never started.
"""

from __future__ import annotations

import atexit

import torch

from torch_fl import _C

_registered = False


def drain_device_threads() -> None:
    """Runs a no-op backward on every flagos device's autograd thread and waits for it."""
    from torch_fl import flagos

    if flagos._is_in_bad_fork():
        return
    if _C._native_device_type() != "cpu" and not torch.cuda.is_initialized():
        return  # no backward on the device can have run; starting the runtime now would cost
    engine = torch.autograd.Variable._execution_engine
    with torch.enable_grad(), torch.autograd.set_multithreading_enabled(True):
        for index in range(flagos.device_count()):
            leaf = torch.zeros((), device=torch.device("flagos", index), requires_grad=True)
            root = leaf * 1.0
            # Accumulating into the leaf leaves the task's result empty: nothing in it needs
            # the GIL when the worker thread drops it after this thread has gone on.
            engine.run_backward((root,), (torch.ones_like(root),), False, False, (), True, True)


def _at_exit() -> None:
    try:
        drain_device_threads()
    except Exception:  # never turn a clean exit into a failing one
        pass


def register() -> None:
    global _registered
    if not _registered:
        atexit.register(_at_exit)
        _registered = True
