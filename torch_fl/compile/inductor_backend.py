"""Inductor code generation for flagos tensors, chosen by the build's accelerator.

cpu accelerator: flagos memory is host memory, so Inductor's C++ kernels (CppScheduling) run
on it as they do on CPU tensors; the Python wrapper calls them like CPU kernels.

CUDA-ABI accelerators (cuda, dcu): flagos:N is native device N and flagos memory is its
memory, so Inductor's Triton kernels (TritonScheduling) run on it. Two things differ from a
cuda tensor, and are handled here through subclasses Inductor lets a backend register:

- Triton compiles for the target named in each kernel's `triton_meta["device"]`, built from
  the tensor's device type; Triton has no 'flagos' target. `FlagosTritonScheduling` retargets
  each kernel it defines to the native device (same index, same properties).
- Inductor only emits device guards for the device types it lists as GPUs
  (`torch._inductor.utils.GPU_TYPES`, not extensible). `FlagosWrapperCodegen` therefore
  wraps each Triton launch in `torch.flagos.device(index)`, and launches it on the current
  flagos stream (`FlagosDeviceOpOverrides.import_get_raw_stream_as`).

Importing this module imports Inductor; `torch_fl.compile.register()` does it lazily.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.codegen.wrapper import (
    EnterDeviceContextManagerLine,
    ExitDeviceContextManagerLine,
    PythonWrapperCodegen,
    SubgraphPythonWrapperCodegen,
)
from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen
from torch._inductor.virtualized import V

from torch_fl.compile import _runtime

DEVICE = "flagos"
USES_TRITON = _runtime.NATIVE_DEVICE_TYPE == "cuda"


class FlagosDeviceOpOverrides(DeviceOpOverrides):
    """Python snippets the wrapper writes for device, stream and synchronization."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch_fl.compile._runtime import get_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.flagos.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.flagos.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.flagos.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.flagos.current_stream()"

    def cpp_kernel_type(self) -> str:
        return "void*"


class _FlagosKernelCalls:
    """Kernel-call codegen for flagos devices (mixed into the Python wrapper classes)."""

    def _generate_kernel_call_helper(
        self, kernel_name: str, call_args: Any, *, device: Any = None, **kwargs: Any
    ) -> None:
        device = device or V.graph.get_current_device_or_throw()
        if device.type != DEVICE:
            super()._generate_kernel_call_helper(  # type: ignore[misc]
                kernel_name, call_args, device=device, **kwargs
            )
        elif not kwargs.get("triton", True):
            # A C++ kernel over host memory: call it as Inductor calls CPU kernels.
            super()._generate_kernel_call_helper(  # type: ignore[misc]
                kernel_name, call_args, device=torch.device("cpu"), **kwargs
            )
        else:
            # A Triton kernel: on the tensor's device, on that device's current flagos stream.
            self.writeline(EnterDeviceContextManagerLine(device.index, None))  # type: ignore[attr-defined]
            super()._generate_kernel_call_helper(  # type: ignore[misc]
                kernel_name, call_args, device=device, **kwargs
            )
            self.writeline(ExitDeviceContextManagerLine())  # type: ignore[attr-defined]


class FlagosSubgraphWrapperCodegen(_FlagosKernelCalls, SubgraphPythonWrapperCodegen):
    pass


class FlagosWrapperCodegen(_FlagosKernelCalls, PythonWrapperCodegen):
    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: str | None,
        parent_wrapper: PythonWrapperCodegen | None,
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            assert subgraph_name is not None and parent_wrapper is not None
            return FlagosSubgraphWrapperCodegen(
                subgraph_name, parent_wrapper, partition_signatures
            )
        return FlagosWrapperCodegen()


def _native_triton_target(src_code: str) -> str:
    """Retargets a Triton kernel's source from the flagos device to the native device.

    The kernel's `triton_meta` embeds `repr(DeviceProperties.create(flagos:N))`; the native
    device's properties differ only in `type` (flagos reports the native properties), so
    the exact repr is replaced. Triton then compiles for, and Inductor's launcher and
    benchmarker use, the native device.
    """
    from torch._inductor.runtime.hints import DeviceProperties

    device = V.graph.get_current_device_or_throw()
    if device.type != DEVICE:
        return src_code
    flagos_props = DeviceProperties.create(device)
    native_type = "hip" if torch.version.hip is not None else "cuda"
    native_props = flagos_props._replace(type=native_type)
    src_code = src_code.replace(repr(flagos_props), repr(native_props))
    if f"type='{DEVICE}'" in src_code:
        raise RuntimeError(
            "torch_fl could not retarget a Triton kernel from flagos to the native device "
            f"(this torch's kernel source embeds device properties differently):\n{src_code}"
        )
    return src_code


@functools.cache
def _triton_scheduling() -> type:
    from torch._inductor.codegen.triton import TritonScheduling

    class FlagosTritonScheduling(TritonScheduling):
        def define_kernel(self, src_code: str, node_schedule: Any, kernel: Any) -> str:
            return super().define_kernel(_native_triton_target(src_code), node_schedule, kernel)

    return FlagosTritonScheduling


def _cpp_scheduling() -> type:
    from torch._inductor.codegen.cpp import CppScheduling

    return CppScheduling


def _cpp_wrapper() -> type:
    if USES_TRITON:
        from torch._inductor.codegen.cpp_wrapper_gpu import CppWrapperGpu

        return CppWrapperGpu
    from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu

    return CppWrapperCpu


@functools.cache
def codegen_classes() -> dict[str, Any]:
    """The classes Inductor uses for flagos, by the names of the device-module hook."""
    return {
        "Scheduling": _triton_scheduling() if USES_TRITON else _cpp_scheduling(),
        "PythonWrapperCodegen": FlagosWrapperCodegen,
        "CppWrapperCodegen": _cpp_wrapper(),
        "WrapperFxCodegen": WrapperFxCodegen,
    }
