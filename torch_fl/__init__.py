"""torch_fl: the `flagos` PyTorch device.

`import torch_fl` (or plain `import torch`, through the `torch.backends` entry point in
_torch_fl_autoload.py) renames PrivateUse1 to `flagos`, loads the C++ core and registers
`torch.flagos`. Every operator on a flagos tensor then runs through its route: FlagGems, the
vendor's own kernels reached zero-copy, or the CPU.
"""

from __future__ import annotations

from torch_fl import vendor as _vendor  # imports no torch

_vendor.prelude()  # dcu: checks and loads DTK's device libraries before torch is imported

from torch_fl._registration import (  # noqa: E402  (after the dcu prelude)
    check_build_record,
    claim_privateuse1,
    load_core,
    register_python_side,
)

DEVICE_NAME = "flagos"

build_config = check_build_record()
claim_privateuse1(DEVICE_NAME)
_C = load_core()

from torch_fl import flagos  # noqa: E402  (needs the core loaded)

register_python_side(DEVICE_NAME, flagos)

from torch_fl import _autograd_exit  # noqa: E402

_autograd_exit.register()  # lets autograd's device threads finish before finalization

from torch_fl import routing  # noqa: E402  (needs the core loaded)

routing._load_at_import(build_config)

from torch_fl import flaggems  # noqa: E402  (imports no FlagGems)

flaggems.install_at_import(build_config)  # lazy kernels: FlagGems loads on its first operator
_vendor.after_load(flagos.device_count)

from torch_fl import comm  # noqa: E402

comm.register()  # the `flagos` torch.distributed backend

from torch_fl import compile as _compile  # noqa: E402  (imports no Inductor)

_compile.register_if_inductor_is_loaded()  # a compilation before this import looked already

from torch_fl.interop import flagos_view, native_view  # noqa: E402
from torch_fl.version import __version__  # noqa: E402

__all__ = [
    "DEVICE_NAME",
    "build_config",
    "comm",
    "flagos",
    "flaggems",
    "flagos_view",
    "native_view",
    "routing",
    "__version__",
]
