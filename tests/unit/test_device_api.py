"""The torch.flagos module API and torch.accelerator reporting flagos."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import torch_fl
from tests.conftest import report_from_forked_child, run_python

F = torch.flagos


def test_module_is_registered_as_torch_flagos() -> None:
    assert F is torch_fl.flagos
    assert torch._C._get_privateuse1_backend_name() == "flagos"
    assert torch.device("flagos").type == "flagos"


def test_is_available_and_device_count() -> None:
    assert F.is_available() is True
    count = F.device_count()
    assert isinstance(count, int) and count >= 1
    if torch_fl.build_config.ACCELERATOR == "cpu":
        import os

        assert count == int(os.environ.get("FLAGOS_CPU_DEVICE_COUNT") or 2)
    F.init()  # marks the device in use, as torch.cuda.init does
    assert F.is_initialized()


def test_torch_accelerator_reports_flagos() -> None:
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("flagos")
    assert torch.accelerator.current_accelerator().type == "flagos"
    assert torch.accelerator.device_count() == F.device_count()
    assert torch.accelerator.current_device_index() == F.current_device()


def test_tensor_and_module_methods_generated() -> None:
    t = torch.ones(2)
    moved = t.flagos()
    assert moved.is_flagos and moved.device == torch.device("flagos", 0)
    assert not t.is_flagos
    module = torch.nn.Linear(2, 2).flagos()
    assert all(p.is_flagos for p in module.parameters())


@pytest.mark.usefixtures("two_devices")
def test_set_device_and_current_device() -> None:
    assert F.current_device() == 0
    F.set_device(1)
    assert F.current_device() == 1
    assert torch.accelerator.current_device_index() == 1
    assert torch.empty(1, device="flagos").device.index == 1
    F.set_device("flagos:0")
    assert F.current_device() == 0
    F.set_device(torch.device("flagos", 1))
    assert F.current_device() == 1
    torch.accelerator.set_device_index(0)
    assert F.current_device() == 0


@pytest.mark.usefixtures("two_devices")
def test_device_context_manager_forms() -> None:
    for spec in (1, "flagos:1", torch.device("flagos", 1)):
        with F.device(spec):
            assert F.current_device() == 1
        assert F.current_device() == 0
    t1 = torch.ones(1, device="flagos:1")
    with F.device_of(t1):
        assert F.current_device() == 1
    assert F.current_device() == 0
    with F.device_of(torch.ones(1)):  # a CPU tensor leaves the device alone
        assert F.current_device() == 0
    with F.device(None):
        assert F.current_device() == 0


def test_device_arguments_reject_other_device_types() -> None:
    with pytest.raises(ValueError, match="flagos"):
        F.set_device("cpu")
    with pytest.raises(ValueError, match="flagos"):
        F.device(torch.device("cpu"))
    with pytest.raises(TypeError):
        F.set_device(1.5)


@pytest.mark.parametrize("device", ["flagos", torch.device("flagos"), None])
def test_set_device_needs_a_device_index_as_torch_cuda_does(device) -> None:
    # torch.cuda.set_device("cuda") (or None) is refused: naming no index chooses no device.
    before = F.current_device()
    with pytest.raises(ValueError, match="specified index"):
        F.set_device(device)
    assert F.current_device() == before


def test_invalid_index_errors_name_the_range() -> None:
    bad = F.device_count()
    message = rf"Invalid device flagos:{bad}.*flagos:0 to flagos:{bad - 1}"
    for call in (
        lambda: F.set_device(bad),
        lambda: F.synchronize(bad),
        lambda: F.get_device_properties(bad),
        lambda: F.get_device_name(bad),
        lambda: F.get_device_capability(bad),
        lambda: F.current_stream(bad),
        lambda: F.get_rng_state(bad),
        lambda: F.Stream(bad),
    ):
        with pytest.raises((IndexError, RuntimeError), match=message):
            call()
    assert F.current_device() == 0


def test_indices_past_eight_bits_are_refused_not_wrapped() -> None:
    # c10::DeviceIndex has 8 bits: unchecked, 257 would name flagos:1 and 256 flagos:0.
    calls = (
        lambda bad: F.set_device(bad),
        lambda bad: F.synchronize(bad),
        lambda bad: F.memory_allocated(bad),
        lambda bad: F.get_rng_state(bad),
        lambda bad: F.get_device_properties(bad),
        lambda bad: F.Stream(bad),
        lambda bad: F.set_per_process_memory_fraction(0.5, bad),
        lambda bad: F.caching_allocator_alloc(8, bad),
    )
    for bad in (256, 257, 128, 1 << 40):
        for call in calls:
            with pytest.raises(IndexError, match=f"Invalid device flagos:{bad}"):
                call(bad)
    assert F.current_device() == 0
    assert F.get_per_process_memory_fraction(F.device_count() - 1) == 1.0


def test_negative_indices_follow_torch_cuda() -> None:
    cpu_index = torch.ones(1).get_device()  # -1, what a CPU tensor reports
    # Where torch.cuda asks for a real device, -1 is refused rather than read as the current one.
    for call in (
        lambda: F.get_device_properties(cpu_index),
        lambda: F.get_device_name(cpu_index),
        lambda: F.get_rng_state(cpu_index),
        lambda: F.set_rng_state(F.get_rng_state(0), cpu_index),
        lambda: F.set_per_process_memory_fraction(0.25, cpu_index),
        lambda: F.get_per_process_memory_fraction(cpu_index),
        lambda: F.can_device_access_peer(cpu_index, 0),
        lambda: F.memory_allocated(cpu_index),
    ):
        with pytest.raises((IndexError, RuntimeError), match="Invalid device"):
            call()
    assert F.get_per_process_memory_fraction(0) == 1.0
    # Other negative indices are refused everywhere but set_device and device(), which ignore
    # them as torch.cuda's do; -1 names the current device where torch.cuda's C++ takes it.
    for call in (lambda: F.current_stream(-2), lambda: F.synchronize(-2), lambda: F.Stream(-2)):
        with pytest.raises(IndexError, match="Invalid device flagos:-2"):
            call()
    last = F.device_count() - 1
    F.set_device(last)
    try:
        F.set_device(-3)
        with F.device(-2):
            assert F.current_device() == last
        assert F.current_stream(-1).device_index == last
        assert F.Stream(-1).device_index == last
        F.synchronize(-1)
    finally:
        F.set_device(0)


def test_default_generators_are_the_same_objects() -> None:
    # As torch.cuda.default_generators: one Python object per device, every time.
    last = F.device_count() - 1
    assert F.default_generators[0] is F.default_generators[0]
    assert F.default_generators[last] is F.default_generator(last)
    assert F.default_generator("flagos:0") is F.default_generator(torch.device("flagos", 0))


def test_sync_debug_mode_takes_torch_cudas_values() -> None:
    for mode, number in (("warn", 1), (2, 2), ("default", 0), (1, 1), (0, 0)):
        F.set_sync_debug_mode(mode)
        assert F.get_sync_debug_mode() == number
    with pytest.raises(RuntimeError, match="expected one of `default`, `warn`, `error`"):
        F.set_sync_debug_mode("loud")
    assert F.get_sync_debug_mode() == 0


def test_synchronize_forms() -> None:
    t = torch.ones(1000, device="flagos") * 2
    F.synchronize()
    F.synchronize(0)
    F.synchronize("flagos:0")
    F.synchronize(torch.device("flagos", 0))
    torch.accelerator.synchronize()
    assert float(t.sum()) == 2000.0


def test_device_properties_name_capability() -> None:
    for index in range(F.device_count()):
        props = F.get_device_properties(index)
        assert isinstance(props.name, str) and props.name
        assert props.total_memory > 0
        assert props.multi_processor_count >= 1
        assert F.get_device_name(index) == props.name
        assert F.get_device_capability(index) == (props.major, props.minor)
        assert F.mem_get_info(index)[1] == props.total_memory

    def fields(props: object) -> tuple:  # CUDA's record (cuda accelerator) defines no ==
        return tuple(getattr(props, f) for f in CUDA_PROPERTY_FIELDS)

    assert fields(F.get_device_properties()) == fields(F.get_device_properties(F.current_device()))
    assert fields(F.get_device_properties("flagos:0")) == fields(F.get_device_properties(0))
    major, minor = F.get_device_capability()
    assert isinstance(major, int) and isinstance(minor, int)


def test_amp_dtypes_and_bf16() -> None:
    dtypes = F.get_amp_supported_dtype()
    assert torch.float16 in dtypes and torch.bfloat16 in dtypes
    assert F.is_bf16_supported() is True
    # bf16 really works on the device, as the answer claims
    x = torch.tensor([1.5, -2.25], dtype=torch.bfloat16, device="flagos")
    assert torch.equal((x * 2).cpu(), torch.tensor([3.0, -4.5], dtype=torch.bfloat16))


def test_memory_functions_exist_and_agree() -> None:
    keep = torch.empty(4096, device="flagos")
    stats = F.memory_stats()
    assert F.memory_allocated() == stats["allocated_bytes.all.current"] >= keep.nbytes
    assert F.max_memory_allocated() == stats["allocated_bytes.all.peak"]
    assert F.memory_reserved() == stats["reserved_bytes.all.current"]
    assert F.max_memory_reserved() == stats["reserved_bytes.all.peak"]
    F.reset_peak_memory_stats()
    assert F.max_memory_allocated() == F.memory_allocated()
    del keep
    F.empty_cache()
    free, total = F.mem_get_info()
    assert 0 < free <= total


def test_stream_functions_exist() -> None:
    s = F.current_stream()
    assert s.device == torch.device("flagos", 0)
    assert F.default_stream() == F.current_stream()
    new = F.Stream()
    with F.stream(new):
        assert F.current_stream() == new
    assert F.current_stream() == s


def test_rng_functions_exist() -> None:
    F.manual_seed(3)
    assert F.initial_seed() == 3
    F.manual_seed_all(4)
    assert all(F.default_generator(i).initial_seed() == 4 for i in range(F.device_count()))
    F.seed()
    state = F.get_rng_state()
    F.set_rng_state(state)
    states = F.get_rng_state_all()
    assert len(states) == F.device_count()
    F.set_rng_state_all(states)


def test_public_names_listed() -> None:
    required = """is_available device_count current_device set_device device synchronize Stream
    Event current_stream stream memory_allocated max_memory_allocated memory_reserved
    max_memory_reserved memory_stats reset_peak_memory_stats empty_cache mem_get_info
    manual_seed manual_seed_all seed initial_seed get_rng_state get_rng_state_all
    set_rng_state set_rng_state_all get_device_name get_device_properties
    get_device_capability get_amp_supported_dtype is_bf16_supported FlagOSGraph graph
    graph_pool_handle make_graphed_callables""".split()
    for name in required:
        assert callable(getattr(F, name)), name
        assert name in F.__all__, name


def test_build_record_is_exposed() -> None:
    record = torch_fl.build_config
    assert record.ACCELERATOR in ("cpu", "cuda", "dcu")
    assert record.TORCH_VERSION.split(".")[:2] == torch.__version__.split("+")[0].split(".")[:2]
    assert torch_fl._C._accelerator_name() == record.ACCELERATOR


@pytest.mark.usefixtures("two_devices")
def test_current_device_is_per_thread() -> None:
    import threading

    F.set_device(1)
    seen: dict = {}

    def worker() -> None:
        seen["start"] = F.current_device()
        F.set_device(1)
        seen["tensor"] = torch.ones(1, device="flagos").device
        F.set_device(0)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == {"start": 0, "tensor": torch.device("flagos", 1)}
    assert F.current_device() == 1  # the worker's switches stayed in the worker


def _forked_child_report(queue) -> None:  # runs in a forked child
    report = {"bad_fork": torch.flagos._is_in_bad_fork()}
    try:
        torch.manual_seed(7)  # what every DataLoader worker does
        report["seeded"] = True
        report["value"] = torch.randn(3, device="flagos").cpu().tolist()
    except RuntimeError as exc:
        report["error"] = str(exc)
    queue.put(report)


def test_a_forked_child_can_use_the_cpu_accelerator() -> None:
    if torch_fl.build_config.ACCELERATOR != "cpu":
        pytest.skip("device runtimes do not survive fork (tests/integration/test_cuda_accelerator)")
    torch.ones(2, device="flagos").sum().item()  # the device is in use before the fork
    report = report_from_forked_child(_forked_child_report)
    assert report.get("error") is None and not report["bad_fork"]
    torch.manual_seed(7)
    assert report["value"] == torch.randn(3, device="flagos").cpu().tolist()
    assert not torch.flagos._is_in_bad_fork() and torch.flagos.is_initialized()


def test_a_child_forked_while_other_threads_allocate_does_not_hang() -> None:
    # fork() copies only the forking thread; an allocator lock another thread held then would
    # stay locked in the child. Allocating threads on both devices, many forks: every child
    # must allocate and exit (before the fix about 4% hung).
    if torch_fl.build_config.ACCELERATOR != "cpu":
        pytest.skip("device runtimes do not survive fork (tests/integration/test_cuda_accelerator)")
    script = """
import faulthandler, os, threading, time
import torch, torch_fl
stop = False
def churn(index):
    while not stop:
        torch.empty(300000, dtype=torch.uint8, device=f"flagos:{index}")
        torch.empty(1000).pin_memory()
count = torch.flagos.device_count()  # 2 by default; FLAGOS_CPU_DEVICE_COUNT may set 1
threads = [threading.Thread(target=churn, args=(i % count,), daemon=True) for i in range(4)]
for t in threads:
    t.start()
time.sleep(0.2)
stuck = 0
for i in range(150):
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(5, exit=True)  # a hung child exits 1
        torch.ones(10, device=f"flagos:{i % count}")
        torch.empty(10).pin_memory()
        os._exit(0)
    stuck += os.waitpid(pid, 0)[1] != 0
stop = True
print("stuck", stuck)
"""
    result = run_python(script, timeout=600)
    assert result.returncode == 0 and "stuck 0" in result.stdout, (result.stdout, result.stderr)


def test_a_child_forked_while_other_threads_meet_new_operators_does_not_hang() -> None:
    # The router takes its lock when a thread calls an operator for the first time; a child
    # forked while another thread held it would hang at its own first new operator (before the
    # fix 2 to 3% of children did).
    if torch_fl.build_config.ACCELERATOR != "cpu":
        pytest.skip("device runtimes do not survive fork (tests/integration/test_cuda_accelerator)")
    script = """
import faulthandler, os, threading
import torch, torch_fl
stop = False
x = torch.randn(8, device="flagos")
def fresh_threads():
    def first_calls():  # a new thread knows no operator yet: each call asks the router
        # (operators without fast kernels: those keep their router entry in a static)
        for f in (torch.sin, torch.cos, torch.sign, torch.frac, torch.expm1, torch.erf):
            f(x)
    while not stop:
        threads = [threading.Thread(target=first_calls) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
spawners = [threading.Thread(target=fresh_threads) for _ in range(2)]
for t in spawners:
    t.start()
stuck = 0
for i in range(150):
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(5, exit=True)  # a hung child exits 1
        torch.floor(x), torch.ceil(x), torch.round(x)  # operators this thread never called
        os._exit(0)
    stuck += os.waitpid(pid, 0)[1] != 0
stop = True
for t in spawners:
    t.join()
print("stuck", stuck)
"""
    result = run_python(script, timeout=600)
    assert result.returncode == 0 and "stuck 0" in result.stdout, (result.stdout, result.stderr)


def test_torch_finds_the_lazy_init_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch runs torch.flagos._lazy_init before factory calls and .to() naming the device;
    # without the hook its lookup fails (an AttributeError raised and caught) on every call.
    assert torch.flagos._lazy_init() is None
    misses: list[str] = []
    original = torch.flagos.__getattr__

    def spy(name: str) -> object:
        misses.append(name)
        return original(name)

    monkeypatch.setattr(torch.flagos, "__getattr__", spy)
    x = torch.ones(2, device="flagos")
    y = x.to("flagos") + torch.full((2,), 2.0, device="flagos")
    z = torch.tensor([1.0, 2.0], device="flagos") + torch.arange(2, device="flagos")
    assert misses == []
    assert (y.cpu() == 3).all() and z.cpu().tolist() == [1.0, 3.0]


def test_memory_summary_tabulates_the_allocator_statistics() -> None:
    from torch_fl.flagos._memory import _format_bytes

    def allocated_row(text: str) -> list[str]:
        row = next(line for line in text.splitlines() if line.startswith("Allocated memory"))
        return row[len("Allocated memory") :].split()

    held = torch.empty(3 << 20, dtype=torch.uint8, device="flagos:0")
    summary = torch.flagos.memory_summary(0)
    assert "flagos:0 memory summary" in summary and "from large pool" in summary
    current = _format_bytes(torch.flagos.memory_allocated(0)).split()
    assert allocated_row(summary)[:2] == current
    peak = _format_bytes(torch.flagos.max_memory_allocated(0)).split()
    assert allocated_row(summary)[2:4] == peak
    short = torch.flagos.memory_summary("flagos:0", abbreviated=True)
    assert "from large pool" not in short and allocated_row(short)[:2] == current
    del held


def test_out_of_memory_raises_torchs_error() -> None:
    assert torch.flagos.OutOfMemoryError is torch.OutOfMemoryError
    before = torch.flagos.memory_stats(0)["num_ooms"]
    # " out of memory." as in CUDA's message: batch-size finders (accelerate's
    # find_executable_batch_size, transformers' auto_find_batch_size) look for it.
    with pytest.raises(torch.flagos.OutOfMemoryError, match=" out of memory\\. Tried"):
        # 1 PiB: more than any device has, less than the 1 EiB CUDA's pool refuses before it
        # counts an OOM.
        torch.empty(1 << 50, dtype=torch.uint8, device="flagos:0")
    assert torch.flagos.memory_stats(0)["num_ooms"] == before + 1
    with pytest.warns(FutureWarning, match="renamed to `torch.flagos.reset_peak_memory_stats`"):
        torch.flagos.reset_max_memory_allocated(0)  # the older name of reset_peak_memory_stats
    assert torch.flagos.max_memory_allocated(0) == torch.flagos.memory_allocated(0)


def test_default_generators_peer_access_and_capture_state() -> None:
    gens = torch.flagos.default_generators
    assert len(gens) == torch.flagos.device_count()
    gens[0].manual_seed(11)
    first = torch.randn(3, device="flagos:0").cpu()
    torch.flagos.manual_seed(11)
    assert torch.equal(first, torch.randn(3, device="flagos:0").cpu())
    last = torch.flagos.device_count() - 1
    if torch_fl.build_config.ACCELERATOR == "cpu":
        expected = True  # every flagos device is host memory
    else:
        expected = torch.cuda.can_device_access_peer(0, last)  # flagos:N is cuda:N
    assert torch.flagos.can_device_access_peer(0, last) is expected
    with pytest.raises(IndexError, match="Invalid device flagos:"):
        torch.flagos.can_device_access_peer(0, torch.flagos.device_count())
    assert torch.flagos.is_current_stream_capturing() is False


def test_accelerator_device_capability_lists_the_dtypes() -> None:
    if not hasattr(torch.accelerator, "get_device_capability"):
        pytest.skip("torch.accelerator has no get_device_capability")
    supported = torch.accelerator.get_device_capability("flagos:0")["supported_dtypes"]
    for dtype in (
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int64,
        torch.bool,
    ):
        assert dtype in supported
        torch.ones(2, dtype=dtype, device="flagos:0")  # and a tensor of it can be made
    with pytest.raises(IndexError, match="flagos"):
        torch.accelerator.get_device_capability(torch.flagos.device_count())


def test_per_process_memory_fraction_limits_reservations() -> None:
    assert torch.flagos.get_per_process_memory_fraction(0) == 1.0
    total = torch.flagos.mem_get_info(0)[1]
    mib = 1 << 20
    torch.flagos.empty_cache()
    # Room for 16 MiB more than is reserved now.
    fraction = (torch.flagos.memory_reserved(0) + 16 * mib) / total
    ooms = torch.flagos.memory_stats(0)["num_ooms"]
    try:
        torch.flagos.set_per_process_memory_fraction(fraction, "flagos:0")
        assert torch.flagos.get_per_process_memory_fraction(0) == pytest.approx(fraction)
        small = torch.ones(mib, dtype=torch.uint8, device="flagos:0")
        with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
            torch.empty(64 * mib, dtype=torch.uint8, device="flagos:0")
        assert torch.flagos.memory_stats(0)["num_ooms"] == ooms + 1
        # What was allocated before is intact (checked on the host: a device reduction would
        # need scratch memory past the limit).
        assert torch.equal(small.cpu(), torch.ones(mib, dtype=torch.uint8))
    finally:
        torch.flagos.set_per_process_memory_fraction(1.0, 0)
    big = torch.empty(64 * mib, dtype=torch.uint8, device="flagos:0")
    assert big.numel() == 64 * mib
    with pytest.raises(ValueError, match="0~1"):
        torch.flagos.set_per_process_memory_fraction(1.5)
    with pytest.raises(TypeError, match="float"):
        torch.flagos.set_per_process_memory_fraction(1)
    with pytest.raises(IndexError, match="flagos"):
        torch.flagos.set_per_process_memory_fraction(0.5, torch.flagos.device_count())


@pytest.mark.skipif(torch.flagos.device_count() < 2, reason="needs two flagos devices")
def test_a_retry_after_a_refusal_counts_and_frees_only_its_devices_cache() -> None:
    # As CUDA's pool: past the limit the device's cached blocks are freed and the allocation
    # tried once more (num_alloc_retries counts it); another device keeps its cache.
    mib = 1 << 20
    torch.flagos.empty_cache()
    for device in ("flagos:0", "flagos:1"):
        del_me = torch.empty(24 * mib, dtype=torch.uint8, device=device)
        del del_me  # cached
    other_reserved = torch.flagos.memory_reserved(1)
    retries = torch.flagos.memory_stats(0)["num_alloc_retries"]
    total = torch.flagos.mem_get_info(0)[1]
    try:
        torch.flagos.set_per_process_memory_fraction(40 * mib / total, 0)
        held = torch.empty(30 * mib, dtype=torch.uint8, device="flagos:0")  # needs the retry
        assert held.numel() == 30 * mib
        assert torch.flagos.memory_stats(0)["num_alloc_retries"] == retries + 1
        assert torch.flagos.memory_reserved(1) == other_reserved
        with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 64\.00 MiB") as oom:
            torch.empty(64 * mib, dtype=torch.uint8, device="flagos:0")
        assert "may reserve 40.00 MiB" in str(oom.value)
        assert "raise the fraction" in str(oom.value)
    finally:
        torch.flagos.set_per_process_memory_fraction(1.0, 0)


def _six_mib_from_a_factory() -> torch.Tensor:
    return torch.empty(6 << 20, dtype=torch.uint8, device="flagos:0")


def _six_mib_from_a_kernel() -> torch.Tensor:
    # On the cpu accelerator the CPU kernel allocates the result and flagos adopts it.
    row = torch.ones(1024, 1, device="flagos:0")
    return row * torch.ones(1536, device="flagos:0")


@pytest.mark.parametrize("allocate_six_mib", [_six_mib_from_a_factory, _six_mib_from_a_kernel])
def test_threads_allocating_at_once_stay_within_the_memory_fraction(
    allocate_six_mib: Callable[[], torch.Tensor],
) -> None:
    # The limit is checked and the memory reserved (or adopted) under one lock.
    import threading

    mib = 1 << 20
    assert allocate_six_mib().nbytes == 6 * mib
    torch.flagos.empty_cache()
    total = torch.flagos.mem_get_info(0)[1]
    limit = torch.flagos.memory_reserved(0) + 48 * mib
    torch.flagos.reset_peak_memory_stats(0)
    start = threading.Barrier(12)

    def allocate() -> None:
        for _ in range(20):
            start.wait()
            try:
                t = allocate_six_mib()
                del t
            except torch.OutOfMemoryError:
                pass
            torch.flagos.empty_cache()

    try:
        torch.flagos.set_per_process_memory_fraction(limit / total, 0)
        threads = [threading.Thread(target=allocate) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        torch.flagos.set_per_process_memory_fraction(1.0, 0)
    assert torch.flagos.max_memory_reserved(0) <= limit


def test_per_process_memory_fraction_limits_operator_results() -> None:
    # A kernel's result counts against the limit as a factory's does (on the cpu accelerator
    # the CPU kernel allocates it and flagos adopts it; there the adoption is refused).
    mib = 1 << 20
    a = torch.ones(3 * 1024, device="flagos:0")  # outer(a, a): 36 MiB of float32
    total = torch.flagos.mem_get_info(0)[1]
    torch.flagos.empty_cache()
    fraction = (torch.flagos.memory_reserved(0) + 16 * mib) / total
    ooms = torch.flagos.memory_stats(0)["num_ooms"]
    allocated = torch.flagos.memory_allocated(0)
    try:
        torch.flagos.set_per_process_memory_fraction(fraction, 0)
        small = torch.outer(a[:512], a[:512])  # 1 MiB: within the limit
        assert torch.equal(small.cpu(), torch.ones(512, 512))
        del small
        retries = torch.flagos.memory_stats(0)["num_alloc_retries"]
        with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
            torch.outer(a, a)
        assert torch.flagos.memory_stats(0)["num_ooms"] > ooms
        assert torch.flagos.memory_stats(0)["num_alloc_retries"] == retries + 1
        assert torch.flagos.memory_allocated(0) == allocated  # nothing of the refused result
        assert torch.equal(a.cpu(), torch.ones(3 * 1024))
    finally:
        torch.flagos.set_per_process_memory_fraction(1.0, 0)
    assert torch.outer(a, a).shape == (3 * 1024, 3 * 1024)


def test_older_memory_names_and_nested_statistics() -> None:
    held = torch.empty(1 << 20, dtype=torch.uint8, device="flagos:0")
    nested = torch.flagos.memory_stats_as_nested_dict(0)
    flat = torch.flagos.memory_stats(0)
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"]
    # Deprecated in torch.cuda, and here with the same FutureWarning.
    with pytest.warns(FutureWarning, match="renamed to `torch.flagos.memory_reserved`"):
        assert torch.flagos.memory_cached(0) == torch.flagos.memory_reserved(0)
    with pytest.warns(FutureWarning, match="renamed to `torch.flagos.max_memory_reserved`"):
        assert torch.flagos.max_memory_cached(0) == torch.flagos.max_memory_reserved(0)
    del held
    with pytest.warns(FutureWarning, match="reset_peak_memory_stats"):
        torch.flagos.reset_max_memory_cached(0)
    assert torch.flagos.max_memory_allocated(0) == torch.flagos.memory_allocated(0)
    host = torch.flagos.host_memory_stats_as_nested_dict()
    assert (
        host["allocated_bytes"]["current"]
        == torch.flagos.host_memory_stats()["allocated_bytes.current"]
    )


def test_device_named_amp_classes() -> None:
    # Code written for torch.cuda.amp reaches them as getattr(torch, device_type).amp.
    # Deprecated there and here in favour of torch.amp's, with the same FutureWarning.
    device_type = "flagos"
    amp = getattr(torch, device_type).amp
    a = torch.randn(4, 4, device="flagos")
    with pytest.warns(FutureWarning, match=r"torch.amp.autocast\('flagos'"):
        with amp.autocast(dtype=torch.bfloat16):
            assert (a @ a).dtype == torch.bfloat16
        with amp.autocast(enabled=False):
            assert (a @ a).dtype == torch.float32

        @amp.autocast(dtype=torch.bfloat16)
        def matmul(x: torch.Tensor) -> torch.Tensor:
            return x @ x

    assert matmul(a).dtype == torch.bfloat16
    with pytest.warns(FutureWarning, match=r"torch.amp.GradScaler\('flagos'"):
        scaler = amp.GradScaler(init_scale=4.0)
    w = torch.ones(3, device="flagos", requires_grad=True)
    opt = torch.optim.SGD([w], lr=1.0)
    scaler.scale((w * 2).sum()).backward()
    assert torch.equal(w.grad.cpu(), torch.full((3,), 8.0))  # scaled by 4
    scaler.step(opt)  # unscaled: w - 2
    scaler.update()
    assert torch.equal(w.detach().cpu(), torch.full((3,), -1.0))
    assert scaler.get_scale() == 4.0  # growth_interval 2000: unchanged


def test_device_named_custom_fwd_and_bwd() -> None:
    # torch.cuda.amp.custom_fwd's counterpart (deprecated there and here): under autocast the
    # wrapped forward casts its inputs and runs with autocast off, the backward as it ran.
    amp = torch.flagos.amp
    with pytest.warns(FutureWarning, match="torch.amp.custom_fwd"):
        fwd = amp.custom_fwd(cast_inputs=torch.float32)
    with pytest.warns(FutureWarning, match="torch.amp.custom_bwd"):

        class Square(torch.autograd.Function):
            @staticmethod
            @fwd
            def forward(ctx, x):  # noqa: ANN001, ANN205
                ctx.save_for_backward(x)
                assert not torch.is_autocast_enabled("flagos")
                return x * x

            @staticmethod
            @amp.custom_bwd
            def backward(ctx, grad):  # noqa: ANN001, ANN205
                (x,) = ctx.saved_tensors
                return 2 * x * grad

    x = torch.randn(4, device="flagos", dtype=torch.bfloat16, requires_grad=True)
    with torch.autocast("flagos", dtype=torch.bfloat16):
        y = Square.apply(x)
    assert y.dtype == torch.float32
    y.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), (2 * x.detach().float()).bfloat16().cpu())


def test_torch_cuda_submodule_names_are_there() -> None:
    assert torch.flagos.memory.list_gpu_processes is torch.flagos.list_gpu_processes
    assert torch.flagos.graphs.is_current_stream_capturing() is False


def test_submodules_import_as_torch_cuda_s_do() -> None:
    # `import torch.cuda.amp` / `.memory` / `.graphs` are real submodules; ported imports must
    # find the modules torch.flagos holds, not load second copies with other classes.
    import importlib

    for sub in ("memory", "amp", "graphs"):
        module = importlib.import_module(f"torch.flagos.{sub}")
        assert module is getattr(torch.flagos, sub)
    from torch.flagos.amp import GradScaler
    from torch.flagos.graphs import FlagOSGraph
    from torch.flagos.memory import memory_allocated

    assert GradScaler is torch.flagos.amp.GradScaler
    assert FlagOSGraph is torch.flagos.FlagOSGraph
    assert memory_allocated is torch.flagos.memory_allocated


# The fields of torch.cuda.get_device_properties (torch._C._CudaDeviceProperties).
CUDA_PROPERTY_FIELDS = (
    "name major minor multi_processor_count total_memory is_integrated is_multi_gpu_board "
    "max_threads_per_multi_processor gcnArchName warp_size uuid L2_cache_size clock_rate "
    "memory_clock_rate memory_bus_width shared_memory_per_block shared_memory_per_multiprocessor"
).split()


def test_device_properties_have_every_field_cuda_reports() -> None:
    props = torch.flagos.get_device_properties(0)
    missing = [f for f in CUDA_PROPERTY_FIELDS if not hasattr(props, f)]
    assert missing == []
    assert props.total_memory == torch.flagos.mem_get_info(0)[1]
    assert props.name == torch.flagos.get_device_name(0)


def test_float32_autocast_is_enabled_as_on_cuda() -> None:
    # torch.autocast("cuda", dtype=torch.float32) runs the fp32 policy; torch disables (with a
    # warning) autocast for a device whose supported dtypes lack the one asked for.
    import warnings

    half = torch.randn(4, 8, device="flagos", dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.autocast("flagos", dtype=torch.float32):
            assert torch.is_autocast_enabled("flagos")
            assert torch.mm(half, half.t()).dtype == torch.float32
            assert torch.softmax(half, -1).dtype == torch.float32


def test_stream_methods_take_keywords_as_torch_cuda_streams_do() -> None:
    side, other = torch.flagos.Stream(), torch.flagos.Stream()
    x = torch.ones(4, device="flagos")
    with torch.flagos.stream(other):
        y = x * 3
    side.wait_stream(stream=other)
    event = other.record_event(event=torch.flagos.Event())
    side.wait_event(event=event)
    with torch.flagos.stream(side):
        z = y + 1
    torch.flagos.synchronize()
    assert z.cpu().tolist() == [4.0] * 4


def test_oom_is_recognised_by_batch_size_finders() -> None:
    # accelerate's find_executable_batch_size (and transformers' auto_find_batch_size) halves
    # the batch on an error it recognises as out of memory.
    memory = pytest.importorskip("accelerate.utils.memory")
    torch.flagos.empty_cache()
    total = torch.flagos.mem_get_info(0)[1]
    mib = 1 << 20
    tried: list[int] = []
    # 64 MiB beyond what earlier tests still hold on the device.
    limit = torch.flagos.memory_reserved(0) + 64 * mib
    torch.flagos.set_per_process_memory_fraction(limit / total, 0)
    try:

        @memory.find_executable_batch_size(starting_batch_size=64)
        def run(batch_size: int) -> int:
            tried.append(batch_size)
            torch.empty(batch_size * 4 * mib, dtype=torch.uint8, device="flagos:0")
            return batch_size

        found = run()
    finally:
        torch.flagos.set_per_process_memory_fraction(1.0, 0)
    # It retried smaller batches until one fit under the limit (how much smaller each time is
    # accelerate's choice).
    assert tried[0] == 64 and len(tried) > 1 and found == tried[-1]
    assert found * 4 * mib <= 64 * mib and tried == sorted(tried, reverse=True)
