"""Every operator of PyTorch's OpInfo database, on flagos against the native device.

For each OpInfo, its sample inputs are made twice from one seed, for the native device (`cpu`
on the cpu accelerator, `cuda` on the cuda accelerator) and for flagos, and the flagos sample
gets the native sample's values. The operator's flagos results (forward in several dtypes) must
match the native ones, stay on flagos, and leave the inputs as the native call leaves them
(in-place variants); the gradients of all its floating results, in float64, must match CPU's.

Random operators are compared on the cpu accelerator, seeded before each call (flagos draws
from a CPU generator stream there); on device accelerators they are left out (the device's
generator, tests/unit/test_rng.py). Left out everywhere: sparse layouts (their samples run in
test_sparse_opinfo.py) and uninitialised results (empty*).
A sample whose non-tensor arguments differ between the two draws (a scalar drawn after the
device's tensors) is not comparable and is skipped.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

import torch_fl

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402

NATIVE = "cpu" if torch_fl.build_config.ACCELERATOR == "cpu" else "cuda"
# Gradients are compared with CPU's: in a process with a PrivateUse1 backend, torch's autograd
# engine cannot run a backward over native CUDA tensors (pytorch/pytorch#161129).
GRAD_REFERENCE = "cpu"
# float64 on both sides; a device's kernels sum in another order than CPU's.
GRAD_TOLERANCE = 1e-7 if NATIVE == "cpu" else 1e-6
# Looser on devices where a sample mixes in float32 (cov's float32 `aweights`): native cuda
# differs from CPU there by up to 3e-5 relative, exactly as flagos does (H200, 2026-12-03).
GRAD_TOLERANCE_ON_DEVICES = {"cov": 1e-4}
# Gradients a device computes legitimately otherwise than CPU (H200, 2026-12-03): operators that
# draw random numbers inside (from the device's generator, not CPU's) and a least-squares driver
# CUDA does not have. (Eigenvector signs are the backend's choice; output_process_fn_grad below
# removes them.)
GRAD_DIFFERS_ON_DEVICES = {
    "linalg.lstsq": "CUDA has only the gels driver",
    "nn.functional.fractional_max_pool2d": "draws its pooling regions",
    "nn.functional.fractional_max_pool3d": "draws its pooling regions",
    "nn.functional.multi_head_attention_forward": "samples with dropout",
    "nn.functional.scaled_dot_product_attention": "samples with dropout",
    "pca_lowrank": "randomized algorithm",
    "svd_lowrank": "randomized algorithm",
}
# Operators that draw from the device's generator. On the cpu accelerator flagos draws from a
# CPU generator stream seeded as CPU's, so with one seed before each call they must match
# bit for bit; a device accelerator's stream is the device's, and they are left out there.
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
    "normal.in_place", "normal.number_mean", "rand_like", "randint", "randint_like", "randn",
    "randn_like", "uniform", "nn.functional.alpha_dropout", "nn.functional.dropout",
    "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.feature_alpha_dropout.with_train", "nn.functional.rrelu",
}  # fmt: skip
SEEDED = NATIVE == "cpu"
FORWARD_DTYPES = (torch.float32, torch.bfloat16, torch.complex64, torch.int64, torch.bool)
# Operators whose Python code picks its algorithm by device type, giving flagos a different
# (legitimate) one than the native device in these dtypes.
DEVICE_TYPE_ALGORITHMS = {
    # LinearCrossEntropyOptions._adjust: accumulation dtype per (device type, dtype); devices it
    # does not list accumulate bfloat16 in bfloat16 (cpu: float32).
    "nn.functional.linear_cross_entropy.chunked": (torch.bfloat16,),
    "nn.functional.linear_cross_entropy.chunked_none": (torch.bfloat16,),
}


def op_id(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def compared(op: Any) -> bool:
    # empty*: uninitialised results. jiterator_*: torch.cuda.jiterator kernels, a torch.cuda API
    # for CUDA tensors only (not ATen operators, so nothing reaches flagos' routes).
    return (
        (SEEDED or op_id(op) not in RANDOM_OPS)
        and "empty" not in op.name
        and "sparse" not in op.name
        and not op.name.startswith("jiterator_")
    )


# Results that are uninitialised memory on every device: without dropout the efficient
# attention kernel returns empty philox seed and offset tensors.
UNINITIALIZED_RESULTS = {"torch.ops.aten._efficient_attention_forward": (2, 3)}


# FLAGOS_OPINFO_SHARD="i/n" runs every n-th operator from the i-th (parallel runs on the GPU);
# FLAGOS_OPINFO_DTYPES="float32,int64" narrows the forward dtypes.
_SHARD, _SHARDS = (int(x) for x in os.environ.get("FLAGOS_OPINFO_SHARD", "0/1").split("/"))
OPS = [op for op in op_db if compared(op)][_SHARD::_SHARDS]
if os.environ.get("FLAGOS_OPINFO_DTYPES"):
    FORWARD_DTYPES = tuple(getattr(torch, d) for d in os.environ["FLAGOS_OPINFO_DTYPES"].split(","))


def leaves(sample: Any) -> list[Any]:
    return tree_flatten((sample.input, sample.args, sample.kwargs))[0]


def paired_samples(
    op: Any, dtype: torch.dtype, requires_grad: bool, reference: str = NATIVE
) -> list[tuple[Any, Any]]:
    """(reference, flagos) sample pairs with equal values; pairs that cannot be made equal drop."""
    torch.manual_seed(0)
    native = list(op.sample_inputs(reference, dtype, requires_grad=requires_grad))
    torch.manual_seed(0)
    flagos = list(op.sample_inputs("flagos", dtype, requires_grad=requires_grad))
    pairs = []
    for ns, fs in zip(native, flagos, strict=False):
        nl, fl = leaves(ns), leaves(fs)
        if len(nl) != len(fl):
            continue
        comparable = True
        for a, b in zip(nl, fl, strict=True):
            if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
                comparable = False
            elif isinstance(a, torch.Tensor):
                comparable = a.shape == b.shape and a.dtype == b.dtype
            elif not isinstance(a, torch.device | str):  # devices differ by design
                comparable = a == b or (a != a and b != b)  # NaN equals NaN here
            if not comparable:
                break
        if not comparable:
            continue
        try:
            with torch.no_grad():
                for a, b in zip(nl, fl, strict=True):
                    if isinstance(a, torch.Tensor):
                        b.copy_(a)
        except RuntimeError:  # an expanded (self-overlapping) tensor takes no copy
            continue
        pairs.append((ns, fs))
    return pairs


def tensors(value: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]


def reseed(index: int) -> None:
    if SEEDED:
        torch.manual_seed(index)


def to_host(value: Any) -> Any:
    flat, spec = tree_flatten(value)
    return spec.unflatten([x.cpu() if isinstance(x, torch.Tensor) else x for x in flat])


def assert_on_flagos(value: Any, what: str) -> None:
    for x in tree_flatten(value)[0]:
        if isinstance(x, torch.Tensor):
            assert x.device.type in ("flagos", "cpu"), f"{what} on {x.device}"


def tolerances(dtype: torch.dtype | None) -> dict[str, float]:
    if dtype in (torch.bfloat16, torch.float16):
        return {}  # assert_close's defaults for the dtype
    return {"atol": 1e-5, "rtol": 1e-4}


@pytest.mark.parametrize("op", OPS, ids=op_id)
def test_forward_matches_native(op: Any) -> None:
    compared_samples = 0
    for dtype in FORWARD_DTYPES:
        if dtype not in op.supported_dtypes(NATIVE) or dtype in DEVICE_TYPE_ALGORITHMS.get(
            op_id(op), ()
        ):
            continue
        for index, (ns, fs) in enumerate(paired_samples(op, dtype, requires_grad=False)):
            if not SEEDED and fs.kwargs.get("dropout_p", 0.0) > 0.0:
                continue  # draws its dropout mask: a random operator for this sample
            try:
                reseed(index)
                expected = op(ns.input, *ns.args, **ns.kwargs)
            except Exception:  # the native device refuses it too: nothing to compare
                continue
            reseed(index)
            got = op(fs.input, *fs.args, **fs.kwargs)
            what = f"{op_id(op)} {dtype} sample {index}"
            if "device" not in fs.kwargs:  # (a sample may ask for another device explicitly)
                assert_on_flagos(got, f"{what}: a result")
            for item in UNINITIALIZED_RESULTS.get(op_id(op), ()):
                got, expected = list(got), list(expected)
                got[item] = expected[item] = None
            torch.testing.assert_close(
                to_host(got), to_host(expected), equal_nan=True,
                msg=lambda m, what=what: f"{what}: {m}",
                **tolerances(dtype),
            )  # fmt: skip
            # In-place variants: the inputs end as the native call left them.
            torch.testing.assert_close(
                to_host(tensors(leaves(fs))), to_host(tensors(leaves(ns))), equal_nan=True,
                msg=lambda m, what=what: f"{what}, inputs after the call: {m}", **tolerances(dtype),
            )  # fmt: skip
            compared_samples += 1
    if compared_samples == 0:
        pytest.skip("no sample that the native device runs in the swept dtypes")


def floating_outputs(value: Any) -> list[torch.Tensor]:
    return [
        x
        for x in tree_flatten(value)[0]
        if isinstance(x, torch.Tensor) and x.requires_grad and x.is_floating_point()
    ]


def input_grads(op: Any, sample: Any) -> list[torch.Tensor | None] | None:
    # output_process_fn_grad is the OpInfo's own choice of what to differentiate: for svd and
    # eigh it removes the sign (phase) of the vectors, which each backend picks freely.
    result = sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
    outputs = floating_outputs(result)
    inputs = [t for t in leaves(sample) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outputs or not inputs:
        return None
    total = sum(o.sum() for o in outputs)
    return list(torch.autograd.grad(total, inputs, allow_unused=True))


@pytest.mark.parametrize("op", [op for op in OPS if op.supports_autograd], ids=op_id)
def test_gradients_match_native(op: Any) -> None:
    if torch.float64 not in op.supported_backward_dtypes(NATIVE):
        pytest.skip("no float64 backward on the native device")
    differs = GRAD_DIFFERS_ON_DEVICES.get(op_id(op), GRAD_DIFFERS_ON_DEVICES.get(op.name))
    if NATIVE != "cpu" and differs:  # an entry names an operator and all its variants
        pytest.skip(f"not comparable with CPU: {differs}")
    tolerance = GRAD_TOLERANCE
    if NATIVE != "cpu":
        tolerance = GRAD_TOLERANCE_ON_DEVICES.get(op_id(op), tolerance)
    compared_samples = 0
    pairs = paired_samples(op, torch.float64, requires_grad=True, reference=GRAD_REFERENCE)
    refused: list[str] = []
    for index, (ns, fs) in enumerate(pairs):
        try:
            reseed(index)
            expected = input_grads(op, ns)
        except Exception as error:  # the native device refuses it too: nothing to compare
            refused.append(f"{type(error).__name__}: {str(error)[:120]}")
            continue
        if expected is None:
            continue
        reseed(index)
        got = input_grads(op, fs)
        assert got is not None
        for arg, (want, have) in enumerate(zip(expected, got, strict=True)):
            what = f"{op_id(op)} sample {index}, gradient of tensor input {arg}"
            if want is None:
                assert have is None or not have.any(), f"{what}: flagos has one, native none"
                continue
            assert have is not None, f"{what}: missing on flagos"
            assert have.device.type == "flagos", f"{what}: on {have.device}"
            torch.testing.assert_close(
                have.cpu(), want.cpu(), equal_nan=True, atol=tolerance, rtol=tolerance,
                msg=lambda m, what=what: f"{what}: {m}",
            )  # fmt: skip
        compared_samples += 1
    if compared_samples == 0:
        first = f"; first refusal: {refused[0]}" if refused else ""
        pytest.skip(f"no differentiable sample ({len(pairs)} pairs, {len(refused)} refused{first})")


def cloned(sample: Any) -> tuple[Any, Any, Any]:
    """The sample's input, args and kwargs with every tensor copied: each call starts from
    the sample's values, whatever an earlier call (or a sample sharing a tensor) wrote."""
    return tree_map(
        lambda x: x.clone() if isinstance(x, torch.Tensor) else x,
        (sample.input, sample.args, sample.kwargs),
    )


def packed(outs: list[torch.Tensor], single: bool) -> Any:
    return outs[0] if single else tuple(outs)


@pytest.mark.parametrize("op", [op for op in OPS if op.supports_out], ids=op_id)
def test_out_variant_matches_native(op: Any) -> None:
    # out= tensors of the result's shape, and empty ones the operator must resize; the call
    # returns the caller's own tensors.
    compared_samples = 0
    if torch.float32 not in op.supported_dtypes(NATIVE):
        pytest.skip("no float32 on the native device")
    for index, (ns, fs) in enumerate(paired_samples(op, torch.float32, requires_grad=False)):
        if not SEEDED and fs.kwargs.get("dropout_p", 0.0) > 0.0:
            continue
        n_input, n_args, n_kwargs = cloned(ns)
        try:
            reseed(index)
            expected = op(n_input, *n_args, **n_kwargs)
        except Exception:
            continue
        results = tensors(expected)
        if not results or len(results) != len(tree_flatten(expected)[0]):
            continue  # out= takes tensors only
        single = isinstance(expected, torch.Tensor)
        for empty in (False, True):
            # Zero-filled, not uninitialised: some native out= kernels (fft.ihfftn with a
            # strided out) leave part of it as it was.
            native_out = [t.new_empty(0) if empty else torch.zeros_like(t) for t in results]
            flagos_out = [
                torch.empty(0, dtype=t.dtype, device="flagos")
                if empty
                else torch.zeros_like(t, device="flagos")
                for t in results
            ]
            n_input, n_args, n_kwargs = cloned(ns)
            try:
                reseed(index)
                op(n_input, *n_args, out=packed(native_out, single), **n_kwargs)
            except Exception:
                continue
            try:  # a native out= that disagrees with its own functional form is no reference
                torch.testing.assert_close(native_out, results, equal_nan=True, **tolerances(None))
            except AssertionError:
                continue
            f_input, f_args, f_kwargs = cloned(fs)
            reseed(index)
            returned = op(f_input, *f_args, out=packed(flagos_out, single), **f_kwargs)
            what = f"{op_id(op)} sample {index}, {'empty' if empty else 'sized'} out="
            # (the out= overloads of the *_copy list operators return nothing)
            returned_tensors = tensors(returned) if returned is not None else flagos_out
            for n, (have, want, ret) in enumerate(
                zip(flagos_out, native_out, returned_tensors, strict=True)
            ):
                assert ret is have, f"{what}: result {n} is not the caller's out tensor"
                assert have.device.type == "flagos", f"{what}: out {n} on {have.device}"
                torch.testing.assert_close(
                    have.cpu(), want.cpu(), equal_nan=True,
                    msg=lambda m, what=what, n=n: f"{what}, out {n}: {m}", **tolerances(None),
                )  # fmt: skip
            compared_samples += 1
    if compared_samples == 0:
        pytest.skip("no sample with tensor results that the native device runs")


@pytest.mark.parametrize("op", [op for op in OPS if op.inplace_variant is not None], ids=op_id)
def test_inplace_variant_matches_native(op: Any) -> None:
    compared_samples = 0
    if torch.float32 not in op.supported_dtypes(NATIVE):
        pytest.skip("no float32 on the native device")
    for index, (ns, fs) in enumerate(paired_samples(op, torch.float32, requires_grad=False)):
        n_input, n_args, n_kwargs = cloned(ns)
        if not isinstance(n_input, torch.Tensor):
            continue
        try:
            reseed(index)
            op.inplace_variant(n_input, *n_args, **n_kwargs)
        except Exception:
            continue
        f_input, f_args, f_kwargs = cloned(fs)
        reseed(index)
        returned = op.inplace_variant(f_input, *f_args, **f_kwargs)
        what = f"{op_id(op)} sample {index}, in place"
        assert returned is f_input, f"{what}: the result is not the caller's tensor"
        torch.testing.assert_close(
            f_input.cpu(), n_input.cpu(), equal_nan=True,
            msg=lambda m, what=what: f"{what}: {m}", **tolerances(None),
        )  # fmt: skip
        compared_samples += 1
    if compared_samples == 0:
        pytest.skip("no sample that the native device runs in place")
