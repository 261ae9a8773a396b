"""torch.flagos.amp: the device-named AMP classes that code written for torch.cuda.amp reaches as
getattr(torch, device_type).amp. They are torch.amp's, bound to the flagos device."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


def _deprecated(name: str, replacement: str) -> None:
    # torch deprecates torch.cuda.amp's names in favour of torch.amp's; these say the same.
    warnings.warn(
        f"`torch.flagos.amp.{name}(args...)` is deprecated. Please use `{replacement}` instead.",
        FutureWarning,
        stacklevel=3,
    )


class autocast(torch.amp.autocast):  # noqa: N801 (torch.cuda.amp's name)
    """torch.autocast("flagos", ...), with torch.cuda.amp.autocast's arguments and defaults."""

    def __init__(
        self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True
    ) -> None:
        _deprecated("autocast", "torch.amp.autocast('flagos', args...)")
        super().__init__("flagos", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """torch.amp.GradScaler("flagos", ...), with torch.cuda.amp.GradScaler's arguments."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        _deprecated("GradScaler", "torch.amp.GradScaler('flagos', args...)")
        super().__init__(
            "flagos",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )


def custom_fwd(fwd: Callable[..., Any] | None = None, *, cast_inputs: torch.dtype | None = None):
    """torch.amp.custom_fwd(..., device_type="flagos"), under torch.cuda.amp's older name (which
    torch deprecates, as this one)."""
    warnings.warn(
        "`torch.flagos.amp.custom_fwd(args...)` is deprecated. "
        "Please use `torch.amp.custom_fwd(args..., device_type='flagos')` instead.",
        FutureWarning,
        stacklevel=2,
    )
    return functools.partial(torch.amp.custom_fwd, device_type="flagos")(
        fwd=fwd, cast_inputs=cast_inputs
    )


def custom_bwd(bwd: Callable[..., Any]):
    """torch.amp.custom_bwd(..., device_type="flagos"), under torch.cuda.amp's older name."""
    warnings.warn(
        "`torch.flagos.amp.custom_bwd(args...)` is deprecated. "
        "Please use `torch.amp.custom_bwd(args..., device_type='flagos')` instead.",
        FutureWarning,
        stacklevel=2,
    )
    return functools.partial(torch.amp.custom_bwd, device_type="flagos")(bwd)
