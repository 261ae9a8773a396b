"""The build switches of the specification: parsing, defaults, validation, and the build record.

Imported by setup.py (without importing torch_fl) and by tests. Pure Python, no torch import.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

ACCELERATORS = ("cpu", "cuda", "dcu")
_TRUE = ("1", "on", "true", "yes")
_FALSE = ("0", "off", "false", "no", "")


class BuildSwitchError(ValueError):
    """A FLAGOS_* build switch has a value the build cannot honour."""


def flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """Reads a boolean switch; anything but the accepted spellings is an error."""
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BuildSwitchError(
        f"{name}={raw!r} is not a boolean; use one of 1/0, ON/OFF, true/false, yes/no"
    )


def resolve(env: Mapping[str, str], torch_facts: Mapping[str, object]) -> dict:
    """Turns the environment into the build configuration, or raises BuildSwitchError."""
    has_cuda = bool(torch_facts.get("has_cuda")) or bool(torch_facts.get("has_hip"))
    accelerator = env.get("FLAGOS_ACCELERATOR", "").strip().lower()
    if not accelerator:
        accelerator = "cuda" if torch_facts.get("has_cuda") else "cpu"
    if accelerator not in ACCELERATORS:
        raise BuildSwitchError(
            f"FLAGOS_ACCELERATOR={env.get('FLAGOS_ACCELERATOR')!r} is unknown; "
            f"choose one of {', '.join(ACCELERATORS)}"
        )
    if accelerator == "cuda" and not has_cuda:
        raise BuildSwitchError(
            "FLAGOS_ACCELERATOR=cuda needs a torch built with CUDA, but the installed torch "
            f"{torch_facts.get('full_version')} has none; install a CUDA wheel of torch or "
            "build with FLAGOS_ACCELERATOR=cpu"
        )

    boxing = flag(env, "FLAGOS_BUILD_BOXING", default=(accelerator == "cuda"))
    if boxing and accelerator == "cpu":
        raise BuildSwitchError(
            "FLAGOS_BUILD_BOXING=1 builds the `cuda` route, which needs FLAGOS_ACCELERATOR=cuda "
            "or dcu; the cpu accelerator reuses CPU kernels through `cpu_fallback` already"
        )
    flaggems = flag(env, "FLAGOS_BUILD_FLAGGEMS", default=(accelerator == "dcu"))
    flaggems_cpp = flag(env, "FLAGOS_BUILD_FLAGGEMS_CPP")
    if accelerator == "dcu":
        flaggems_cpp = False  # DTK ships no liboperators.so: the C++ FlagGems path stays off.
    if flaggems_cpp:
        raise BuildSwitchError(
            "FLAGOS_BUILD_FLAGGEMS_CPP=1: the FlagGems C++ path is not part of this build yet; "
            "use FLAGOS_BUILD_FLAGGEMS=1 for the Python (Triton) path"
        )
    return {
        "ACCELERATOR": accelerator,
        "BUILD_BOXING": boxing,
        "BUILD_FLAGGEMS": flaggems,
        "BUILD_FLAGGEMS_CPP": flaggems_cpp,
        "BUILD_VENDOR": flag(env, "FLAGOS_BUILD_VENDOR"),  # dcu: recorded, a no-op (notes())
        "DCU_VENDOR_CORE": flag(env, "FLAGOS_DCU_VENDOR_CORE"),
        "ROCM_PATH": env.get("ROCM_PATH", "/opt/dtk") if accelerator == "dcu" else "",
    }


def notes(env: Mapping[str, str], config: Mapping[str, object]) -> list[str]:
    """What the build did with switches it could not honour as given (setup.py prints them)."""
    out = []
    if config["ACCELERATOR"] == "dcu":
        if flag(env, "FLAGOS_BUILD_VENDOR"):
            out.append("FLAGOS_BUILD_VENDOR=1 is a no-op on dcu (no DCU backend directory)")
        if flag(env, "FLAGOS_BUILD_FLAGGEMS_CPP"):
            out.append(
                "FLAGOS_BUILD_FLAGGEMS_CPP forced off on dcu (DTK ships no liboperators.so); "
                "recorded as BUILD_FLAGGEMS_CPP = False"
            )
    return out


def gems_vendor(accelerator: str) -> str:
    """The FlagGems vendor name a build of this accelerator implies."""
    return {"cuda": "nvidia", "dcu": "hygon"}.get(accelerator, "")


def write_build_record(path: Path, config: Mapping[str, object], torch_facts: Mapping) -> None:
    lines = [
        "# Written by setup.py at build time. Do not edit: rebuild instead.",
        f"ACCELERATOR = {config['ACCELERATOR']!r}",
        f"BUILD_BOXING = {config['BUILD_BOXING']!r}",
        f"BUILD_FLAGGEMS = {config['BUILD_FLAGGEMS']!r}",
        f"BUILD_FLAGGEMS_CPP = {config['BUILD_FLAGGEMS_CPP']!r}",
        f"BUILD_VENDOR = {config['BUILD_VENDOR']!r}",
        f"DCU_VENDOR_CORE = {config['DCU_VENDOR_CORE']!r}",
        f"ROCM_PATH = {config['ROCM_PATH']!r}",
        f"GEMS_VENDOR = {gems_vendor(str(config['ACCELERATOR']))!r}",
        f"TORCH_VERSION = {torch_facts['version']!r}",
        f"TORCH_FULL_VERSION = {torch_facts['full_version']!r}",
        "",
    ]
    text = "\n".join(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
