"""torch.distributed for flagos tensors: the `flagos` c10d backend (ProcessGroupFlagOS).

`import torch_fl` registers it, so `dist.init_process_group("flagos")`,
`init_process_group(device_id=torch.device("flagos", i))` and `"cpu:gloo,flagos:flagos"` work.
`tier_info()` says which tier a group runs on and why the tiers above it were not used.
"""

from __future__ import annotations

from torch_fl.comm.process_group import (
    ENV_HOST_STAGED,
    ENV_TIER,
    TIERS,
    Options,
    TierChoice,
    TierUnavailableError,
    backend_of,
    choose_tier,
    comm_profile,
    register,
    tier_info,
)

__all__ = [
    "ENV_HOST_STAGED",
    "ENV_TIER",
    "TIERS",
    "Options",
    "ProcessGroupFlagOS",
    "TierChoice",
    "TierUnavailableError",
    "backend_of",
    "choose_tier",
    "comm_profile",
    "register",
    "tier_info",
]


def __getattr__(name: str):
    if name == "ProcessGroupFlagOS":  # bound on first use (it derives from c10d.Backend)
        from torch_fl import _C

        return _C._comm_init().ProcessGroupFlagOS
    raise AttributeError(f"module 'torch_fl.comm' has no attribute {name!r}")
