"""Streams and events: torch.Stream / torch.Event on flagos devices."""

from __future__ import annotations

from typing import Any

import torch

from torch_fl import _C
from torch_fl.flagos._device import DeviceLike, device_index

_EXISTING_STREAM_KEYS = frozenset({"stream_id", "device_index", "device_type"})


class Stream(torch.Stream):
    """A flagos stream; `torch.flagos.Stream()` is a new stream on the current device.

    As torch.cuda.Stream, `Stream(stream_id=..., device_index=..., device_type=...)` wraps an
    existing stream (the three fields of any flagos stream) instead of making a new one.
    """

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **kwargs: Any) -> Stream:
        unknown = set(kwargs) - _EXISTING_STREAM_KEYS
        if unknown:
            raise TypeError(
                f"torch.flagos.Stream() got unexpected keyword arguments {sorted(unknown)}"
            )
        if not kwargs:
            index = _C._resolve_device_index(device_index(device))
            return super().__new__(cls, device=torch.device("flagos", index), priority=priority)
        if set(kwargs) != _EXISTING_STREAM_KEYS or device is not None:
            raise TypeError(
                "torch.flagos.Stream(stream_id=..., device_index=..., device_type=...) wraps an "
                "existing stream and needs all three (an existing stream's own fields), no device"
            )
        stream = super().__new__(cls, priority=priority, **kwargs)
        if stream.device.type != "flagos":
            raise ValueError(f"torch.flagos.Stream: the fields describe a {stream.device} stream")
        return stream

    # torch.Stream's methods take positional arguments only; torch.cuda.Stream's also take
    # them by name (`s.wait_stream(stream=other)`), so these do too.
    def wait_stream(self, stream: torch.Stream) -> None:
        super().wait_stream(stream)

    def wait_event(self, event: torch.Event) -> None:
        super().wait_event(event)

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        return super().record_event(event)

    @property
    def priority(self) -> int:
        """The stream's priority, as torch.cuda.Stream.priority (lower runs first; requests
        beyond priority_range() are clamped). The cpu accelerator's streams have none: 0."""
        if _C._native_device_type() != "cuda":
            return 0
        native = torch.cuda.Stream(
            stream_id=self.stream_id,
            device_index=self.device_index,
            device_type=_CUDA_DEVICE_TYPE,
        )
        return native.priority

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(lowest, highest) stream priority, as torch.cuda.Stream.priority_range(); (0, 0) on
        the cpu accelerator, whose streams have no priorities."""
        if _C._native_device_type() != "cuda":
            return (0, 0)
        low, high = torch.cuda.Stream.priority_range()
        return (low, high)


# c10::DeviceType::CUDA, the `device_type` field of a CUDA stream's description.
_CUDA_DEVICE_TYPE = 1


def _as_flagos_stream(stream: torch.Stream) -> Stream:
    return Stream(
        stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type
    )


class _EventType(type):
    """Makes `isinstance(e, torch.flagos.Event)` true for every flagos torch.Event."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "flagos"


class Event(metaclass=_EventType):
    """Makes a torch.Event on the current flagos device (enable_timing=True allows elapsed_time).

    Returns a plain torch.Event (torch's event methods accept no subclasses), which
    `isinstance(event, torch.flagos.Event)` recognises.
    """

    def __new__(
        cls,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
        external: bool = False,
    ) -> torch.Event:  # type: ignore[misc]
        if external:
            raise ValueError(
                "torch.flagos.Event(external=True): flagos graphs capture events as internal "
                "dependencies only; make the event without external=True"
            )
        return torch.Event(
            device=torch.device("flagos"),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )


def current_stream(device: DeviceLike = None) -> Stream:
    return _as_flagos_stream(torch.accelerator.current_stream(device_index(device)))


def default_stream(device: DeviceLike = None) -> Stream:
    # Stream id 0 is the default stream of each device.
    current = torch.accelerator.current_stream(device_index(device))
    return Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream: torch.Stream | None) -> None:
    """Makes `stream` current on its device; None does nothing (as torch.cuda.set_stream)."""
    if stream is None:
        return
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current on its device (and that device current) inside a with-block."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self.prev_stream: torch.Stream | None = None
        self.prev_device = -1

    def __enter__(self) -> torch.Stream | None:
        if self.stream is None:
            return None
        self.prev_device = torch.accelerator.current_device_index()
        torch.accelerator.set_device_index(self.stream.device_index)
        self.prev_stream = torch.accelerator.current_stream(self.stream.device_index)
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> bool:
        if self.stream is not None and self.prev_stream is not None:
            torch.accelerator.set_stream(self.prev_stream)
            torch.accelerator.set_device_index(self.prev_device)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)


def is_current_stream_capturing() -> bool:
    """Whether the current stream is capturing a graph. flagos streams are the native device's
    streams, so on the cuda accelerator this is CUDA's answer; on the cpu accelerator, whether a
    FlagOSGraph is recording on this thread."""
    if _C._native_device_type() == "cuda":
        return torch.cuda.is_current_stream_capturing()
    return _C._capturing_on_this_thread()
