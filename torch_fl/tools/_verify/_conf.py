"""The routing table verify_routes writes: a header saying how it was made and why each
FlagGems operator not routed to it stays on the reference route, then one line per operator
that matched and was not slower: `<op> [dtype = <verified dtypes>] = flagos_python`, so calls
in a dtype no case covered (float64, say) keep the reference route."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch_fl import _C

GRAMMAR = (
    "# Grammar (docs/routing.md): <op>.<overload> = <route> | "
    "<op>.<overload> [<conditions>] = <route> | include <file> | # comment; later lines win.\n"
    "# A [dtype = ...] line routes the dtypes verified; calls in any other keep the default route."
)


def short(op: str) -> str:
    return op.removeprefix("aten::")


def dtype_order(dtypes: set[str]) -> list[str]:
    """In the order the router knows dtypes (its error messages list them so too)."""
    rank = {name: i for i, name in enumerate(_C._routing_rule_dtypes())}
    return sorted(dtypes, key=lambda d: (rank.get(d, len(rank)), d))


def routed_line(op: str, result: Mapping[str, Any]) -> str:
    """The table line of an operator routed to flagos_python. Its verified calls had no tensor
    argument when `dtypes` is empty: the router measures no dtype on such calls, so the line
    routes them all."""
    dtypes = result.get("dtypes") or []
    condition = f" [dtype = {'|'.join(dtypes)}]" if dtypes else ""
    return f"{short(op)}{condition} = flagos_python"


def render(
    results: Mapping[str, Mapping[str, Any]],
    pending: list[str],
    provenance: list[str],
    ref_route: str,
) -> str:
    routed = sorted(op for op, r in results.items() if r["decision"] == "flagos_python")
    kept = sorted(op for op, r in results.items() if r["decision"] != "flagos_python")
    lines = [
        "# Routing table of builds with FlagGems (FLAGOS_BUILD_FLAGGEMS=1): the operators FlagGems",
        "# serves on the flagos_python route. Written by verify_routes; do not edit by hand,",
        "# regenerate it (docs/installation/flaggems.md).",
        "#",
        *[f"# {line}" if line else "#" for line in provenance],
        "#",
        f"# Routed to flagos_python: {len(routed)}. Kept on {ref_route} (not listed below, so",
        f"# they take the default route): {len(kept) + len(pending)}, with the reason:",
        "#",
    ]
    width = max((len(short(op)) for op in kept + pending), default=0)
    for op in kept:
        r = results[op]
        lines.append(f"#   {short(op):<{width}}  {r['category']}: {r['detail']}")
    for op in sorted(pending):
        lines.append(f"#   {short(op):<{width}}  not-verified: the run's time budget ran out")
    partial = [op for op in routed if results[op].get("excluded_dtypes")]
    if partial:
        kept_in = f"kept on {ref_route} in these, where a case differed"
        lines += ["#", f"# Routed in some dtypes only; {kept_in}:"]
        for op in partial:
            for dtype, failure in sorted(results[op]["excluded_dtypes"].items()):
                lines.append(f"#   {short(op)} in {dtype}: {failure}")
    lines += ["#", GRAMMAR, ""]
    lines += [routed_line(op, results[op]) for op in routed]
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    """Atomically, so a run killed mid-write leaves the previous table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
