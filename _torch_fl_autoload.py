"""`import torch` loads torch_fl through this module (the `torch.backends` entry point).

It lives outside the torch_fl package so that an installation which cannot be imported (built
for another torch version, never built, a file missing) costs a warning, not `import torch`
itself: torch turns any exception of an entry point into a RuntimeError, which would break
every program in the environment, including the ones that never use flagos. An explicit
`import torch_fl` still raises the full error.

Only a failure that left the process as it was is downgraded. One that left traces (DTK's
device libraries loaded, the C++ core loaded, PrivateUse1 renamed) would leave a half-wired
process behind, and other failures (a bad setting such as FLAGOS_CPU_DEVICE_COUNT, another
plugin owning PrivateUse1) are the user's to fix: those still stop `import torch`.
"""

from __future__ import annotations

import sys
import warnings


def _left_traces() -> bool:
    """Whether a failed `import torch_fl` changed this process: DTK's device libraries loaded,
    the C++ core loaded, or PrivateUse1 renamed."""
    dcu = sys.modules.get("torch_fl.vendor.dcu")
    torch = sys.modules.get("torch")
    return (
        bool(dcu is not None and getattr(dcu, "_loaded", None))
        or "torch_fl._C" in sys.modules
        or (torch is not None and torch._C._get_privateuse1_backend_name() != "privateuseone")
    )


def load() -> None:
    try:
        import torch_fl  # noqa: F401  (registers the device; partial while it imports torch)
    except ImportError as error:
        if _left_traces():
            raise
        warnings.warn(
            f"torch_fl is installed but cannot be imported, so torch starts without the "
            f"flagos device: {error} (`import torch_fl` raises this error; "
            f"TORCH_DEVICE_BACKEND_AUTOLOAD=0 stops `import torch` from trying)",
            RuntimeWarning,
            stacklevel=2,
        )
