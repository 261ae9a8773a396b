"""Results written as they come (JSON lines), so a run cut short by its time budget, a
`timeout` or a crash can be resumed with --resume: an operator that started but has no
result crashed the process and is not tried again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _from_before_dtypes(record: dict[str, Any]) -> bool:
    """A routed result recorded before results named their verified dtypes: its table line
    would route every dtype, so the operator is verified again."""
    return record.get("decision") == "flagos_python" and "dtypes" not in record


class State:
    def __init__(self, path: Path, resume: bool) -> None:
        self.path = path
        self.results: dict[str, dict[str, Any]] = {}
        started: set[str] = set()
        if resume and path.exists():
            for line in path.read_text().splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a kill
                if record.get("event") == "start":
                    started.add(record["op"])
                elif _from_before_dtypes(record):
                    started.discard(record["op"])  # verified again, not a crash
                elif "decision" in record:
                    self.results[record["op"]] = record
            for op in started - set(self.results):
                self.add(
                    {
                        "op": op,
                        "decision": "cuda",
                        "category": "crashed",
                        "detail": "the process died while verifying it (see the run's log)",
                    }
                )
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def _append(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()

    def start(self, op: str) -> None:
        self._append({"op": op, "event": "start"})

    def add(self, record: dict[str, Any]) -> None:
        self.results[record["op"]] = record
        self._append(record)
