"""What torch.compile assumes about flagos results is what they are.

Dynamo and Inductor trace with fake tensors, whose sizes, strides, dtypes and aliasing come from
torch's meta kernels; compiled code then asserts the strides of each result a kernel returns.
Some meta kernels decide by device type (cpu, cuda, anything else), and flagos is "anything
else" while its results come from CPU or CUDA kernels. This runs OpInfo samples of operators
with such decisions on flagos under torch's CrossRefFakeMode (every aten call checked against
its fake prediction), contiguous and channels-last; a sample that CPU itself fails is torch's
own and left out.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import torch_fl

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")
from torch._subclasses.fake_utils import CrossRefFakeMode  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.utils._pytree import tree_map  # noqa: E402

OPERATORS = (
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d",
    "nn.functional.conv_transpose2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "nn.functional.interpolate", "nn.functional.batch_norm",
    "nn.functional.group_norm", "nn.functional.layer_norm", "nn.functional.instance_norm",
    "softmax", "log_softmax", "nn.functional.linear", "matmul", "addmm", "bmm", "cat",
    "index_select", "nn.functional.embedding", "nn.functional.cross_entropy",
    "nn.functional.gelu", "sum", "mean", "sort", "topk", "cumsum", "where", "linalg.svd",
    "linalg.eigh", "linalg.qr", "nn.functional.upsample_bilinear", "nn.functional.pixel_shuffle",
    "nonzero_static",
)  # fmt: skip
# Mismatches between the real results on the cpu accelerator (CPU's conventions) and the fake
# ones for a non-CPU device (CUDA's), found by this check over every OpInfo, contiguous and
# channels-last (2026-12-03; also `_embedding_bag_forward_only`'s offset2bag; `native_dropout`'s
# mask, float then, is bool since 2026-12-05): harmless for compiled code, which
# decomposes these operators (checked: batch norm, pixel shuffle, embedding bag and dropout
# compile and match CPU), but listed rather than hidden. The convolution and nonzero_static
# mismatches this check found are fixed (csrc/aten/native/convolution.cpp, predicted_layouts.h):
# nonzero_static's, row-major where the prediction is CUDA's column-major, failed an export.
KNOWN_ON_CPU_ACCELERATOR = {
    ("nn.functional.batch_norm", "contiguous"): "eval-mode save_mean: CPU's is (C,), fake (0,)",
    ("nn.functional.batch_norm", "channels_last"): "eval-mode save_mean: CPU's is (C,), fake (0,)",
    ("nn.functional.pixel_shuffle", "channels_last"): "CPU keeps channels-last, fake does not",
}
KNOWN = KNOWN_ON_CPU_ACCELERATOR if torch_fl.build_config.ACCELERATOR == "cpu" else {}


def samples(name: str) -> list[tuple[str, Any]]:
    ops = [op for op in op_db if op.name == name]
    assert ops, f"no OpInfo named {name}"
    torch.manual_seed(0)
    return [
        (op.variant_test_name, op, s) for op in ops for s in op.sample_inputs("cpu", torch.float32)
    ][:6]


def laid_out(value: Any, layout: str, device: str) -> Any:
    def move(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        x = x.detach().clone().to(device)
        if layout == "channels_last" and x.dim() in (4, 5):
            x = x.to(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
        return x

    return tree_map(move, value)


def crossref(op: Any, sample: Any, layout: str, device: str) -> str | None:
    inp, args, kwargs = laid_out((sample.input, sample.args, sample.kwargs), layout, device)
    try:
        with CrossRefFakeMode():
            op(inp, *args, **kwargs)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("name", OPERATORS)
def test_fake_predictions_match_flagos_results(name: str, layout: str) -> None:
    if (name, layout) in KNOWN:
        pytest.skip(KNOWN[(name, layout)])
    checked = 0
    for variant, op, sample in samples(name):
        if crossref(op, sample, layout, "cpu") is not None:
            continue  # torch's own meta kernel disagrees with CPU: nothing of ours to check
        error = crossref(op, sample, layout, "flagos")
        assert error is None, f"{name}{'.' + variant if variant else ''} ({layout}): {error}"
        checked += 1
    if checked == 0:
        pytest.skip("no sample CPU passes")
