"""torch.flagos streams and events, and the stream context."""

from __future__ import annotations

import pytest
import torch

import torch_fl

F = torch.flagos
D0 = torch.device("flagos", 0)
ON_CPU = torch_fl.build_config.ACCELERATOR == "cpu"


def test_default_and_current_stream() -> None:
    s = F.current_stream()
    assert isinstance(s, torch.Stream)
    assert s.device == D0
    assert s == F.default_stream() == F.current_stream(0) == F.current_stream("flagos:0")
    assert torch.accelerator.current_stream() == s
    assert s.query()


def test_stream_fields_wrap_the_existing_stream() -> None:
    # As torch.cuda.Stream(stream_id=..., device_index=..., device_type=...).
    last = F.device_count() - 1
    s = F.Stream(device=last)
    same = F.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)
    assert same == s and isinstance(same, F.Stream)
    assert isinstance(F.current_stream(), F.Stream) and isinstance(F.default_stream(last), F.Stream)
    with F.stream(same):
        assert F.current_stream(last) == s == torch.accelerator.current_stream(last)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['bogus'\\]"):
        F.Stream(bogus=1)
    with pytest.raises(TypeError, match="needs all three"):
        F.Stream(stream_id=s.stream_id)
    cpu = torch.Stream(device="cpu")
    with pytest.raises(ValueError, match="cpu"):
        F.Stream(stream_id=cpu.stream_id, device_index=0, device_type=cpu.device_type)


def test_record_stream_takes_only_flagos_streams() -> None:
    t = torch.ones(4, device="flagos")
    t.record_stream(F.current_stream())
    with pytest.raises(RuntimeError, match="takes a flagos stream.*not a cpu stream"):
        t.record_stream(torch.Stream(device="cpu"))


def test_accelerator_synchronize_checks_the_index() -> None:
    torch.ones(1, device="flagos")  # torch skips the call before the device is initialised
    torch.accelerator.synchronize(F.device_count() - 1)
    if torch_fl.build_config.ACCELERATOR == "cpu":
        with pytest.raises(IndexError, match=f"flagos:{F.device_count() + 3}"):
            torch.accelerator.synchronize(F.device_count() + 3)
    else:  # CUDA's own check ("invalid device ordinal")
        with pytest.raises((IndexError, RuntimeError)):
            torch.accelerator.synchronize(F.device_count() + 3)


def test_new_streams_are_distinct_and_on_current_device() -> None:
    a, b = F.Stream(), F.Stream()
    assert isinstance(a, torch.Stream) and isinstance(a, F.Stream)
    assert a.device == D0 and b.device == D0
    assert a != b and a.stream_id != b.stream_id
    assert a != F.default_stream()
    assert torch.Stream(device="flagos").device == D0


def test_stream_context_sets_and_restores() -> None:
    default = F.current_stream()
    s = F.Stream()
    with F.stream(s) as entered:
        assert entered is s
        assert F.current_stream() == s
        assert torch.accelerator.current_stream() == s
        inner = F.Stream()
        with F.stream(inner):
            assert F.current_stream() == inner
        assert F.current_stream() == s
    assert F.current_stream() == default


def test_stream_context_none_is_a_no_op() -> None:
    before = F.current_stream()
    with F.stream(None) as entered:
        assert entered is None
        assert F.current_stream() == before
    assert F.current_stream() == before


def test_stream_context_restores_after_exception() -> None:
    before = F.current_stream()
    with pytest.raises(KeyError), F.stream(F.Stream()):
        raise KeyError("x")
    assert F.current_stream() == before


def test_set_stream() -> None:
    s = F.Stream()
    F.set_stream(s)
    assert F.current_stream() == s
    F.set_stream(F.default_stream())
    assert F.current_stream() == F.default_stream()
    F.set_stream(None)  # does nothing, as torch.cuda.set_stream(None)
    assert F.current_stream() == F.default_stream()


@pytest.mark.usefixtures("two_devices")
def test_streams_on_flagos1_and_device_switch_in_context() -> None:
    s1 = F.Stream(1)
    assert s1.device == torch.device("flagos", 1)
    assert F.Stream("flagos:1").device.index == 1
    with F.device(1):
        assert F.Stream().device.index == 1
        assert F.current_stream().device.index == 1
    with F.stream(s1):
        assert F.current_device() == 1  # the context makes the stream's device current
        assert F.current_stream(1) == s1
        assert F.current_stream(0) == F.default_stream(0)  # flagos:0 unaffected
        assert torch.zeros(1, device="flagos").device.index == 1
    assert F.current_device() == 0
    assert F.current_stream(1) == F.default_stream(1)


def test_work_on_side_stream_gives_cpu_results() -> None:
    x_cpu = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    x = x_cpu.to("flagos")
    s = F.Stream()
    start, end = F.Event(enable_timing=True), F.Event(enable_timing=True)
    with F.stream(s):
        start.record()
        y = x @ x + 1
        end.record()
    s.wait_stream(F.default_stream())
    F.current_stream().wait_stream(s)
    y.record_stream(s)
    s.synchronize()
    assert s.query()
    torch.testing.assert_close(y.cpu(), x_cpu @ x_cpu + 1)
    end.synchronize()
    assert start.elapsed_time(end) >= 0


def test_event_record_query_wait_synchronize() -> None:
    e = F.Event()
    assert isinstance(e, torch.Event)
    assert e.query()  # an unrecorded event is complete
    s = F.Stream()
    e.record(s)
    assert e.device == D0
    e.wait(F.current_stream())
    F.current_stream().wait_event(e)
    e.synchronize()
    assert e.query()
    recorded = s.record_event()
    assert isinstance(recorded, torch.Event)
    recorded.synchronize()


def test_elapsed_time_between_timed_events() -> None:
    a = F.Event(enable_timing=True)
    b = F.Event(enable_timing=True)
    a.record()
    torch.ones(1000, device="flagos").sum().item()
    b.record()
    b.synchronize()
    elapsed = a.elapsed_time(b)
    assert isinstance(elapsed, float) and elapsed >= 0
    assert b.elapsed_time(a) <= 0 or elapsed == 0


def test_elapsed_time_requires_timing_enabled() -> None:
    for first, second in (
        (F.Event(), F.Event()),
        (F.Event(enable_timing=True), F.Event()),
        (F.Event(), F.Event(enable_timing=True)),
    ):
        first.record()
        second.record()
        with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):
            first.elapsed_time(second)


def test_elapsed_time_requires_recorded_events() -> None:
    a = F.Event(enable_timing=True)
    b = F.Event(enable_timing=True)
    a.record()
    with pytest.raises((RuntimeError, ValueError), match="recorded"):
        a.elapsed_time(b)


@pytest.mark.skipif(F.device_count() < 2, reason="needs two flagos devices")
def test_elapsed_time_between_events_of_two_devices_is_refused() -> None:
    # As cudaEventElapsedTime refuses events of two devices.
    a, b = F.Event(enable_timing=True), F.Event(enable_timing=True)
    a.record(F.current_stream(0))
    b.record(F.current_stream(1))
    with pytest.raises(RuntimeError):
        a.elapsed_time(b)


@pytest.mark.skipif(not ON_CPU, reason="names the cpu accelerator's message")
def test_a_stream_wrapped_with_a_missing_device_is_refused_where_it_is_used() -> None:
    s = torch.Stream(stream_id=0, device_index=7, device_type=F.current_stream().device_type)
    uses = [
        s.query,
        s.synchronize,
        lambda: torch.Event(device="flagos").record(s),
        lambda: F.current_stream().wait_stream(s),
    ]
    for use in uses:
        with pytest.raises(IndexError, match="Invalid device flagos:7"):
            use()


def test_synchronize_variants() -> None:
    s = F.Stream()
    with F.stream(s):
        y = torch.arange(10.0, device="flagos") * 3
    s.synchronize()
    F.synchronize()
    torch.accelerator.synchronize()
    assert torch.equal(y.cpu(), torch.arange(10.0) * 3)


def test_stream_rejects_other_device_types() -> None:
    with pytest.raises(ValueError, match="flagos"):
        F.Stream(device="cpu")
    with pytest.raises((IndexError, RuntimeError), match="Invalid device flagos"):
        F.Stream(F.device_count())


@pytest.mark.usefixtures("two_devices")
def test_stream_object_as_context_manager() -> None:
    s = F.Stream(1)
    with s:
        assert F.current_stream(1) == s
        assert F.current_device() == 1
    assert F.current_stream(1) == F.default_stream(1)
    assert F.current_device() == 0


@pytest.mark.skipif(
    torch_fl.build_config.ACCELERATOR != "cpu",
    reason="FLAGOS_CPU_DEVICE_COUNT is the cpu accelerator's",
)
def test_largest_cpu_device_count_keeps_streams_per_device_and_thread(python_subprocess) -> None:
    """64 devices: each device's current stream is its own, per thread; flagos:64 is refused."""
    code = """
import threading, torch, torch_fl
F = torch.flagos
last = torch.device("flagos", 63)
s63 = F.Stream(device=last)
F.set_stream(s63)
assert F.current_stream(63) == s63 and F.current_stream(0) == F.default_stream(0)
seen = []
other = threading.Thread(target=lambda: seen.append(F.current_stream(63)))
other.start(); other.join()
assert seen[0] == F.default_stream(63), seen  # another thread starts on the default stream
with torch.flagos.device(last):
    t = torch.ones(2, device="flagos") * 2
try:
    torch.ones(1, device="flagos:64")
except Exception as e:
    print("REFUSED", type(e).__name__, e)
print("COUNT", F.device_count(), "DEV", t.device, "OK")
"""
    done = python_subprocess(
        code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "FLAGOS_CPU_DEVICE_COUNT": "64"}
    )
    assert done.returncode == 0, done.stderr
    assert "COUNT 64 DEV flagos:63 OK" in done.stdout
    assert "REFUSED" in done.stdout and "flagos:0 to flagos:63" in done.stdout


def test_events_are_instances_of_torch_flagos_event() -> None:
    event = torch.flagos.Event(enable_timing=True)
    assert isinstance(event, torch.flagos.Event)
    assert isinstance(event, torch.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.flagos.Event)
    assert not isinstance(object(), torch.flagos.Event)
    assert isinstance(torch.flagos.Event(external=False), torch.flagos.Event)
    with pytest.raises(ValueError, match="external=True"):
        torch.flagos.Event(external=True)


def test_stream_priority_and_its_range() -> None:
    low, high = torch.flagos.Stream.priority_range()
    assert high <= low  # lower numbers run first, as CUDA's
    for requested in (0, -1, low, high, high - 10):
        stream = torch.flagos.Stream(priority=requested)
        # As torch.cuda.Stream: priorities outside the range are clamped into it.
        assert stream.priority == min(max(requested, high), low)
    assert torch.flagos.current_stream().priority == 0
    if ON_CPU:
        assert (low, high) == (0, 0)
    else:
        assert (low, high) == torch.cuda.Stream.priority_range()
