"""FlagGems callables fitted to the flagos_python route's call (torch_fl.flaggems._adapt) and
the catalog read from a `_FULL_CONFIG` (torch_fl.flaggems._catalog): pure Python, no FlagGems."""

from __future__ import annotations

import types

import pytest
import torch

import torch_fl  # noqa: F401  (the flagos device)
from torch_fl.flaggems import _adapt, _catalog


def test_callable_taking_every_argument_is_used_as_is() -> None:
    def add(A, B, *, alpha=1):  # noqa: ANN001, ANN202
        return A

    assert _adapt.adapt(torch.ops.aten.add.Tensor._schema, add) is add


def test_missing_keyword_only_argument_gets_the_torch_library_call() -> None:
    seen = {}

    def eye(n, *, dtype=None, device=None):  # noqa: ANN001, ANN202 (FlagGems 5.0.2's shape)
        seen.update(n=n, dtype=dtype, device=device)
        return "ok"

    fn = _adapt.adapt(torch.ops.aten.eye.default._schema, eye)
    assert fn is not eye and fn.__wrapped__ is eye
    # The route passes every keyword-only argument; defaults are dropped as torch.library does.
    assert fn(3, dtype=torch.float16, layout=None, device="cpu", pin_memory=None) == "ok"
    assert seen == {"n": 3, "dtype": torch.float16, "device": "cpu"}
    with pytest.raises(TypeError, match="layout"):
        fn(3, dtype=None, layout=torch.sparse_coo, device=None, pin_memory=None)


def test_trailing_default_positionals_are_dropped() -> None:
    def grouped(A, B, offs):  # noqa: ANN001, ANN202 (like _grouped_mm: no bias, out_dtype)
        return (A, B, offs)

    fn = _adapt.adapt(torch.ops.aten._grouped_mm.default._schema, grouped)
    assert fn(1, 2, 3, None, None) == (1, 2, 3)


def test_generator_the_callable_does_not_take_is_left_out() -> None:
    def multinomial(prob, n_samples, with_replacement=False, *, gen=None):  # noqa: ANN001, ANN202
        return (n_samples, with_replacement, gen)

    fn = _adapt.adapt(torch.ops.aten.multinomial.default._schema, multinomial)
    assert fn(None, 4, True, generator=torch.Generator()) == (4, True, None)


def test_incompatible_signature_is_refused() -> None:
    def max_pool2d_backward(grad, inp, indices, kernel, stride, padding, dilation, ceil):  # noqa: ANN001, ANN202, E501
        return grad

    with pytest.raises(_adapt.SignatureMismatch, match="cannot take"):
        _adapt.adapt(torch.ops.aten.max_pool2d_backward.default._schema, max_pool2d_backward)


def _gems(config: tuple, vendor: str = "nvidia") -> types.ModuleType:
    module = types.ModuleType("flag_gems_like")
    module._FULL_CONFIG = config
    module.vendor_name = vendor
    return module


def test_catalog_honours_conditions_and_the_installed_torch() -> None:
    def relu(x):  # noqa: ANN001, ANN202
        return x

    def other(x):  # noqa: ANN001, ANN202
        return x

    cat = _catalog.build(
        _gems(
            (
                ("relu", relu),
                ("relu", other),  # a second entry for the same overload: the first wins
                ("add.Tensor", other, lambda: True),
                ("sqrt", other, lambda: False),
                ("no_such_op.Tensor", other),
            )
        )
    )
    assert cat.entries["aten::relu"].fn is relu
    assert cat.entries["aten::add.Tensor"].config_name == "add.Tensor"
    assert "aten::sqrt" not in cat.entries and "condition" in cat.skipped["sqrt"]
    assert "no such operator" in cat.skipped["no_such_op.Tensor"]


def test_canonical_names() -> None:
    assert _catalog.canonical("add.Tensor") == "aten::add.Tensor"
    assert _catalog.canonical("relu") == "aten::relu"
    assert _catalog.canonical("aten::relu.default") == "aten::relu"
    assert _catalog.aten_overload("aten::relu") is torch.ops.aten.relu.default
    assert _catalog.aten_overload("aten::relu.nope") is None
