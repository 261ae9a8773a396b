"""torch.compile on flagos tensors.

`register()` makes the flagos device known to Dynamo and Inductor through PyTorch's
registration APIs:

- `torch._dynamo.device_interface.register_interface_for_device("flagos", FlagosInterface)`;
- `torch._inductor.codegen.common.register_device_op_overrides("flagos", ...)`;
- `torch._inductor.codegen.common.register_backend_for_device("flagos", scheduling, wrapper,
  cpp_wrapper, fx_wrapper)`: C++ kernels on the cpu accelerator, Triton on CUDA-ABI ones.

Nothing here runs at `import torch_fl`: the device module `torch.flagos` hands Inductor
`_inductor_backend_init` (torch versions with that hook) and, for the others, the
`Scheduling`/`PythonWrapperCodegen`/`CppWrapperCodegen`/`WrapperFxCodegen` attributes that
Inductor's `init_backend_registration()` looks up on a renamed PrivateUse1 device's module
(they run `register()` and answer None, so Inductor keeps this registration, custom pass
included); either runs at the first Inductor compilation. Calling it directly is also fine.

With FLAGOS_USE_FLAGTREE=1, registration first asserts that the active Triton is FlagTree.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from torch_fl.compile._runtime import FlagTreeNotActiveError, check_flagtree

__all__ = [
    "FlagTreeNotActiveError",
    "check_flagtree",
    "is_registered",
    "register",
    "register_if_inductor_is_loaded",
]

DEVICE = "flagos"

_lock = threading.RLock()
_registered = False


def is_registered() -> bool:
    return _registered


# Inductor scheduler transforms that assume SIMD (Triton-style) node groups. Its scheduler
# skips them for C++ kernels by testing `device.type == "cpu"` (scheduler.py
# BaseSchedulerNode.is_cpu); flagos C++ kernels on the cpu accelerator fail that test, and
# `_try_reindex_pointwise_for_reduction` then multiplies C++ size tuples (TypeError on a
# reduction fused with a pointwise). No per-device switch exists, so they are turned off
# through Inductor's config; for CPU graphs these transforms are skipped already.
SIMD_ONLY_FUSION_KNOBS = (
    "loop_reindexing_after_fusion",
    "loop_ordering_after_fusion",
    "loop_index_inversion_in_fusion",
)


def _keep_simd_only_fusion_off_for_cpp_kernels() -> None:
    from torch._inductor import config as inductor_config

    for knob in SIMD_ONLY_FUSION_KNOBS:
        if getattr(inductor_config, knob, False):
            setattr(inductor_config, knob, False)


def register() -> dict[str, Any]:
    """Registers flagos with Dynamo and Inductor (idempotent); returns the codegen classes."""
    global _registered
    with _lock:
        if not _registered:
            check_flagtree()
        from torch_fl.compile import inductor_backend

        classes = inductor_backend.codegen_classes()
        if _registered:
            return classes

        from torch._dynamo.device_interface import register_interface_for_device
        from torch._inductor.codegen.common import (
            get_device_op_overrides,
            register_backend_for_device,
            register_device_op_overrides,
        )

        from torch_fl import flagos
        from torch_fl.compile.device_interface import FlagosInterface

        register_interface_for_device(DEVICE, FlagosInterface)
        for index in range(flagos.device_count()):
            register_interface_for_device(f"{DEVICE}:{index}", FlagosInterface)
        # Inductor (torch <= 2.11) imports its built-in overrides only while its registry is
        # empty, and answers the CPU's no-op ones for any device missing afterwards: were
        # flagos registered first, cuda graphs would get `with pass:` device guards.
        get_device_op_overrides("cpu")
        register_device_op_overrides(DEVICE, inductor_backend.FlagosDeviceOpOverrides())
        if not inductor_backend.USES_TRITON:
            _keep_simd_only_fusion_off_for_cpp_kernels()
        register_backend_for_device(
            DEVICE,
            classes["Scheduling"],
            classes["PythonWrapperCodegen"],
            classes["CppWrapperCodegen"],
            classes["WrapperFxCodegen"],
            inductor_backend.post_grad_pass(),
        )
        _registered = True
        return classes


def register_if_inductor_is_loaded() -> None:
    """At `import torch_fl`: registers now if Inductor is loaded already.

    Inductor looks for a renamed PrivateUse1 device's code generation once, at its first
    compilation (torch without `_inductor_backend_init`: `init_backend_registration` is
    cached). A compilation before `import torch_fl` (autoload off) has looked already and
    would never find flagos. Inductor being loaded, registering costs no import.
    """
    if "torch._inductor.codegen.common" in sys.modules:
        register()
