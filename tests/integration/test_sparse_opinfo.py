"""The sparse COO samples of PyTorch's OpInfo database, on flagos against the cpu.

OpInfos that support sparse inputs (`supports_sparse`) and generate sparse COO samples (mul,
sum and the masked reductions: several hundred samples, in float32 and float64) run each
sample on cpu tensors and on the same tensors moved to flagos: results must match (densified
when sparse) and stay on flagos, and a sample the cpu refuses must be refused on flagos with the
same exception type.
"""

from __future__ import annotations

import unittest
import warnings

import pytest
import torch

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402


def _samples(op, dtype=torch.float32):  # noqa: ANN001, ANN202
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return list(op.sample_inputs_sparse(torch.sparse_coo, "cpu", dtype))
        except (NotImplementedError, unittest.SkipTest):  # no sparse sample function, or none
            return []


SPARSE_OPS = [op for op in op_db if getattr(op, "supports_sparse", False) and _samples(op)]


def _to_flagos(x):  # noqa: ANN001, ANN202
    return x.to("flagos") if isinstance(x, torch.Tensor) else x


def _comparable(x):  # noqa: ANN001, ANN202
    if isinstance(x, torch.Tensor) and x.layout == torch.sparse_coo:
        return x.to_dense()
    return x


def _describe(sample):  # noqa: ANN001, ANN202
    return lambda message: f"{sample}: {message}"


def test_there_are_sparse_samples() -> None:
    assert {"mul", "sum"} <= {op.name for op in SPARSE_OPS}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", SPARSE_OPS, ids=lambda op: op.full_name)
def test_sparse_samples_match_cpu(op, dtype) -> None:  # noqa: ANN001
    compared = 0
    for sample in _samples(op, dtype):
        args = (sample.input, *sample.args)
        flagos_args = tree_map(_to_flagos, args)
        flagos_kwargs = tree_map(_to_flagos, sample.kwargs)
        try:
            expected = op(*args, **sample.kwargs)
        except Exception as error:  # noqa: BLE001 - the cpu's refusal is the reference
            with pytest.raises(type(error)):
                op(*flagos_args, **flagos_kwargs)
            continue
        result = op(*flagos_args, **flagos_kwargs)
        got, _ = tree_flatten(tree_map(_comparable, result))
        want, _ = tree_flatten(tree_map(_comparable, expected))
        for g, w in zip(got, want, strict=True):
            if isinstance(w, torch.Tensor):
                assert g.device.type == "flagos", sample
                torch.testing.assert_close(g.cpu(), w, equal_nan=True, msg=_describe(sample))
            else:
                assert g == w
        compared += 1
    assert compared > 0
