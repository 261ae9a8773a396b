"""``python -m torch_fl.info``: what this torch_fl build is and how it routes operators."""

from __future__ import annotations

import sys

import torch

import torch_fl
from torch_fl import routing


def _unrouted_note(op: str) -> str:
    """Said of a table line whose operator never reaches the router (the line has no effect)."""
    return "" if routing.reaches_router(op) else "  (served by a composite/flagos kernel)"


def report() -> str:
    lines: list[str] = []
    record = torch_fl.build_config
    lines.append(f"torch_fl {torch_fl.__version__} on torch {torch.__version__}")
    lines.append(f"build record ({record.__file__}):")
    for key in sorted(k for k in vars(record) if k.isupper()):
        lines.append(f"  {key} = {getattr(record, key)!r}")
    lines.append(
        f"accelerator: {torch_fl._C._accelerator_name()} "
        f"(native device type: {torch_fl._C._native_device_type()})"
    )
    count = torch.flagos.device_count()
    lines.append(f"devices: {count}")
    for i in range(count):
        props = torch_fl._C._device_properties(i)
        lines.append(f"  flagos:{i}: {props['name']}, {props['total_memory'] / 2**30:.1f} GiB")

    table = routing.active_table()
    lines.append(f"routing table: {table['path']}")
    lines.append(f"  chosen by: {table['origin']}")
    lines.append(f"  default route: {table['default_route']}")
    lines.append(f"  operators named in the table: {len(table['table'])}")
    for op, route in sorted(table["table"].items()):
        lines.append(f"    {op} = {route}{_unrouted_note(op)}")
    if table["rules"]:
        lines.append(
            f"  size rules (per call; the last a call meets wins): {len(table['rules'])} operators"
        )
        for op, rules in sorted(table["rules"].items()):
            for condition, route, where in rules:
                lines.append(f"    {op} [{condition}] = {route}  ({where}){_unrouted_note(op)}")
    available = routing.available_routes()
    lines.append("routes in this build: " + ", ".join(r for r, why in available.items() if not why))
    counts = routing.route_counts()
    total = sum(counts.values())
    lines.append(f"operators per route ({total} aten operators reach the router by name):")
    for route in routing.ROUTES:
        if counts.get(route):
            lines.append(f"  {route}: {counts[route]}")
    overrides = routing.overrides()
    lines.append(f"overrides: {len(overrides) if overrides else 'none'}")
    for op, what in sorted(overrides.items()):
        lines.append(f"  {op} -> {what}")
    kernels = routing.python_kernels()
    lines.append(f"python kernels registered: {len(kernels)}")
    lines.append(f"strict mode: {bool(routing.strict(None))}")
    return "\n".join(lines)


def main() -> int:
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
