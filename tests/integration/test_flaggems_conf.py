"""The shipped FlagGems tables are consistent: every operator they route to flagos_python
exists in the installed torch, is neither a view nor CompositeImplicitAutograd nor random,
reaches the router, and (where FlagGems can be imported) is in FlagGems' catalog."""

from __future__ import annotations

import pytest
import torch

import torch_fl
from torch_fl import flaggems, routing
from torch_fl.tools._verify._classify import never_routed

TABLES = ["backends_flaggems.conf", "backends_dcu.conf"]


def python_routed(table: str) -> list[str]:
    lines = routing.parse_table(routing.CONFIG_DIR / table, check_available=False)
    final: dict[str, str] = {}
    for op, route, *_ in lines:  # later lines win, as the router applies them
        final[op] = route
    return sorted(op for op, route in final.items() if route == "flagos_python")


@pytest.mark.parametrize("table", TABLES)
def test_routed_operators_exist_in_torch_and_may_be_routed(table: str) -> None:
    for op in python_routed(table):  # parse_table already rejects names torch lacks
        assert never_routed(op) is None, f"{table}: {op}: {never_routed(op)}"


def _flag_gems_importable() -> bool:
    try:
        flaggems.load()
    except Exception:  # not installed, or no device it can detect
        return False
    return True


@pytest.mark.flaggems
@pytest.mark.parametrize("table", TABLES)
def test_routed_operators_are_in_the_installed_flaggems(table: str) -> None:
    if not _flag_gems_importable():
        pytest.skip("FlagGems is not importable here")
    catalog = flaggems.catalog()
    missing = [op for op in python_routed(table) if op not in catalog.entries]
    assert not missing, f"{table} routes to FlagGems what it does not provide: {missing}"


@pytest.mark.flaggems_cpp
def test_the_flaggems_cpp_route_serves_operators_when_built() -> None:
    x = torch.randn(64)
    with routing.route("abs", "flaggems_cpp"):
        assert routing.get_route("abs") == "flaggems_cpp"
        torch.testing.assert_close(torch.abs(x.to("flagos")).cpu(), torch.abs(x))


def test_the_flaggems_cpp_route_without_its_build_names_the_switch() -> None:
    if torch_fl.build_config.BUILD_FLAGGEMS_CPP:
        pytest.skip("this build has the FlagGems C++ path")
    with pytest.raises(RuntimeError, match="FLAGOS_BUILD_FLAGGEMS_CPP=1"):
        routing.set_route("abs", "flaggems_cpp")


def test_dcu_table_pins_the_specified_operators_to_cuda() -> None:
    lines = routing.parse_table(routing.CONFIG_DIR / "backends_dcu.conf", check_available=False)
    final = {op: route for op, route, *_ in lines}
    for op in ("silu_backward", "slice_backward", "_conj", "relu", "relu_", "mm", "bmm",
               "mse_loss", "transpose.int"):  # fmt: skip
        assert final[routing._canonical(op)] == "cuda", op
