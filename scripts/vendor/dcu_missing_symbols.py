#!/usr/bin/env python3
"""Lists the torch symbols DTK's bundled device libraries need that the official torch does not
export: the measured input of the ABI shim (csrc/vendor/dcu/abi_shim_symbols.txt).

usage: dcu_missing_symbols.py BUNDLE_DIR [TORCH_LIB_DIR]

BUNDLE_DIR is torch_fl/lib_dcu after scripts/vendor/bundle_dcu_libtorch.sh; TORCH_LIB_DIR is
the official torch's lib/ (default: the importable torch's, found without importing it). Prints
one mangled symbol a line (the data file's format) with its demangled name as a comment.
Only C++ symbols of torch's namespaces (c10, at, torch, caffe2) are attributed; everything else
is the vendor runtime's business (DTK's env.sh puts it on the loader path).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

DEVICE_LIBS = ("libc10_hip.so", "libtorch_hip.so", "libmagma.so")
TORCH_NAMESPACES = re.compile(r"^_ZN?K?(3c10|2at|5torch|6caffe2)")


def _nm(path: Path, *flags: str) -> set[str]:
    out = subprocess.run(
        ["nm", "-D", *flags, str(path)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def _demangle(symbols: list[str]) -> list[str]:
    if not symbols:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(symbols), capture_output=True, text=True)
    return out.stdout.splitlines() if out.returncode == 0 else symbols


def missing(bundle: Path, torch_lib: Path) -> list[str]:
    needed: set[str] = set()
    defined: set[str] = set()
    for name in DEVICE_LIBS:
        if (bundle / name).exists():
            needed |= _nm(bundle / name, "--undefined-only")
            defined |= _nm(bundle / name, "--defined-only")
    for lib in sorted(torch_lib.glob("*.so*")):
        defined |= _nm(lib, "--defined-only")
    return sorted(s for s in needed - defined if TORCH_NAMESPACES.match(s))


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 0 if len(argv) == 2 else 2
    bundle = Path(argv[1])
    if not any((bundle / name).is_file() for name in DEVICE_LIBS):
        # An empty list appended to abi_shim_symbols.txt would look like success.
        libs = ", ".join(DEVICE_LIBS)
        print(f"BUNDLE_DIR {bundle} has none of {libs}: bundle first", file=sys.stderr)
        return 2
    if len(argv) == 3:
        torch_lib = Path(argv[2])
    else:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            print("no importable torch; pass TORCH_LIB_DIR", file=sys.stderr)
            return 2
        torch_lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    if not torch_lib.is_dir():
        print(f"{torch_lib} is not a directory (TORCH_LIB_DIR)", file=sys.stderr)
        return 2
    symbols = missing(bundle, torch_lib)
    for symbol, readable in zip(symbols, _demangle(symbols), strict=True):
        print(f"{symbol}  # {readable}")
    print(f"# {len(symbols)} symbol(s) from {bundle} not exported by {torch_lib}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
