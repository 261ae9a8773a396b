"""The `flagos` c10d backend in one process: tier selection and its reasons, the ways a group is
initialised, work handles, and the errors for bad arguments. Multi-process behaviour (every
collective, DDP, a peer that leaves) is in test_comm_multiprocess.py and
tests/manual/test_flagos_dist_live.py."""

from __future__ import annotations

import gc
import importlib.util
import inspect
import sys
import weakref
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import torch_fl
from torch_fl import comm

CPU_ACCELERATOR = torch_fl.build_config.ACCELERATOR == "cpu"
# torch 2.13's dist.split_group asks the parent group for the current accelerator's backend;
# older ones (2.11) ask for the cuda backend whatever the device, which a flagos group lacks.
SPLIT_GROUP_TAKES_FLAGOS = "current_accelerator" in inspect.getsource(dist.split_group)
needs_split_group_for_flagos = pytest.mark.skipif(
    not SPLIT_GROUP_TAKES_FLAGOS,
    reason="this torch's dist.split_group looks for a cuda backend only (no flagos splitting)",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in (comm.ENV_TIER, comm.ENV_HOST_STAGED, "GEMS_VENDOR"):
        monkeypatch.delenv(name, raising=False)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def _init(backend="flagos", **kwargs):
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **kwargs)


# ---- tier selection ---------------------------------------------------------------------------


def test_unknown_tier_value_is_an_error_listing_the_choices(monkeypatch) -> None:
    monkeypatch.setenv(comm.ENV_TIER, "mpi")
    with pytest.raises(ValueError, match="flagcx, nccl, gloo or auto"):
        comm.choose_tier()


@pytest.mark.parametrize("requested", [None, "gloo"])
def test_tier_info_reports_the_requested_tier(monkeypatch, requested) -> None:
    if requested is not None:
        monkeypatch.setenv(comm.ENV_TIER, requested)
    _init()
    info = comm.tier_info()
    assert info.requested == requested == comm.choose_tier().requested
    if requested is not None:
        assert info.tier == requested


@pytest.mark.parametrize(("value", "host_staged"), [("1", True), ("off", False), ("", False)])
def test_host_staged_switch_reads_booleans_and_refuses_others(monkeypatch, value, host_staged):
    monkeypatch.setenv(comm.ENV_TIER, "gloo")  # the tier that reads it
    monkeypatch.setenv(comm.ENV_HOST_STAGED, value)
    if CPU_ACCELERATOR:  # the gloo tier (device accelerators stage or use NCCL regardless)
        assert (comm.choose_tier().path == "host_staged") == host_staged
    monkeypatch.setenv(comm.ENV_HOST_STAGED, "bogus")
    with pytest.raises(ValueError, match="FLAGOS_COMM_HOST_STAGED='bogus' is not a boolean"):
        comm.choose_tier()


@pytest.mark.skipif(not CPU_ACCELERATOR, reason="NCCL is available on device accelerators")
def test_requesting_nccl_on_the_cpu_accelerator_says_why_it_is_unavailable(monkeypatch) -> None:
    monkeypatch.setenv(comm.ENV_TIER, "nccl")
    with pytest.raises(comm.TierUnavailableError, match="'nccl' was requested.*no CUDA memory"):
        _init()
    assert not dist.is_initialized()


def test_requesting_flagcx_without_flagcx_says_it_is_not_importable(monkeypatch) -> None:
    if importlib.util.find_spec("flagcx") is not None:
        pytest.skip("flagcx is installed here")
    with pytest.raises(comm.TierUnavailableError, match="'flagcx' was requested.*not importable"):
        comm.choose_tier(comm.Options(tier="flagcx"))


FAKE_FLAGCX_ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "fake_flagcx"


@pytest.fixture
def fake_flagcx(monkeypatch):
    """make(mode, extended): an importable `flagcx` that registers its backend like FlagCX's
    torch plugin ('registers'), registers nothing ('bare') or fails to import ('broken')."""
    monkeypatch.syspath_prepend(str(FAKE_FLAGCX_ROOT))

    def make(mode: str = "registers", extended: bool = True) -> None:
        monkeypatch.setenv("FAKE_FLAGCX_MODE", mode)
        monkeypatch.setenv("FAKE_FLAGCX_EXTENDED", "1" if extended else "0")
        sys.modules.pop("flagcx", None)
        importlib.invalidate_caches()

    yield make
    sys.modules.pop("flagcx", None)
    if "FLAGCX" in dist.Backend._plugins:  # undo the fake's registration
        del dist.Backend._plugins["FLAGCX"]
        dist.Backend.backend_list.remove("flagcx")
        dist.Backend.backend_capability.pop("flagcx", None)
        dist.Backend.backend_type_map.pop("flagcx", None)
        delattr(dist.Backend, "FLAGCX")


@pytest.mark.parametrize("extended", [True, False], ids=["extended_api", "plain_api"])
def test_an_importable_flagcx_is_the_first_tier_and_carries_the_collectives(
    fake_flagcx, extended
) -> None:
    fake_flagcx("registers", extended)
    choice = comm.choose_tier()
    assert (choice.tier, choice.path) == ("flagcx", "zero_copy")
    assert choice.skip_reasons == {} and "flagcx" not in choice.unavailable
    _init()
    info = comm.tier_info()
    assert (info.tier, info.path) == ("flagcx", "zero_copy")
    (call,) = sys.modules["flagcx"].CALLS
    if extended:  # torch's extended convention: (DistributedBackendOptions, options)
        assert (call[0].group_rank, call[0].group_size, call[1]) == (0, 1, None)
    else:  # (store, rank, size, timeout)
        assert call[1:3] == (0, 1)
    t = torch.arange(6.0, device="flagos")
    dist.all_reduce(t, op=dist.ReduceOp.AVG)  # AVG is SUM then a division off NCCL
    torch.testing.assert_close(t.cpu(), torch.arange(6.0))
    assert t.device.type == "flagos"


def test_a_flagcx_without_its_backend_is_skipped_with_the_reason(fake_flagcx) -> None:
    fake_flagcx("bare")
    choice = comm.choose_tier()
    assert choice.tier != "flagcx"
    assert "registered no 'flagcx' c10d backend" in choice.skip_reasons["flagcx"]
    with pytest.raises(comm.TierUnavailableError, match="'flagcx' was requested.*registered no"):
        comm.choose_tier(comm.Options(tier="flagcx"))


def test_a_flagcx_that_fails_to_import_is_skipped_with_its_error(fake_flagcx) -> None:
    fake_flagcx("broken")
    choice = comm.choose_tier()
    assert choice.tier != "flagcx"
    assert "ImportError: libflagcx.so" in choice.skip_reasons["flagcx"]


def test_gems_vendor_selects_the_comm_profile(monkeypatch) -> None:
    monkeypatch.setenv("GEMS_VENDOR", "hygon")
    assert comm.comm_profile() == "cuda_abi"
    monkeypatch.setenv("GEMS_VENDOR", "nvidia")
    assert comm.comm_profile() == "cuda_abi"
    monkeypatch.setenv("GEMS_VENDOR", "ascend")
    assert comm.comm_profile() == "host"
    choice = comm.choose_tier()
    assert choice.tier == "gloo"
    assert "nccl" in {**choice.skip_reasons, **choice.unavailable}


def test_requested_gloo_records_why_the_tiers_above_were_not_tried(monkeypatch) -> None:
    monkeypatch.setenv(comm.ENV_TIER, "gloo")
    choice = comm.choose_tier()
    assert choice.tier == "gloo" and choice.requested == "gloo"
    assert set(choice.skip_reasons) == {"flagcx", "nccl"}
    assert all("requested the gloo tier" in r for r in choice.skip_reasons.values())


@pytest.mark.skipif(not CPU_ACCELERATOR, reason="zero-copy gloo is the cpu accelerator's path")
def test_host_staged_gloo_can_be_forced_and_works(monkeypatch) -> None:
    monkeypatch.setenv(comm.ENV_HOST_STAGED, "1")
    _init()
    assert comm.tier_info().path == "host_staged"
    t = torch.arange(8.0, device="flagos")
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    torch.testing.assert_close(t.cpu(), torch.arange(8.0))


def test_pg_options_must_be_flagos_options() -> None:
    with pytest.raises(TypeError, match="torch_fl.comm.Options"):
        _init(pg_options=object())


# ---- ways to initialise a group ---------------------------------------------------------------


def test_init_with_device_id_alone_picks_the_flagos_backend() -> None:
    _init(backend=None, device_id=torch.device("flagos", 0))
    assert dist.get_backend() == "flagos"
    t = torch.ones(3, device="flagos")
    dist.all_reduce(t)
    dist.barrier()
    assert t.device == torch.device("flagos", 0)


def test_cpu_gloo_and_flagos_flagos_serve_both_devices() -> None:
    _init(backend="cpu:gloo,flagos:flagos")
    f = torch.ones(3, device="flagos")
    c = torch.ones(3)
    dist.all_reduce(f)
    dist.all_reduce(c)
    assert f.device.type == "flagos" and c.device.type == "cpu"
    assert comm.tier_info().tier in comm.TIERS


@needs_split_group_for_flagos
@pytest.mark.parametrize("host_staged", [False, True])
def test_a_device_bound_group_splits_into_groups_of_its_tier_and_path(host_staged) -> None:
    # init_process_group(device_id=) makes torch split the default group for split_group and
    # for a DeviceMesh of two or more dimensions; a part keeps its parent's tier and path.
    import copy
    from datetime import timedelta

    options = comm.Options(tier="gloo", host_staged=True) if host_staged else None
    _init(device_id=torch.device("flagos", 0), pg_options=options, timeout=timedelta(seconds=77))
    backend = comm.backend_of()
    assert backend.supports_splitting
    copied = copy.deepcopy(backend.options)  # what split_group does with them
    assert copied is not backend.options and copied._timeout == timedelta(seconds=77)
    part = dist.split_group(split_ranks=[[0]], timeout=timedelta(seconds=55))
    assert comm.tier_info(part) == comm.tier_info()
    assert comm.backend_of(part) is not backend
    assert comm.backend_of(part).options._timeout == timedelta(seconds=55)
    ref = torch.arange(6.0).reshape(2, 3)
    t = ref.to("flagos")
    dist.all_reduce(t, group=part, op=dist.ReduceOp.AVG)
    torch.testing.assert_close(t.cpu(), ref)


@needs_split_group_for_flagos
def test_a_split_naming_a_rank_outside_the_group_is_refused() -> None:
    _init(device_id=torch.device("flagos", 0))
    with pytest.raises(RuntimeError, match="cannot split rank 1 off a group of 1 ranks"):
        dist.split_group(split_ranks=[[1]])


def test_a_group_without_the_flagos_backend_is_reported() -> None:
    _init(backend="gloo")
    with pytest.raises(RuntimeError):
        comm.tier_info()


# ---- work handles -----------------------------------------------------------------------------


def test_work_reports_flagos_results_and_a_flagos_future() -> None:
    _init()
    t = torch.full((4,), 3.0, device="flagos")
    work = dist.all_reduce(t, async_op=True)
    # Its own registered type (a dist.Work), so pybind11 finds it at the first lookup.
    assert isinstance(work, dist.Work) and type(work).__name__ == "FlagOSWork"
    assert work.wait()
    torch.flagos.synchronize()  # on a GPU wait() only orders the stream
    assert work.is_completed()
    try:
        assert work.exception() is None
    except TypeError as error:  # torch 2.11's Work.exception binding cannot convert its result
        assert "exception_ptr" in str(error)
    (result,) = work.result()
    assert result.device.type == "flagos" and result.data_ptr() == t.data_ptr()
    fut = dist.all_reduce(t, async_op=True).get_future()
    (value,) = fut.wait()
    assert value.device.type == "flagos" and value.data_ptr() == t.data_ptr()


@pytest.mark.parametrize("op", ["all_reduce", "broadcast", "all_gather_into_tensor"])
def test_a_work_reports_the_callers_tensor_and_its_memory_after_the_caller_drops_it(op) -> None:
    # A zero-copy work holds its results weakly (its aliases hold the memory): while the
    # caller's tensor lives, result() is that very tensor; once dropped, a flagos tensor over
    # the same memory, which the work keeps until it is destroyed.
    _init()
    # From the pool (an operator's result may be memory the kernel allocated, never reused).
    t = torch.empty(8, device="flagos").copy_(torch.arange(8.0))
    if op == "all_gather_into_tensor":
        work = dist.all_gather_into_tensor(t, torch.arange(8.0, device="flagos"), async_op=True)
    else:
        work = getattr(dist, op)(t, async_op=True, **({"src": 0} if op == "broadcast" else {}))
    work.wait()
    torch.flagos.synchronize()
    assert work.result()[0] is t
    ptr = t.data_ptr()
    caller = weakref.ref(t)
    del t
    gc.collect()
    assert caller() is None  # the work did not pin the caller's tensor (nor its Python object)
    # ... but it still holds the memory: no new tensor of that size is given it. (Counted bytes
    # would not say so on cuda, where NCCL's watchdog frees its own tensors at any moment.)
    others = [torch.empty(8, device="flagos") for _ in range(4)]
    assert ptr not in {o.data_ptr() for o in others}
    (result,) = work.result()
    assert result.device.type == "flagos" and result.data_ptr() == ptr
    torch.testing.assert_close(result.cpu(), torch.arange(8.0))
    (value,) = work.get_future().wait()
    assert value.data_ptr() == ptr
    allocated = torch.flagos.memory_allocated()
    del result, value, work
    gc.collect()
    assert torch.flagos.memory_allocated() < allocated


def test_successive_calls_of_other_shapes_and_dtypes_keep_no_memory_alive() -> None:
    # A finished work hands its native aliases back for reuse by the next call; a reused alias
    # must describe its new tensor (shape, dtype: an int64 call sits between float ones), and
    # none may keep freed flagos memory alive. PREMUL_SUM scales, so the values show it.
    _init()
    torch.flagos.synchronize()
    baseline = torch.flagos.memory_allocated()
    triple = dist._make_nccl_premul_sum(3.0)
    cases = [
        ((3, 5), torch.float32, triple, 3),
        ((2, 2, 2), torch.int64, dist.ReduceOp.SUM, 1),
        ((7,), torch.float64, triple, 3),
        ((1,), torch.float32, triple, 3),
    ]
    for round_ in range(3):
        for shape, dtype, op, factor in cases:
            ref = torch.arange(int(torch.tensor(shape).prod()), dtype=dtype).reshape(shape) + round_
            t = ref.to("flagos")
            dist.all_reduce(t, op=op)
            torch.testing.assert_close(t.cpu(), ref * factor)
            del t
    torch.flagos.synchronize()
    assert torch.flagos.memory_allocated() == baseline


def test_a_finished_work_hands_its_aliases_to_the_next_operator_call() -> None:
    # Around torch's FakeProcessGroup (it keeps nothing) the work is the aliases' last holder,
    # so they go to this thread's pool; the next routed operator re-points one: it must describe
    # its new tensor (another dtype and shape), and the pooled alias keeps no memory alive.
    from torch._C._distributed_c10d import FakeProcessGroup

    fake = FakeProcessGroup._create_internal(0, 1)
    backend = torch_fl._C._comm_init().ProcessGroupFlagOS(fake, "gloo", "zero_copy")
    torch.flagos.synchronize()
    baseline = torch.flagos.memory_allocated()
    ints = torch.arange(6).to("flagos")
    backend.allreduce([ints], dist.AllreduceOptions()).wait()
    del ints
    ref = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    torch.testing.assert_close((ref.to("flagos") * 3).cpu(), ref * 3)
    torch.flagos.synchronize()
    assert torch.flagos.memory_allocated() == baseline


# ---- argument errors --------------------------------------------------------------------------


def test_non_contiguous_tensor_is_rejected_with_its_strides() -> None:
    _init()
    t = torch.ones(4, 4, device="flagos").t()[:, :2]
    with pytest.raises(RuntimeError, match="not contiguous.*contiguous\\(\\)"):
        dist.all_reduce(t)


def test_output_dtype_must_match_the_input() -> None:
    _init()
    out = torch.empty(4, dtype=torch.float16, device="flagos")
    with pytest.raises(RuntimeError, match="dtype Half but the input has dtype Float"):
        dist.all_gather_into_tensor(out, torch.ones(4, device="flagos"))


def test_output_size_must_be_world_size_times_the_input() -> None:
    _init()
    out = torch.empty(5, device="flagos")
    with pytest.raises(RuntimeError, match="5 elements, expected 4"):
        dist.all_gather_into_tensor(out, torch.ones(4, device="flagos"))


@pytest.mark.parametrize("host_staged", [False, True])
def test_premul_sum_of_an_integer_tensor_is_refused_and_leaves_it_unchanged(
    monkeypatch, host_staged
) -> None:
    # NCCL refuses PREMUL_SUM on integers; the tiers that emulate it (gloo, FlagCX) say the same
    # instead of failing half-way through a cast.
    monkeypatch.setenv(comm.ENV_TIER, "gloo")
    if host_staged:
        monkeypatch.setenv(comm.ENV_HOST_STAGED, "1")
    _init()
    t = torch.arange(6, dtype=torch.int64, device="flagos")
    with pytest.raises(TypeError, match="PREMUL_SUM takes floating-point tensors.*got Long"):
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
    torch.testing.assert_close(t.cpu(), torch.arange(6))
    h = torch.arange(6, dtype=torch.float16, device="flagos")
    dist.all_reduce(h, op=dist._make_nccl_premul_sum(2.0))
    torch.testing.assert_close(h.cpu(), torch.arange(6, dtype=torch.float16) * 2)


@pytest.mark.parametrize("host_staged", [False, True])
def test_avg_of_a_bool_tensor_is_refused_before_anything_runs(monkeypatch, host_staged) -> None:
    # As NCCL's: the emulated AVG (SUM, then a division) would have changed the tensor before
    # failing to divide it in place.
    monkeypatch.setenv(comm.ENV_TIER, "gloo")
    if host_staged:
        monkeypatch.setenv(comm.ENV_HOST_STAGED, "1")
    _init()
    t = torch.tensor([True, False, True], device="flagos")
    with pytest.raises(TypeError, match="Cannot use ReduceOp.AVG with boolean inputs"):
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.equal(t.cpu(), torch.tensor([True, False, True]))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # other operators still take bool
    assert torch.equal(t.cpu(), torch.tensor([True, False, True]))


@pytest.mark.skipif(torch_fl.flagos.device_count() < 2, reason="needs two flagos devices")
def test_tensor_on_another_device_than_the_bound_one_is_rejected() -> None:
    _init(device_id=torch.device("flagos", 0))
    with pytest.raises(RuntimeError, match="is on flagos:1 but this rank was bound to flagos:0"):
        dist.all_reduce(torch.ones(2, device="flagos:1"))


@pytest.mark.skipif(torch_fl.flagos.device_count() < 2, reason="needs two flagos devices")
def test_tensors_of_one_call_on_two_devices_are_rejected() -> None:
    _init()
    outs = [torch.empty(2, device="flagos:0")]
    with pytest.raises(RuntimeError, match="all tensors must be on it"):
        dist.all_gather(outs, torch.ones(2, device="flagos:1"))


def test_cpu_tensor_in_a_flagos_only_group_is_an_error_not_a_hang() -> None:
    _init()
    with pytest.raises(RuntimeError, match="cpu"):
        dist.all_reduce(torch.ones(2))


def test_polling_is_completed_finishes_host_staged_outputs(monkeypatch) -> None:
    import time

    monkeypatch.setenv(comm.ENV_HOST_STAGED, "1")  # device accelerators stage on gloo anyway
    _init(pg_options=comm.Options(tier="gloo"))
    assert comm.tier_info().path == "host_staged"
    src = torch.arange(1.0, 5.0, device="flagos")
    out = torch.zeros(4, device="flagos")
    work = dist.all_gather_into_tensor(out, src, async_op=True)
    deadline = time.monotonic() + 30
    while not work.is_completed():
        assert time.monotonic() < deadline, "work never completed"
        time.sleep(0.001)
    torch.testing.assert_close(out.cpu(), torch.arange(1.0, 5.0))


# ---- the device a rank runs on ---------------------------------------------------------------

_MESH_SCRIPT = """
import os, sys, torch, torch.distributed as dist, torch_fl
from torch.distributed.device_mesh import init_device_mesh
assert not torch.flagos.is_initialized(), "importing torch_fl used no device"
if sys.argv[1] == "used":
    torch.ones(1, device="flagos")  # the process chose flagos:0 before the mesh
    assert torch.flagos.is_initialized()
dist.init_process_group("flagos", store=dist.HashStore(), rank=0, world_size=1)
init_device_mesh("flagos", (1,))
print("DEVICE", torch.flagos.current_device())
dist.destroy_process_group()
"""


@pytest.mark.skipif(torch.flagos.device_count() < 2, reason="needs two flagos devices")
@pytest.mark.parametrize(("state", "expected"), [("fresh", 1), ("used", 0)])
def test_device_mesh_puts_a_fresh_rank_on_its_local_rank_device(state: str, expected: int) -> None:
    # As for CUDA under torchrun: DeviceMesh sets LOCAL_RANK's device in a process that has not
    # used the device yet (torch.flagos.is_initialized() False) and keeps the user's otherwise.
    import os
    import subprocess

    env = dict(os.environ, LOCAL_RANK="1")
    result = subprocess.run(
        [sys.executable, "-c", _MESH_SCRIPT, state],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"DEVICE {expected}" in result.stdout, result.stdout + result.stderr[-2000:]
