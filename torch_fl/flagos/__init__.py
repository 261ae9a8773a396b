"""`torch.flagos`: the device module of the flagos device, shaped like `torch.cuda`."""

import torch

from torch_fl.flagos import _memory as memory
from torch_fl.flagos import amp
from torch_fl.flagos._device import (
    _is_in_bad_fork,
    _lazy_init,
    can_device_access_peer,
    current_device,
    device,
    device_count,
    device_of,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from torch_fl.flagos._memory import (
    caching_allocator_alloc,
    caching_allocator_delete,
    empty_cache,
    empty_host_cache,
    get_allocator_backend,
    get_per_process_memory_fraction,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
)
from torch_fl.flagos._monitoring import (
    clock_rate,
    device_memory_used,
    get_sync_debug_mode,
    is_tf32_supported,
    list_gpu_processes,
    memory_usage,
    power_draw,
    set_sync_debug_mode,
    temperature,
    utilization,
)
from torch_fl.flagos._properties import (
    DeviceProperties,
    get_amp_supported_dtype,
    get_device_capability,
    get_device_name,
    get_device_properties,
    is_bf16_supported,
)
from torch_fl.flagos._random import (
    default_generator,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from torch_fl.flagos._streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    is_current_stream_capturing,
    set_stream,
    stream,
)
from torch_fl.flagos.graphs import (
    FlagOSGraph,
    graph,
    graph_pool_handle,
    make_graphed_callables,
)

# Raised when a flagos allocation fails (`except torch.flagos.OutOfMemoryError`), as on cuda.
OutOfMemoryError = torch.OutOfMemoryError

__all__ = [
    "DeviceProperties",
    "Event",
    "FlagOSGraph",
    "OutOfMemoryError",
    "Stream",
    "StreamContext",
    "_is_in_bad_fork",
    "_lazy_init",
    "amp",
    "caching_allocator_alloc",
    "caching_allocator_delete",
    "can_device_access_peer",
    "clock_rate",
    "current_device",
    "current_stream",
    "default_generator",
    "default_stream",
    "device",
    "device_count",
    "device_memory_used",
    "device_of",
    "empty_cache",
    "empty_host_cache",
    "get_allocator_backend",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_per_process_memory_fraction",
    "get_rng_state",
    "get_rng_state_all",
    "get_sync_debug_mode",
    "graph",
    "graph_pool_handle",
    "host_memory_stats",
    "host_memory_stats_as_nested_dict",
    "init",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_current_stream_capturing",
    "is_initialized",
    "is_tf32_supported",
    "list_gpu_processes",
    "make_graphed_callables",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "memory_usage",
    "power_draw",
    "reset_accumulated_host_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_host_memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_per_process_memory_fraction",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "set_sync_debug_mode",
    "stream",
    "synchronize",
    "temperature",
    "utilization",
]


# torch.compile: Inductor finds the flagos code generation through these, at the first
# compilation (torch_fl.compile registers it; nothing Inductor-related loads at import).
_INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def _inductor_backend_init() -> None:
    """Called by Inductor (torch versions with this hook) before the first flagos compile."""
    from torch_fl.compile import register

    register()


def __getattr__(name: str):  # noqa: ANN202
    # Inductor's init_backend_registration() (torch without `_inductor_backend_init`) looks
    # these up on torch.<privateuse1 name> and registers what it finds, without a custom pass.
    # register() has registered everything, the pass that keys the FX graph cache included;
    # answering None tells Inductor there is nothing more to register.
    if name == "default_generators":
        # torch.cuda.default_generators: one default generator per device.
        return tuple(default_generator(i) for i in range(device_count()))
    if name == "_initialized":
        # torch.utils.checkpoint stashes and replays a device's RNG state (dropout masks of the
        # recomputed forward) only when the device module says it is initialised, as
        # torch.cuda._initialized does. flagos is ready from import on, except in a bad fork.
        return not _is_in_bad_fork()
    if name in _INDUCTOR_HOOKS:
        from torch_fl.compile import register

        register()
        return None
    raise AttributeError(f"module 'torch.flagos' has no attribute '{name}'")
