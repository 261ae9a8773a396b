"""FlagGems as the flagos_python provider, against the fake FlagGems of tests/fixtures (real
FlagGems cannot run without a GPU): lazy import, results, call counts, out=/in-place and
keyword-only arguments, GEMS_VENDOR, the missing-FlagGems error and user kernels winning.

Each test runs in a fresh interpreter: importing FlagGems (fake or real) is process-wide."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

import torch_fl
from tests.conftest import REPO_ROOT, run_python

FAKE = REPO_ROOT / "tests" / "fixtures" / "fake_flag_gems"

# A build with FlagGems, as far as the provider is concerned: what install_at_import reads.
PRELUDE = """
import os, sys, types
import torch, torch_fl
from torch_fl import _C, flaggems, routing
record = types.SimpleNamespace(BUILD_FLAGGEMS=True, GEMS_VENDOR="nvidia", ACCELERATOR="cpu")
torch_fl.build_config.GEMS_VENDOR = "nvidia"  # the vendor a cuda build records
"""


def run(code: str, fake: bool = True, env: dict[str, str | None] | None = None) -> str:
    full_env = {"PYTHONPATH": None, "GEMS_VENDOR": None, "FAKE_FLAG_GEMS_IMPORTS": None}
    full_env.update(env or {})
    if fake:
        full_env["PYTHONPATH"] = f"{REPO_ROOT}:{FAKE}"
    result = run_python(textwrap.dedent(PRELUDE) + textwrap.dedent(code), env=full_env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# The fake stands in for FlagGems on the cpu accelerator's build; a GPU build's own table and
# an installed FlagGems change what these two observe (the GPU suites test the real FlagGems).
CPU_BUILD_ONLY = pytest.mark.skipif(
    torch_fl.build_config.ACCELERATOR != "cpu",
    reason="checks the cpu build's table with the fake FlagGems",
)
NO_REAL_FLAGGEMS = pytest.mark.skipif(
    importlib.util.find_spec("flag_gems") is not None,
    reason="FlagGems is installed here, so it cannot be missing",
)


@CPU_BUILD_ONLY
def test_import_is_lazy_and_results_match_the_default_route() -> None:
    out = run(
        """
        assert "flag_gems" not in sys.modules
        installed = flaggems.install_at_import(record)
        assert installed == ["aten::add.Tensor", "aten::relu"], installed
        assert "flag_gems" not in sys.modules, "install must not import FlagGems"
        assert "GEMS_VENDOR" not in os.environ, "no environment writes before FlagGems loads"
        a = torch.randn(6, 5, device="flagos"); b = torch.randn(6, 5, device="flagos")
        want = (a.cpu() + b.cpu()).relu()
        got = torch.relu(a + b)
        assert "flag_gems" in sys.modules
        import flag_gems
        torch.testing.assert_close(got.cpu(), want)
        assert got.device.type == "flagos"
        for _ in range(3):
            torch.relu(a + b)
        assert flag_gems.ops.CALLS == {"add": 4, "relu": 4}, flag_gems.ops.CALLS
        assert set(flag_gems.ops.DEVICES) == {"cpu"}  # zero-copy native tensors
        assert flag_gems.IMPORTS == 1
        # The trampoline replaced itself: later calls reach FlagGems' callable directly.
        assert _C._routing_python_kernel("aten::add.Tensor") is flag_gems.ops.add
        assert flaggems.is_installed("add.Tensor")
        assert routing.stats()["aten::add.Tensor"] == {"flagos_python": 4}
        print("GEMS_VENDOR", os.environ["GEMS_VENDOR"], flag_gems.vendor_name)
        """,
        env={"FLAGOS_OP_add__Tensor": "flagos_python", "FLAGOS_OP_relu": "flagos_python"},
    )
    assert "GEMS_VENDOR nvidia nvidia" in out


def test_gems_vendor_keeps_the_users_value() -> None:
    out = run(
        """
        flaggems.install(["relu"]); routing.set_route("relu", "flagos_python")
        torch.relu(torch.randn(3, device="flagos"))
        import flag_gems
        print("VENDOR", flag_gems.vendor_name, os.environ["GEMS_VENDOR"])
        """,
        env={"GEMS_VENDOR": "hygon"},
    )
    assert "VENDOR hygon hygon" in out


def test_import_torch_fl_writes_no_gems_vendor() -> None:
    result = run_python(
        "import os, torch_fl; print('SET' if 'GEMS_VENDOR' in os.environ else 'UNSET')",
        env={"GEMS_VENDOR": None},
    )
    assert result.returncode == 0, result.stderr
    assert "UNSET" in result.stdout


def test_in_place_out_and_keyword_only_arguments() -> None:
    run(
        """
        ops = ["add_.Tensor", "add.out", "sum.dim_IntList", "mean.dim"]
        flaggems.install(ops)
        for op in ops:
            routing.set_route(op, "flagos_python")
        a_cpu = torch.randn(4, 5); b_cpu = torch.randn(4, 5)
        a, b = a_cpu.to("flagos"), b_cpu.to("flagos")
        r = a.add_(b, alpha=2)
        assert r is a
        torch.testing.assert_close(a.cpu(), a_cpu + 2 * b_cpu)
        out = torch.empty(0, device="flagos")  # resized by the kernel, synced back
        r = torch.add(a, b, out=out)
        assert r is out and out.shape == (4, 5)
        torch.testing.assert_close(out.cpu(), a.cpu() + b_cpu)
        s = a.sum(1, dtype=torch.float64)  # keyword-only ScalarType arrives as torch.dtype
        assert s.dtype == torch.float64 and s.device.type == "flagos"
        torch.testing.assert_close(s.cpu(), a.cpu().sum(1, dtype=torch.float64))
        m = a.mean(0, keepdim=True)  # callable without `dtype`: the torch.library call
        torch.testing.assert_close(m.cpu(), a.cpu().mean(0, keepdim=True))
        import flag_gems
        assert flag_gems.ops.CALLS == {"add_": 1, "add_out": 1, "sum_dim": 1, "mean_dim": 1}
        """
    )


@NO_REAL_FLAGGEMS
def test_missing_flaggems_is_an_error_naming_the_op_and_the_fix() -> None:
    out = run(
        """
        flaggems.install(["add.Tensor"]); routing.set_route("add.Tensor", "flagos_python")
        a = torch.randn(3, device="flagos")
        try:
            a + a
        except ImportError as exc:
            print("ERROR", type(exc).__name__, exc)
        else:
            raise AssertionError("expected an ImportError")
        assert torch.equal((a * 2).cpu(), a.cpu() * 2)  # other operators still run
        """,
        fake=False,
    )
    assert "ERROR FlagGemsMissing" in out
    assert "aten::add.Tensor" in out and "pip install flag-gems" in out
    assert "FLAGOS_OP_add__Tensor=cuda" in out


def test_operator_flaggems_does_not_provide_is_an_error() -> None:
    out = run(
        """
        flaggems.install(["sqrt"]); routing.set_route("sqrt", "flagos_python")
        try:
            torch.sqrt(torch.rand(3, device="flagos"))
        except NotImplementedError as exc:
            print("ERROR", exc)
        """
    )
    assert "does not provide it" in out and "condition is false" in out


def test_users_kernel_wins_over_the_provider() -> None:
    run(
        """
        flaggems.install(["relu"]); routing.set_route("relu", "flagos_python")
        calls = []
        def mine(x):
            calls.append(1)
            return torch.relu(x)
        routing.register_python_kernel("relu", mine)
        torch.relu(torch.randn(3, device="flagos"))
        assert calls == [1] and "flag_gems" not in sys.modules
        assert flaggems.install(["relu"]) == []  # never replaces a user's kernel
        assert _C._routing_python_kernel("aten::relu") is mine
        flaggems.uninstall()
        assert _C._routing_python_kernel("aten::relu") is mine
        """
    )


def test_a_user_kernel_registered_during_the_first_call_is_kept() -> None:
    run(
        """
        flaggems.install(["relu"]); routing.set_route("relu", "flagos_python")
        import torch_fl.flaggems._install as inst
        real_resolve = inst.resolve
        def mine(x):
            return torch.relu(x)
        def resolve_then_user_registers(op):
            fn = real_resolve(op)
            routing.register_python_kernel("relu", mine)  # e.g. another thread
            return fn
        inst.resolve = resolve_then_user_registers
        torch.relu(torch.randn(3, device="flagos"))
        assert _C._routing_python_kernel("aten::relu") is mine
        """
    )


@pytest.mark.parametrize("threads", [8])
def test_first_calls_from_many_threads_import_once(threads: int) -> None:
    run(
        f"""
        import threading
        flaggems.install(["relu"]); routing.set_route("relu", "flagos_python")
        x = torch.randn(16, device="flagos")
        errors = []
        def work():
            try:
                for _ in range(5):
                    torch.relu(x)
            except Exception as exc:
                errors.append(exc)
        ts = [threading.Thread(target=work) for _ in range({threads})]
        [t.start() for t in ts]; [t.join() for t in ts]
        assert not errors, errors
        import flag_gems
        assert flag_gems.IMPORTS == 1 and flag_gems.ops.CALLS["relu"] == {threads * 5}
        """
    )


def test_fake_fixture_exists() -> None:
    assert (Path(FAKE) / "flag_gems" / "__init__.py").is_file()
