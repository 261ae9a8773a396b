"""Small runtime pieces shared by the registration and by Inductor-generated code.

Generated wrapper code imports `get_raw_stream` from here, so this module stays cheap: no
Inductor import.
"""

from __future__ import annotations

import os

import torch

from torch_fl import _C, _build_config
from torch_fl._build_switches import flag

# The accelerator this torch_fl was built for ("cpu", "cuda", "dcu").
ACCELERATOR: str = _build_config.ACCELERATOR

# "cuda" on CUDA-ABI accelerators (cuda, and dcu with its hipified torch); "cpu" on cpu.
NATIVE_DEVICE_TYPE: str = _C._native_device_type()

FLAGTREE_ENV = "FLAGOS_USE_FLAGTREE"

# The remedy the installation guide gives ("Troubleshooting": the active triton is not the
# flagtree build).
FLAGTREE_INSTALL = (
    "python3 -m pip uninstall -y triton   # repeat until fully uninstalled\n"
    'python3 -m pip install "flagtree===0.6.2a1+hcu3.6" \\\n'
    "  --index-url=https://resource.flagos.net/repository/flagos-pypi-hosted/simple"
)


class FlagTreeNotActiveError(ImportError):
    """FLAGOS_USE_FLAGTREE=1 but the importable triton is not a FlagTree build.

    An ImportError (not a RuntimeError) so that Inductor's device-module lookup, which
    swallows RuntimeError, lets it reach the user.
    """


def get_raw_stream(index: int) -> int:
    """The raw handle of the current flagos stream of device `index`, for kernel launches.

    flagos streams on a CUDA-ABI accelerator are the CUDA streams of the same device (same
    ids, one current stream for both), so the current CUDA stream's handle is the current
    flagos stream's. The cpu accelerator runs kernels synchronously on the calling thread.
    """
    if NATIVE_DEVICE_TYPE == "cuda":
        return torch._C._cuda_getCurrentRawStream(index)
    return 0


def flagtree_wanted() -> bool:
    """FLAGOS_USE_FLAGTREE as a boolean (unset or empty: off); another value is a ValueError."""
    return flag(os.environ, FLAGTREE_ENV)


def flagtree_backend() -> str | None:
    """FlagTree's backend name (for example 'hcu') if the active triton is FlagTree, else None."""
    try:
        from triton._flagtree_backend import FLAGTREE_BACKEND  # type: ignore[import-not-found]
    except ImportError:
        return None
    return str(FLAGTREE_BACKEND)


def check_flagtree() -> str | None:
    """With FLAGOS_USE_FLAGTREE=1, asserts that the active triton is FlagTree.

    Returns FlagTree's backend name (None when the variable is not set); raises
    FlagTreeNotActiveError naming the fix otherwise.
    """
    if not flagtree_wanted():
        return None
    backend = flagtree_backend()
    if backend is not None:
        return backend
    try:
        import triton

        found = (
            f"triton {getattr(triton, '__version__', '?')} from "
            f"{os.path.dirname(getattr(triton, '__file__', '') or '?')}, which is not a "
            "FlagTree build (no triton._flagtree_backend)"
        )
    except ImportError:
        found = "no importable triton"
    raise FlagTreeNotActiveError(
        f"{FLAGTREE_ENV}=1 asks torch.compile on flagos to use FlagTree's Triton, but this "
        f"environment has {found}. FlagTree replaces the triton module at installation time; "
        "install it into the environment that runs the kernels, after removing any other "
        f"Triton:\n{FLAGTREE_INSTALL}\n"
        "python3 -c 'import triton; from triton._flagtree_backend import FLAGTREE_BACKEND; "
        "print(triton.__version__, FLAGTREE_BACKEND)'\n"
        f"or unset {FLAGTREE_ENV}."
    )
