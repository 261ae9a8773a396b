"""The `flagos` backend across processes (two ranks, FileStore rendezvous, bounded timeouts):
a peer that exits early or never joins produces an error within the timeout, never a silent
hang. The full collective + DDP run is tests/manual/test_flagos_dist_live.py (test_live)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

import torch_fl

_LIVE = Path(__file__).resolve().parents[1] / "manual" / "test_flagos_dist_live.py"
_spec = importlib.util.spec_from_file_location("flagos_dist_live", _LIVE)
live = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(live)

pytestmark = pytest.mark.skipif(
    torch_fl.flagos.device_count() < 2, reason="needs two flagos devices"
)
TIMEOUT = 4.0


def _survivor(reports):
    (survivor,) = [r for r in reports if r["rank"] == 0]
    assert "failure" not in survivor, survivor.get("failure") or survivor["output"]
    return survivor


def test_a_peer_that_exits_early_gives_an_error_naming_the_backend() -> None:
    survivor = _survivor(live.launch(2, "peer_exit", timeout=TIMEOUT))
    assert survivor["error"], f"all_reduce completed without its peer: {survivor}"
    assert survivor["seconds"] < TIMEOUT + 10
    if torch_fl.build_config.ACCELERATOR == "cpu":
        assert "ProcessGroupFlagOS all_reduce (tier gloo" in survivor["error"]
        # through get_future() too, with the same type as wait()'s
        future_error = survivor["future_error"]
        assert future_error, f"the future completed without its peer: {survivor}"
        assert future_error.startswith("DistBackendError: ProcessGroupFlagOS all_reduce (tier gloo")


def test_a_peer_that_never_joins_times_out_with_a_message() -> None:
    survivor = _survivor(live.launch(2, "peer_silent", timeout=TIMEOUT))
    assert survivor["error"], f"all_reduce completed without its peer: {survivor}"
    assert TIMEOUT * 0.5 <= survivor["seconds"] < TIMEOUT + 30
    assert "imed out" in survivor["error"] or "timeout" in survivor["error"].lower()


def test_host_staged_gloo_runs_every_collective_and_ddp() -> None:
    for report in live.launch(2, "all", timeout=60.0, tier="gloo", host_staged=True):
        assert "failure" not in report, report.get("failure") or report["output"]
        assert report["tier"]["path"] == "host_staged"
        assert any(c.startswith("DDP buckets=") for c in report["checks"])


@pytest.mark.skipif(
    torch_fl.build_config.ACCELERATOR != "cpu" and torch_fl.flagos.device_count() < 4,
    reason="needs four flagos devices (the cpu accelerator makes them)",
)
def test_groups_split_off_a_device_bound_default_group_work() -> None:
    # Four ranks: a 2 x 2 DeviceMesh (split_group per dimension), its flattening, split_group
    # after a new_group that left two ranks out, and HSDP over the mesh against one process.
    for report in live.launch(4, "mesh", timeout=60.0):
        assert "failure" not in report, report.get("failure") or report["output"]
        assert any(c.startswith("HSDP(2, 2)") for c in report["checks"]), report["checks"]
        assert any(c.startswith("split_group") for c in report["checks"]), report["checks"]


def test_the_flagcx_tier_runs_every_collective_and_ddp() -> None:
    # FlagCX itself is not installable here; its stand-in registers a gloo-backed "flagcx"
    # backend the way FlagCX's torch plugin does, so this checks the tier's wiring end to end.
    fake = Path(__file__).resolve().parents[1] / "fixtures" / "fake_flagcx"
    path = os.pathsep.join(
        p for p in (str(fake), str(live.ROOT), os.environ.get("PYTHONPATH")) if p
    )
    for report in live.launch(2, "all", timeout=60.0, extra_env={"PYTHONPATH": path}):
        assert "failure" not in report, report.get("failure") or report["output"]
        assert (report["tier"]["tier"], report["tier"]["path"]) == ("flagcx", "zero_copy")
        assert any(c.startswith("DDP buckets=") for c in report["checks"])
