"""torch.flagos.amp: the device-named AMP classes that code written for torch.cuda.amp reaches as
getattr(torch, device_type).amp. They are torch.amp's, bound to the flagos device."""

from __future__ import annotations

import torch

__all__ = ["GradScaler", "autocast"]


class autocast(torch.amp.autocast):  # noqa: N801 (torch.cuda.amp's name)
    """torch.autocast("flagos", ...), with torch.cuda.amp.autocast's arguments and defaults."""

    def __init__(
        self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True
    ) -> None:
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
        super().__init__(
            "flagos",
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
            enabled=enabled,
        )
