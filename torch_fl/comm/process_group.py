"""The `flagos` c10d backend: tier selection and the factory torch.distributed calls.

ProcessGroupFlagOS (C++, csrc/comm/) wraps an inner c10d backend of the installed torch and hands
it flagos tensors zero-copy or host-staged. This module decides which inner backend to build:

    flagcx  when `flagcx` is importable and registers its c10d backend: FlagCX's backend over
            zero-copy native views of flagos tensors (CUDA views on the cuda accelerator, host
            views on the cpu accelerator)
    nccl    torch's ProcessGroupNCCL over zero-copy CUDA views of flagos tensors, on a CUDA-ABI
            accelerator with the CUDA-ABI comm profile (GEMS_VENDOR nvidia or hygon); built by
            torch.distributed.ProcessGroupNCCL, or where the installed torch's Python lacks
            that class (DCU: RCCL inside DTK's libtorch_hip) by the NCCL bridge the package
            carries, torch_fl.comm._nccl_ext._flagos_nccl
    gloo    torch.distributed.ProcessGroupGloo: zero-copy on the cpu accelerator (flagos memory
            is host memory), host-staged on device accelerators

The first usable tier wins; FLAGOS_COMM_TIER=flagcx|nccl|gloo (or Options(tier=...)) requests one
and fails with the reason when it is unavailable. Every tier ranked above the chosen one is
recorded either as *skipped* (it was a candidate here but could not be used) or *unavailable*
(its prerequisite is absent: flagcx not installed, no CUDA memory on this accelerator).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from torch_fl._build_switches import flag

TIERS = ("flagcx", "nccl", "gloo")
ENV_TIER = "FLAGOS_COMM_TIER"
ENV_HOST_STAGED = "FLAGOS_COMM_HOST_STAGED"
CUDA_ABI_VENDORS = ("nvidia", "hygon")
FLAGCX_BACKEND = "flagcx"  # the name FlagCX registers its backend under on import


@dataclass(frozen=True)
class Options:
    """Backend options for init_process_group("flagos", pg_options=Options(...)).

    tier: "flagcx", "nccl" or "gloo" to require one (default: the first usable tier, or
    FLAGOS_COMM_TIER). host_staged: force host staging on the gloo tier (default: staged on
    device accelerators, zero-copy on the cpu accelerator; FLAGOS_COMM_HOST_STAGED=1 forces it).
    """

    tier: str | None = None
    host_staged: bool | None = None


@dataclass(frozen=True)
class TierChoice:
    """The outcome of tier selection for one process group."""

    tier: str
    path: str  # "zero_copy" or "host_staged"
    profile: str  # "cuda_abi" or "host"
    requested: str | None = None
    skip_reasons: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)


class TierUnavailableError(RuntimeError):
    """A requested tier cannot be built here; the message says why."""


def _build_config():
    import torch_fl

    return torch_fl.build_config


def gems_vendor() -> str:
    """GEMS_VENDOR from the environment, else the one the build implies."""
    return os.environ.get("GEMS_VENDOR") or _build_config().GEMS_VENDOR


def comm_profile() -> str:
    """'cuda_abi' for CUDA-ABI vendors (NCCL/RCCL over CUDA views), else 'host'."""
    return "cuda_abi" if gems_vendor().lower() in CUDA_ABI_VENDORS else "host"


def _requested_tier(options: Options | None) -> str | None:
    tier = options.tier if options is not None and options.tier else os.environ.get(ENV_TIER)
    source = "Options(tier=...)" if options is not None and options.tier else ENV_TIER
    if tier is None or tier.strip() == "" or tier.strip().lower() == "auto":
        return None
    tier = tier.strip().lower()
    if tier not in TIERS:
        raise ValueError(
            f"{source}={tier!r} is not a flagos comm tier; valid values: {', '.join(TIERS)} or auto"
        )
    return tier


def _flagcx_creator() -> tuple[Callable[..., object], bool]:
    """FlagCX's backend creator and whether it takes torch's extended arguments.

    Importing `flagcx` registers its c10d backend with torch.distributed (its torch plugin does
    so on import, for its vendor's device type); the registration records the creator and its
    calling convention, (store, rank, size, timeout) or (DistributedBackendOptions, options).
    """
    import torch.distributed as dist

    importlib.import_module("flagcx")
    plugin = dist.Backend._plugins.get(FLAGCX_BACKEND.upper())
    if plugin is None:
        raise RuntimeError(
            "flagcx was imported but registered no 'flagcx' c10d backend with torch.distributed "
            "(FlagCX's torch plugin is not built into this flagcx installation)"
        )
    return plugin.creator_fn, bool(plugin.extended_api)


def _flagcx_status() -> tuple[str, str | None]:
    """('available' | 'skipped' | 'unavailable', reason)."""
    try:
        spec = importlib.util.find_spec("flagcx")
    except (ImportError, ValueError) as exc:
        return "unavailable", f"flagcx is not importable ({exc})"
    if spec is None:
        return "unavailable", "flagcx is not importable (no module named 'flagcx')"
    try:
        _flagcx_creator()
    except Exception as exc:  # an installed flagcx that fails to load is reported, not raised
        return "skipped", f"flagcx at {spec.origin} is unusable: {type(exc).__name__}: {exc}"
    return "available", None


NCCL_BRIDGE = "torch_fl.comm._nccl_ext._flagos_nccl"


def torch_nccl_class() -> type | None:
    """torch.distributed.ProcessGroupNCCL, or None where the installed torch's Python lacks it."""
    import torch.distributed as dist

    if not dist.is_nccl_available():
        return None
    return getattr(dist, "ProcessGroupNCCL", None)


def nccl_bridge() -> tuple[object | None, str | None]:
    """(the NCCL bridge module, None), or (None, why this package has no usable bridge)."""
    try:
        return importlib.import_module(NCCL_BRIDGE), None
    except ImportError as exc:
        return None, (
            f"the NCCL bridge {NCCL_BRIDGE} is not usable ({exc}); it is built into cuda and "
            "dcu packages when nccl.h is found (set NCCL_INCLUDE_DIR and rebuild)"
        )


def _nccl_status(profile: str) -> tuple[str, str | None]:
    accelerator = _build_config().ACCELERATOR
    from torch_fl import _C

    if _C._native_device_type() != "cuda":
        return "unavailable", (
            f"the {accelerator} accelerator has no CUDA memory to view zero-copy; the NCCL tier "
            "needs a CUDA-ABI build (FLAGOS_ACCELERATOR=cuda or dcu)"
        )
    if profile != "cuda_abi":
        return "skipped", (
            f"GEMS_VENDOR={gems_vendor()!r} selects the '{profile}' comm profile; the NCCL tier "
            f"belongs to the CUDA-ABI profile (GEMS_VENDOR in {CUDA_ABI_VENDORS})"
        )
    if torch_nccl_class() is None:
        bridge, why_not = nccl_bridge()
        if bridge is None:
            return "skipped", (
                f"torch.distributed.ProcessGroupNCCL is absent from the installed torch "
                f"{torch.__version__}, and {why_not}"
            )
    if not torch.cuda.is_available():
        return "skipped", "torch.cuda.is_available() is False: no CUDA device is visible"
    return "available", None


def _gloo_status() -> tuple[str, str | None]:
    import torch.distributed as dist

    if not dist.is_gloo_available() or not hasattr(dist, "ProcessGroupGloo"):
        return "unavailable", f"the installed torch {torch.__version__} was built without gloo"
    return "available", None


def _gloo_path(options: Options | None) -> str:
    from torch_fl import _C

    if options is not None and options.host_staged is not None:
        staged = options.host_staged
    else:
        staged = flag(os.environ, ENV_HOST_STAGED) or _C._native_device_type() != "cpu"
    if not staged and _C._native_device_type() != "cpu":
        raise TierUnavailableError(
            "the gloo tier takes flagos tensors zero-copy only on the cpu accelerator; on the "
            f"{_build_config().ACCELERATOR} accelerator it is host-staged"
        )
    return "host_staged" if staged else "zero_copy"


def choose_tier(options: Options | None = None) -> TierChoice:
    """Picks the tier for a new group, recording why the tiers above it were not used."""
    requested = _requested_tier(options)
    profile = comm_profile()
    statuses = {
        "flagcx": _flagcx_status(),
        "nccl": _nccl_status(profile),
        "gloo": _gloo_status(),
    }
    skip_reasons: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    for tier in TIERS:
        state, reason = statuses[tier]
        if requested is not None and tier != requested:
            if TIERS.index(tier) < TIERS.index(requested):
                skip_reasons[tier] = f"{ENV_TIER} / Options requested the {requested} tier"
            continue
        if state == "available":
            path = _gloo_path(options) if tier == "gloo" else "zero_copy"
            return TierChoice(tier, path, profile, requested, skip_reasons, unavailable)
        if requested is not None:
            raise TierUnavailableError(
                f"the flagos comm tier '{requested}' was requested but is unavailable: {reason}"
            )
        (skip_reasons if state == "skipped" else unavailable)[tier] = reason or ""
    reasons = "; ".join(f"{t}: {r}" for t, r in {**skip_reasons, **unavailable}.items())
    raise TierUnavailableError(f"no flagos comm tier is usable here ({reasons})")


def _make_inner(tier: str, dist_opts) -> object:
    import torch.distributed as dist

    if tier == "flagcx":
        creator, extended = _flagcx_creator()
        if extended:
            # As torch calls an extended-API backend; FlagCX's own options stay at its defaults.
            return creator(dist_opts, None)
        return creator(
            dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout
        )
    if tier == "nccl":
        nccl_class = torch_nccl_class()
        if nccl_class is not None:
            options = nccl_class.Options()
            options.is_high_priority_stream = False
            options._timeout = dist_opts.timeout
            options.global_ranks_in_group = dist_opts.global_ranks_in_group
            options.group_name = dist_opts.group_id
            inner = nccl_class(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, options)
        else:
            bridge, why_not = nccl_bridge()
            if bridge is None:
                raise TierUnavailableError(why_not)
            inner = bridge.create_backend(
                dist_opts.store,
                dist_opts.group_rank,
                dist_opts.group_size,
                dist_opts.timeout,
                dist_opts.group_id,
                list(dist_opts.global_ranks_in_group),
            )
    else:
        inner = dist.ProcessGroupGloo(
            dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout
        )
        inner.options.global_ranks_in_group = dist_opts.global_ranks_in_group
        inner.options.group_name = dist_opts.group_id
    # torch numbers the collectives of its own gloo and NCCL groups (debugging, flight
    # recorder); other backends need not support it.
    inner._set_sequence_number_for_group()
    return inner


def create_backend(dist_opts, backend_options=None):
    """The creator registered with torch.distributed (extended API)."""
    from torch_fl import _C

    if backend_options is not None and not isinstance(backend_options, Options):
        raise TypeError(
            "init_process_group('flagos', pg_options=...) takes torch_fl.comm.Options, got "
            f"{type(backend_options).__name__}"
        )
    from torch_fl.vendor.dcu import warn_multicard_fine_grain

    warn_multicard_fine_grain(dist_opts.group_size)
    choice = choose_tier(backend_options)
    inner = _make_inner(choice.tier, dist_opts)
    backend = _C._comm_init().ProcessGroupFlagOS(inner, choice.tier, choice.path)
    backend._set_selection(
        choice.profile, choice.skip_reasons, choice.unavailable, choice.requested or ""
    )
    backend._set_group(dist_opts.store, list(dist_opts.global_ranks_in_group), dist_opts.timeout)
    return backend


def create_split_part(
    tier: str,
    path: str,
    profile: str,
    skip_reasons: dict[str, str],
    unavailable: dict[str, str],
    requested: str,
    store,
    group_rank: int,
    group_size: int,
    timeout,
    group_name: str,
    global_ranks: list[int],
):
    """This rank's part of a split flagos group (ProcessGroupFlagOS::split calls it): a new
    group over the part's ranks with the parent's tier and tensor path, built as new_group
    builds one."""
    import torch.distributed as dist

    from torch_fl import _C

    dist_opts = dist.distributed_c10d._DistributedBackendOptions()
    dist_opts.store = store
    dist_opts.group_rank = group_rank
    dist_opts.group_size = group_size
    dist_opts.timeout = timeout
    dist_opts.group_id = group_name
    dist_opts.global_ranks_in_group = global_ranks
    backend = _C._comm_init().ProcessGroupFlagOS(_make_inner(tier, dist_opts), tier, path)
    backend._set_selection(profile, skip_reasons, unavailable, requested)
    backend._set_group(store, global_ranks, timeout)
    return backend


def register() -> None:
    """Registers the `flagos` backend for the `flagos` device with torch.distributed."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    if "flagos" in dist.Backend.backend_list and "FLAGOS" in dist.Backend._plugins:
        return
    dist.Backend.register_backend("flagos", create_backend, extended_api=True, devices=["flagos"])


def backend_of(group=None):
    """The ProcessGroupFlagOS serving flagos tensors in `group` (default: the default group)."""
    import torch.distributed as dist

    from torch_fl import _C

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("flagos"))
    cls = _C._comm_init().ProcessGroupFlagOS
    if not isinstance(backend, cls):
        raise RuntimeError(
            f"the group's backend for flagos tensors is {type(backend).__name__}, not "
            "ProcessGroupFlagOS; initialise it with backend='flagos' or 'cpu:gloo,flagos:flagos'"
        )
    return backend


def tier_info(group=None) -> TierChoice:
    """The tier, tensor path, comm profile and skip/unavailable reasons of a group."""
    backend = backend_of(group)
    return TierChoice(
        tier=backend.tier,
        path=backend.path,
        profile=backend.profile,
        requested=backend.requested,
        skip_reasons=dict(backend.skip_reasons),
        unavailable=dict(backend.unavailable),
    )
