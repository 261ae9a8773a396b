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
from torch._inductor.utils import IndentedBuffer
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
            target = getattr(self.writeline, "__self__", None)  # type: ignore[attr-defined]
            if isinstance(target, IndentedBuffer):
                # Called while the wrapper's lines are written out, with writeline bound to
                # the output buffer (torch <= 2.12 does not route WrapperLines there): write
                # the guard as text and indent the launch under it.
                target.writeline(f"with {FlagosDeviceOpOverrides().device_guard(device.index)}:")
                with target.indent():
                    super()._generate_kernel_call_helper(  # type: ignore[misc]
                        kernel_name, call_args, device=device, **kwargs
                    )
                return
            self.writeline(EnterDeviceContextManagerLine(device.index, None))  # type: ignore[attr-defined]
            super()._generate_kernel_call_helper(  # type: ignore[misc]
                kernel_name, call_args, device=device, **kwargs
            )
            self.writeline(ExitDeviceContextManagerLine())  # type: ignore[attr-defined]

    def make_allocation(
        self,
        name: str,
        device: torch.device,
        dtype: torch.dtype,
        shape: Any,
        stride: Any,
        allocation_shape: Any = None,
        is_pinned: bool = False,
    ) -> str:
        # Inductor allocates buffers of devices it does not know with device='<type>', i.e.
        # on the current device, and guards the current device only for its GPU types; a
        # flagos buffer is allocated on its own index instead.
        from torch._inductor import config

        if device.type != DEVICE or config.test_configs.track_memory_lifecycle:
            return super().make_allocation(  # type: ignore[misc]
                name, device, dtype, shape, stride, allocation_shape, is_pinned
            )
        shape_tuple = self.codegen_python_shape_tuple(shape)  # type: ignore[attr-defined]
        stride_tuple = self.codegen_python_shape_tuple(stride)  # type: ignore[attr-defined]
        alloc_tuple = self.codegen_python_shape_tuple(  # type: ignore[attr-defined]
            shape if allocation_shape is None else allocation_shape
        )
        where = DEVICE if device.index is None else f"{DEVICE}:{device.index}"
        line = (
            f"{name} = empty_strided({alloc_tuple}, {stride_tuple}, "
            f"device='{where}', dtype={dtype})"
        )
        if alloc_tuple != shape_tuple:
            line += f".as_strided({shape_tuple}, {stride_tuple})"
        return line


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
            return FlagosSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
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


@functools.cache
def _cpp_scheduling() -> type:
    import contextlib

    from torch._inductor import config
    from torch._inductor.codegen.cpp import CppScheduling

    def as_cpp_backend() -> contextlib.AbstractContextManager[Any]:
        # Inductor's get_current_backend() answers config.cuda_backend ("triton") for every
        # device type it does not list, flagos included; kernel codegen (CSE dtype
        # propagation, bf16/fp16 upcasting, dtype asserts) asks it. While C++ kernels are
        # generated for flagos the right answer is "cpp", as for CPU tensors.
        return config.patch(cuda_backend="cpp")

    class FlagosCppScheduling(CppScheduling):
        def __init__(self, scheduler: Any) -> None:
            # Inductor leaves only cpu and mps nodes out of combo kernels, then asserts on a
            # combo node for any scheduling that is not a SIMD one: say so before that.
            if config.combo_kernels:
                raise NotImplementedError(
                    "torch._inductor.config.combo_kernels=True does not work for flagos tensors "
                    "on the cpu accelerator (Inductor's C++ code generation has no combo "
                    "kernels); leave it off (its default) for flagos graphs"
                )
            super().__init__(scheduler)
            # Inductor batches C++ kernels and writes their calls at the next flush, which it
            # makes only before nodes with a device. A node without one (the synchronization
            # `torch.accelerator.synchronize()` traces to) would be written before the kernels
            # that precede it, and the wrapper would free their inputs first; in such graphs
            # each node's kernels are written before the next node's.
            self._flush_each_node: bool | None = None  # known once nodes are scheduled

        def ready_to_flush(self) -> bool:
            if self._flush_each_node is None:
                nodes = getattr(self.scheduler, "nodes", None) or []
                self._flush_each_node = any(n.is_extern() and n.get_device() is None for n in nodes)
            return self._flush_each_node or super().ready_to_flush()

        def codegen_node(self, node: Any) -> None:
            with as_cpp_backend():
                super().codegen_node(node)

        def codegen_template(self, *args: Any, **kwargs: Any) -> Any:
            with as_cpp_backend():
                return super().codegen_template(*args, **kwargs)

        def flush(self) -> None:
            with as_cpp_backend():
                super().flush()

    return FlagosCppScheduling


CPP_WRAPPER_UNSUPPORTED = (
    "torch.compile with cpp_wrapper=True and AOTInductor "
    "(torch._inductor.aoti_compile_and_package) do not support flagos tensors: Inductor's C++ "
    "wrapper names devices through a fixed table of torch's built-in ones. Use torch.compile's "
    "default Python wrapper, or run an exported program with ExportedProgram.module()"
)


@functools.cache
def _cpp_wrapper() -> type:
    if USES_TRITON:
        from torch._inductor.codegen.cpp_wrapper_gpu import CppWrapperGpu as CppWrapper
    else:
        from torch._inductor.codegen.cpp_wrapper_cpu import CppWrapperCpu as CppWrapper

    class FlagosCppWrapper(CppWrapper):
        """Refuses with the reason, where Inductor would fail an assertion deep in codegen."""

        @staticmethod
        def create(*args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(CPP_WRAPPER_UNSUPPORTED)

    return FlagosCppWrapper


@functools.cache
def post_grad_pass() -> Any:
    """The post-grad pass Inductor runs on flagos graphs (graph_fixes), whose uuid also keys
    Inductor's FX graph cache.

    Inductor's cache key covers torch, Triton and Inductor's config but not this module's
    code generation; the pass's uuid (a hash of torch_fl.compile's sources and the build's
    accelerator) makes a cached graph compiled by another torch_fl a cache miss.
    """
    import hashlib
    from pathlib import Path

    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    from torch_fl.compile import graph_fixes

    digest = hashlib.sha256(_runtime.ACCELERATOR.encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    uuid = digest.hexdigest()

    class FlagosPostGradPass(CustomGraphModulePass):
        def __call__(self, gm: torch.fx.GraphModule) -> None:
            changed = graph_fixes.move_cpu_scalars_to_flagos(gm.graph)
            if not USES_TRITON:  # Triton kernels compute logical indices themselves
                changed = graph_fixes.flatten_full_argreductions(gm.graph) or changed
            if changed:
                gm.graph.lint()
                gm.recompile()

        def uuid(self) -> str:
            return uuid

    return FlagosPostGradPass()


@functools.cache
def codegen_classes() -> dict[str, Any]:
    """The classes Inductor uses for flagos, by the names of the device-module hook."""
    return {
        "Scheduling": _triton_scheduling() if USES_TRITON else _cpp_scheduling(),
        "PythonWrapperCodegen": FlagosWrapperCodegen,
        "CppWrapperCodegen": _cpp_wrapper(),
        "WrapperFxCodegen": WrapperFxCodegen,
    }
