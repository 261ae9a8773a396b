#!/usr/bin/env python3
"""Generates the C++ source of the DCU ABI shim from its symbol list.

usage: gen_dcu_abi_shim.py SYMBOLS_TXT OUT_CPP

Each listed (mangled) symbol becomes an exported function with that exact name (a GCC asm
label). Calling it prints the symbol and aborts: the shim exists so the dynamic loader can bind
DTK's device libraries on the official torch core; a call into a stub means a code path needs a
real implementation, and it must not pass silently.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_.$]*$")


def read_symbols(path: Path) -> list[str]:
    symbols: list[str] = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not _SYMBOL.match(line):
            raise SystemExit(f"{path}:{number}: not a symbol name: {raw.strip()!r}")
        if line in symbols:
            raise SystemExit(f"{path}:{number}: duplicate symbol {line}")
        symbols.append(line)
    return symbols


def render(symbols: list[str], source: str) -> str:
    out = [
        f"// Generated from {source} by scripts/vendor/gen_dcu_abi_shim.py. Do not edit.",
        "#include <cstdio>",
        "#include <cstdlib>",
        "",
        "namespace {",
        "[[noreturn]] void flagos_dcu_shim_called(const char* symbol) {",
        '  std::fprintf(stderr, "torch_fl DCU ABI shim: %s was called, but the shim only '
        "provides it for symbol binding. This path needs DTK's full core "
        '(FLAGOS_DCU_VENDOR_CORE=1) or a real implementation in the shim.\\n", symbol);',
        "  std::abort();",
        "}",
        "}  // namespace",
        "",
        'extern "C" __attribute__((visibility("default"))) int flagos_dcu_abi_shim_count() {',
        f"  return {len(symbols)};",
        "}",
        "",
    ]
    for index, symbol in enumerate(symbols):
        name = f"flagos_dcu_shim_{index}"
        out += [
            f'extern "C" __attribute__((visibility("default"))) void {name}() __asm__("{symbol}");',
            f'extern "C" void {name}() {{ flagos_dcu_shim_called("{symbol}"); }}',
        ]
    out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    symbols_path, out_path = Path(argv[1]), Path(argv[2])
    text = render(read_symbols(symbols_path), symbols_path.name)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    if not out_path.exists() or out_path.read_text() != text:
        out_path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
