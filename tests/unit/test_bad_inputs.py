"""Bad inputs get clear errors: device indices and mixed devices (in-process cases)."""

from __future__ import annotations

import pytest
import torch

import torch_fl

F = torch.flagos


def test_wrong_device_index_everywhere() -> None:
    bad = F.device_count()
    pattern = rf"Invalid device flagos:{bad}: this process has {bad} flagos device"
    calls = {
        "empty": lambda: torch.empty(2, device=f"flagos:{bad}"),
        "full": lambda: torch.full((2,), 1.0, device=f"flagos:{bad}"),
        "to": lambda: torch.ones(2).to(f"flagos:{bad}"),
        "set_device": lambda: F.set_device(bad),
        "device_ctx": lambda: F.device(bad).__enter__(),
        "memory": lambda: F.memory_allocated(bad),
        "properties": lambda: F.get_device_properties(bad),
        "generator": lambda: torch.Generator(f"flagos:{bad}"),
        "rng_state": lambda: F.get_rng_state(bad),
        "stream": lambda: F.Stream(bad),
        "accelerator_set": lambda: torch.accelerator.set_device_index(bad),
    }
    for name, call in calls.items():
        with pytest.raises((IndexError, RuntimeError), match=pattern):
            call()
        assert F.current_device() == 0, name


def test_invalid_device_strings() -> None:
    for text in ("flagos:x", "flagos:-1", "flagos:1:2", "flagoss"):
        with pytest.raises(RuntimeError):
            torch.zeros(1, device=text)


BINARY = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: torch.mul(a, b),
    "matmul": lambda a, b: a @ b,
    "cat": lambda a, b: torch.cat([a, b]),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "copy_into": lambda a, b: a.add_(b),
    "index_select": lambda a, b: a.index_select(0, b.long().abs().clamp(max=1)),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_flagos_and_cpu_mix_rejected(name: str) -> None:
    fn = BINARY[name]
    a = torch.ones(2, 2, device="flagos")
    b = torch.ones(2, 2)
    with pytest.raises(
        RuntimeError, match=r"same device.*flagos:0.*cpu|same device.*cpu.*flagos:0"
    ):
        fn(a, b)
    with pytest.raises(RuntimeError, match="same device"):
        fn(b, a) if name != "copy_into" else fn(a.cpu(), a)  # cpu in-place from flagos


@pytest.mark.usefixtures("two_devices")
@pytest.mark.parametrize("name", sorted(BINARY))
def test_flagos0_and_flagos1_mix_rejected(name: str) -> None:
    fn = BINARY[name]
    a = torch.ones(2, 2, device="flagos:0")
    b = torch.ones(2, 2, device="flagos:1")
    with pytest.raises(RuntimeError, match=r"flagos:0.*flagos:1|flagos:1.*flagos:0"):
        fn(a, b)
    with pytest.raises(RuntimeError, match=r"flagos:0.*flagos:1|flagos:1.*flagos:0"):
        fn(b, a)


CONVOLUTIONS = {
    "conv2d": (torch.nn.functional.conv2d, (3, 2, 3, 3)),
    "conv_transpose2d": (torch.nn.functional.conv_transpose2d, (2, 3, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(CONVOLUTIONS))
@pytest.mark.parametrize("stray", ["weight", "bias"])
def test_convolution_with_a_cpu_parameter_is_rejected(name: str, stray: str) -> None:
    # The classic "model not moved" mistake: ATen picks the convolution's backend by the input
    # alone, so flagos must check the parameters itself (CUDA refuses this too).
    conv, weight_shape = CONVOLUTIONS[name]
    x = torch.randn(1, 2, 5, 5, device="flagos")
    weight, bias = torch.randn(weight_shape), torch.randn(3)
    if stray == "bias":
        weight = weight.to("flagos")
    with pytest.raises(RuntimeError, match=rf"same device.*flagos:0 and cpu.*'{stray}'.*module.to"):
        conv(x, weight, bias)


@pytest.mark.usefixtures("two_devices")
def test_convolution_across_flagos_devices_is_rejected() -> None:
    x = torch.randn(1, 2, 5, 5, device="flagos:0", requires_grad=True)
    weight = torch.randn(3, 2, 3, 3, device="flagos:1", requires_grad=True)
    with pytest.raises(RuntimeError, match=r"flagos:0 and flagos:1.*'weight'"):
        torch.nn.functional.conv2d(x, weight)
    # Same-device operands still run, forward and backward, as on CPU.
    w0 = weight.detach().to("flagos:0").requires_grad_()
    out = torch.nn.functional.conv2d(x, w0)
    out.sum().backward()
    x_cpu = x.detach().cpu().requires_grad_()
    w_cpu = weight.detach().cpu().requires_grad_()
    torch.nn.functional.conv2d(x_cpu, w_cpu).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), torch.nn.functional.conv2d(x_cpu, w_cpu))
    torch.testing.assert_close(w0.grad.cpu(), w_cpu.grad)


def test_zero_dim_cpu_tensors_allowed_with_flagos() -> None:
    a_cpu = torch.arange(6.0).reshape(2, 3)
    a = a_cpu.to("flagos")
    scalar = torch.tensor(2.5)
    for fn in (
        lambda x, s: x + s,
        lambda x, s: s * x,
        lambda x, s: torch.where(x > 2, x, s),
        lambda x, s: x.add_(s),
    ):
        expected = fn(a_cpu.clone(), scalar)
        result = fn(a.clone(), scalar)
        assert result.device == a.device
        torch.testing.assert_close(result.cpu(), expected)


@pytest.mark.usefixtures("two_devices")
def test_zero_dim_cpu_tensor_allowed_with_flagos1() -> None:
    a = torch.ones(3, device="flagos:1")
    out = a * torch.tensor(4.0)
    assert out.device == torch.device("flagos", 1)
    assert torch.equal(out.cpu(), torch.full((3,), 4.0))


def test_zero_dim_flagos_tensor_does_not_admit_cpu_tensors() -> None:
    # Only the cpu side may be the 0-dim one, as for cuda.
    zero_dim = torch.tensor(1.0, device="flagos")
    with pytest.raises(RuntimeError, match="same device"):
        zero_dim + torch.ones(3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3) + zero_dim
    both_scalars = zero_dim * torch.tensor(2.0)
    assert both_scalars.device.type == "flagos" and float(both_scalars) == 2.0


# CUDA's generated kernels check that their tensors share a device unless the operator is
# `device_check: NoCheck` (TensorIterator's, which take a 0-dim CPU tensor as a scalar); flagos
# follows the table of them the build reads from torch (cmake/gen_device_check_table.py). On a
# GPU build every case also runs on cuda, the reference. (name: (call, cuda takes the scalar))
HOST_SCALAR_CASES = {
    "index_select": (lambda x, s: x.index_select(0, s.long()), False),
    "clamp with tensor bounds": (lambda x, s: torch.clamp(x, min=s), False),
    "addmm with a 0-dim bias": (lambda x, s: torch.addmm(s, x, x.t()), False),
    "add": (lambda x, s: x + s, True),
    "mul_": (lambda x, s: x.clone().mul_(s), True),
    "where": (lambda x, s: torch.where(x > 2, x, s), True),
    "lerp": (lambda x, s: torch.lerp(x, x * 2, s / 2), True),
    "atan2": (lambda x, s: torch.atan2(x, s), True),
    "masked_fill_": (lambda x, s: x.clone().masked_fill_(x > 2, s), True),
}


@pytest.mark.parametrize("path", ["aliases", "boxed copying"])
@pytest.mark.parametrize("name", sorted(HOST_SCALAR_CASES))
def test_a_zero_dim_cpu_tensor_joins_where_cudas_kernel_takes_it(name: str, path: str) -> None:
    call, taken = HOST_SCALAR_CASES[name]
    native = torch_fl.build_config.ACCELERATOR
    torch_fl._C._routing_set_force_copy_fallback(path != "aliases")
    try:
        for device in ["flagos"] + (["cuda"] if native == "cuda" else []):
            x, scalar = torch.arange(12.0).reshape(4, 3), torch.tensor(1.0)
            if taken:
                torch.testing.assert_close(call(x.to(device), scalar).cpu(), call(x, scalar))
            else:
                with pytest.raises(RuntimeError, match="same device"):
                    call(x.to(device), scalar)
    finally:
        torch_fl._C._routing_set_force_copy_fallback(False)


# A 0-dim CPU tensor may be read beside flagos tensors, never written by a flagos operator (as
# TensorIterator's CPU-scalar rule on cuda): `add` and `sum` have fast kernels, `lerp`'s out=
# and `addcmul_` take the boxed router.
WRITES_A_ZERO_DIM_CPU_TENSOR = {
    "add_out": lambda f, c: torch.add(f, f, out=c),
    "sum_out": lambda f, c: torch.sum(f, 0, out=c),
    "in_place_self": lambda f, c: c.add_(f[0]),
    "lerp_out": lambda f, c: torch.lerp(f, f, 0.5, out=c),
    "addcmul_": lambda f, c: c.addcmul_(f[0], f[0]),
}


@pytest.mark.parametrize("name", sorted(WRITES_A_ZERO_DIM_CPU_TENSOR))
def test_a_zero_dim_cpu_tensor_is_not_written_by_a_flagos_operator(name: str) -> None:
    written = torch.tensor(7.0)
    with pytest.raises(RuntimeError, match="same device.*flagos:0 and cpu"):
        WRITES_A_ZERO_DIM_CPU_TENSOR[name](torch.ones(2, device="flagos"), written)
    assert written.shape == () and float(written) == 7.0


@pytest.mark.usefixtures("two_devices")
@pytest.mark.parametrize("path", ["fast", "boxed copying"])
def test_fill_values_are_read_from_any_device_as_cuda_reads_them(path: str) -> None:
    # fill_.Tensor and masked_fill_.Tensor read their 0-dim value with .item(), so CUDA takes
    # it from another GPU (and fills a cpu tensor from a GPU scalar); other operators refuse.
    # The copying fallback (a device accelerator's cpu_fallback) takes the boxed router.
    torch_fl._C._routing_set_force_copy_fallback(path != "fast")
    try:
        value = torch.tensor(2.5, device="flagos:1")
        mask_cpu = torch.tensor([True, False, True])
        filled = torch.zeros(3, device="flagos:0").fill_(value)
        masked = torch.zeros(3, device="flagos:0").masked_fill_(mask_cpu.to("flagos:0"), value)
        cpu_filled = torch.zeros(3).fill_(value)
        assert filled.device == torch.device("flagos", 0) and cpu_filled.device.type == "cpu"
        torch.testing.assert_close(filled.cpu(), torch.full((3,), 2.5))
        torch.testing.assert_close(cpu_filled, torch.full((3,), 2.5))
        torch.testing.assert_close(masked.cpu(), torch.zeros(3).masked_fill_(mask_cpu, 2.5))
        # index_fill_ reads its value with .item() too, and index_put_ (`x[i] = v`) moves a
        # one-element value to self's device first; a cpu self takes cpu indices.
        index = torch.tensor([0, 2])
        expected = torch.zeros(3).index_fill_(0, index, 2.5)
        for device, idx in (("flagos:0", index.to("flagos:0")), ("cpu", index)):
            by_index, by_mask = torch.zeros(3, device=device), torch.zeros(3, device=device)
            by_index[idx] = value
            by_mask[mask_cpu.to(device)] = value
            index_filled = torch.zeros(3, device=device).index_fill_(0, idx, value)
            for result in (by_index, by_mask, index_filled):
                assert result.device == torch.device(device)
                torch.testing.assert_close(result.cpu(), expected)
        with pytest.raises(RuntimeError, match="flagos:0 and flagos:1"):
            torch.zeros(3, device="flagos:0").index_put_((index.to("flagos:0"),), value.expand(2))
        with pytest.raises(RuntimeError, match="flagos:0 and cpu"):
            torch.zeros(3, device="flagos:0").index_fill_(0, index, value)
        with pytest.raises(RuntimeError, match="flagos:0 and flagos:1"):
            torch.zeros(3, device="flagos:0").add_(value)
        with pytest.raises(RuntimeError, match="flagos:0 and flagos:1"):
            torch.zeros(3, device="flagos:0").fill_(torch.ones(1, device="flagos:1"))
    finally:
        torch_fl._C._routing_set_force_copy_fallback(False)


@pytest.mark.usefixtures("two_devices")
@pytest.mark.parametrize("path", ["aliases", "boxed copying"])
def test_bernoulli_probabilities_may_sit_on_any_device(path: str) -> None:
    # CPU's and CUDA's bernoulli_.Tensor move `p` to self's device themselves.
    torch_fl._C._routing_set_force_copy_fallback(path != "aliases")
    try:
        p_cpu = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0])
        for p in (p_cpu, p_cpu.to("flagos:1"), p_cpu.to("flagos:0")):
            drawn = torch.full((5,), 7.0, device="flagos:0").bernoulli_(p)
            assert drawn.device == torch.device("flagos", 0)
            torch.testing.assert_close(drawn.cpu(), p_cpu)  # probabilities 0 and 1 are exact
        with pytest.raises(RuntimeError, match="flagos:0 and flagos:1"):
            torch.zeros(5, device="flagos:0").add_(p_cpu.to("flagos:1"))  # others still refuse
    finally:
        torch_fl._C._routing_set_force_copy_fallback(False)


@pytest.mark.parametrize("path", ["aliases", "boxed copying"])
def test_a_cpu_tensor_takes_a_flagos_value_only_when_it_is_0_dim(path: str) -> None:
    # index_put_ moves a 0-dim value to self's device; a longer one meets the cpu self in
    # TensorIterator, which refuses it on CUDA.
    torch_fl._C._routing_set_force_copy_fallback(path != "aliases")
    try:
        values = torch.tensor([5.0, 6.0], device="flagos")
        target = torch.zeros(4)
        for accumulate in (False, True):
            with pytest.raises(RuntimeError, match="flagos:0 and cpu.*argument 'self'"):
                target.index_put_((torch.tensor([0, 2]),), values, accumulate=accumulate)
        assert torch.equal(target, torch.zeros(4))
    finally:
        torch_fl._C._routing_set_force_copy_fallback(False)


def test_a_cpu_tensor_filled_from_a_longer_flagos_value_gets_the_kernels_error() -> None:
    # fill_ and index_fill_ check the value's dimensions before anything else, on CUDA too.
    value = torch.ones(2, device="flagos")
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor"):
        torch.zeros(2).fill_(value)
    with pytest.raises(RuntimeError, match="only supports a 0-dimensional value tensor"):
        torch.zeros(2).index_fill_(0, torch.tensor([0]), value)


def test_a_cpu_tensor_indexed_by_flagos_indices_says_where_indices_may_be() -> None:
    with pytest.raises(RuntimeError, match="indices should be either on cpu or on the same device"):
        torch.arange(6.0)[torch.tensor([0, 1], device="flagos")]


def test_cpu_index_tensor_allowed_for_flagos_indexing() -> None:
    src_cpu = torch.arange(10.0)
    src = src_cpu.to("flagos")
    idx = torch.tensor([1, 3, 5])
    assert torch.equal(src[idx].cpu(), src_cpu[idx])
    mask = src_cpu > 4
    assert torch.equal(src[mask].cpu(), src_cpu[mask])


def test_error_messages_name_both_devices() -> None:
    for op in (torch.add, torch.mm, torch.maximum):
        with pytest.raises(RuntimeError, match=r"flagos:0.*cpu|cpu.*flagos:0"):
            op(torch.ones(2, 2, device="flagos"), torch.ones(2, 2))


def test_unsupported_dtype_or_op_is_a_clear_error() -> None:
    x = torch.ones(3, device="flagos")
    with pytest.raises(RuntimeError):
        torch.empty(3, device="flagos", layout=torch.sparse_csr)
    with pytest.raises(TypeError):
        x.to(device="flagos", dtype="float32")


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.quantize_per_tensor(torch.ones(3, device="flagos"), 0.1, 0, torch.qint8),
        lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8).to("flagos"),
        lambda: torch._empty_affine_quantized(
            (2,), scale=0.1, zero_point=0, dtype=torch.quint8, device="flagos"
        ),
    ],
    ids=["kernel_result", "to", "factory"],
)
def test_quantized_tensors_are_refused_with_the_way_out(make) -> None:
    # Never a flagos tensor of a quantized dtype without its quantizer.
    allocated = F.memory_allocated()
    with pytest.raises(NotImplementedError, match="does not hold quantized tensors.*cpu"):
        make()
    assert F.memory_allocated() == allocated


def test_state_is_untouched_after_errors() -> None:
    a = torch.ones(3, device="flagos")
    with pytest.raises(RuntimeError):
        a.add_(torch.ones(3))
    assert torch.equal(a.cpu(), torch.ones(3))
    with pytest.raises(RuntimeError):
        torch.add(a, torch.ones(3), out=a)
    assert torch.equal(a.cpu(), torch.ones(3))


def test_dropout_of_a_complex_tensor_is_refused_as_natively() -> None:
    x = torch.ones(8, dtype=torch.cfloat)
    with pytest.raises(NotImplementedError, match="not implemented for 'ComplexFloat'"):
        torch.nn.functional.dropout(x, 0.5)  # CPU's kernel, as the reference
    with pytest.raises(NotImplementedError, match="not implemented for 'ComplexFloat'"):
        torch.nn.functional.dropout(x.to("flagos"), 0.5)
    # Outside training dropout is the identity, for complex tensors too.
    out = torch.nn.functional.dropout(x.to("flagos"), 0.5, training=False)
    assert torch.equal(out.cpu(), x)
