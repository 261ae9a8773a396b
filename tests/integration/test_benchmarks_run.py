"""The benchmarks still run, on the accelerator of the build, with tiny arguments.

Benchmarks measure and print ratios; nothing here looks at their timings (performance claims
live in docs/performance.md). This only keeps them from rotting: each runs in its own process,
exits 0 and prints the line its readers look for (a regular expression here).
decode_instructions.py runs its workloads under valgrind for minutes: only its route-counting
child runs here (the MLP step workload), and its callgrind-file reading is tested below."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import torch_fl

ROOT = Path(__file__).resolve().parents[2]
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
NEEDS_TRANSFORMERS = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="needs transformers")

CASES = [
    ("dispatch_overhead.py", ["--reps", "2", "--calls", "2"], "geomean"),
    pytest.param(
        "dispatch_overhead.py",
        ["--reps", "2", "--calls", "2", "--pin-cpu", "0"],
        r"pinned to cpu 0(.|\n)*autograd hand-off: .* us per backward",
        marks=pytest.mark.skipif(
            torch_fl.build_config.ACCELERATOR != "cpu", reason="the MLP step parts: cpu only"
        ),
    ),
    ("route_costs.py", ["--iterations", "20", "--rounds", "1"], "flagos extra per call"),
    (
        "decode_instructions.py",
        ["--child", "flagos", "--count-routes", "--workload", "mlp_step", "--steps", "2"],
        r"ROUTED [1-9]",
    ),
    ("comm_wrapper_cost.py", ["--calls", "20", "--rounds", "1"], "wrapper cost"),
    ("allreduce_bandwidth.py", ["--rounds", "1", "--sizes", "1M"], "ratio"),
    ("flaggems_overhead.py", ["--reps", "1", "--calls", "1"], r"skipped, |extra us"),
    ("compile_speedup.py", ["--rounds", "1", "--iters", "1"], "ratio of speedups"),
    ("graph_replay.py", ["--rounds", "1", "--iters", "1", "--layers", "1"], "graph replay"),
    ("custom_op_overhead.py", ["--rounds", "2", "--calls", "2"], "custom_op  flagos"),
    pytest.param(
        "transformer_e2e.py",
        ["--rounds", "1", "--steps", "1", "--decode-tokens", "2"],
        "peak_bytes",
        marks=NEEDS_TRANSFORMERS,
    ),
    pytest.param(
        "e2e_profile.py",
        ["--steps", "1", "--profile-steps", "1", "--native", torch_fl._C._native_device_type()],
        "phase",
        marks=NEEDS_TRANSFORMERS,
    ),
]


@pytest.mark.parametrize(("script", "args", "expected"), CASES)
def test_benchmark_runs(script: str, args: list[str], expected: str) -> None:
    # This tree's torch_fl, whatever the editable install points at.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, TRANSFORMERS_VERBOSITY="error", PYTHONPATH=path)
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, (
        f"{script} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    )
    assert re.search(expected, result.stdout), result.stdout[-2000:]


# A callgrind file in which libtorch and torch_fl each have a function of the same name (an
# inline c10 function both carry), one calling into the other.
_CALLGRIND_FILE = """\
# callgrind format
events: Ir I1mr
ob=(1) /site-packages/torch/lib/libtorch_cpu.so
fl=(1) ???
fn=(1) c10::TensorImpl::set_sizes_and_strides
10 100 7
+1 50 3
ob=(2) /site/torch_fl/lib/libtorch_fl_core.so
fn=(2) torch_fl::native_alias
20 40 2
cob=(1)
cfn=(1)
calls=1 10
20 150 10
fn=(3) c10::TensorImpl::set_sizes_and_strides
30 60 4
"""


def test_decode_instructions_counts_misses_by_library(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location(
        "decode_instructions", ROOT / "benchmarks" / "decode_instructions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "callgrind.out"
    out.write_text(_CALLGRIND_FILE)
    # torch_fl's own: native_alias (2) and its copy of the inline function (4); not libtorch's
    # copy (7 + 3), nor the call's inclusive cost (10).
    assert module._torch_fl_cost(str(out), "I1mr") == 6
    assert module._torch_fl_cost(str(out), "Ir") == 100
    costs = module._self_costs(str(out), "Ir")
    assert (
        costs[
            ("/site-packages/torch/lib/libtorch_cpu.so", "c10::TensorImpl::set_sizes_and_strides")
        ]
        == 150
    )
