"""Every module of PyTorch's ModuleInfo database, on flagos against CPU.

For each ModuleInfo and each of its constructor/input samples (float64, training and eval
mode), the module is built once, copied to flagos, and both copies run the same inputs from the
same seed. The flagos outputs, the buffers a forward updates (running statistics), and the
gradients of the parameters and inputs must match CPU's, and everything must stay on flagos.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import torch_fl

# On the cpu accelerator the flagos generator draws as CPU's from the same seed; a device
# accelerator's generator does not, so there a sample whose CPU output depends on the seed
# (dropout and friends in training mode) is not compared.
SEEDED = torch_fl.build_config.ACCELERATOR == "cpu"
pytest.importorskip("expecttest", reason="torch's ModuleInfo database needs expecttest")
from torch.testing._internal.common_modules import module_db  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402


def to_flagos(value: Any) -> Any:
    def move(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        return x.detach().to("flagos").requires_grad_(x.requires_grad)

    return tree_map(move, value)


def tensors(value: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)]


def close(have: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert have.device.type == "flagos", f"{what} on {have.device}"
    torch.testing.assert_close(
        have.cpu(), want, equal_nan=True, msg=lambda m: f"{what}: {m}"
    )  # fmt: skip


def draws_random_numbers(module: torch.nn.Module, args: Any, kwargs: Any) -> bool:
    """True when two seeds give different CPU outputs (run on copies: forwards update buffers)."""
    outputs = []
    for seed in (2, 3):
        torch.manual_seed(seed)
        try:
            with torch.no_grad():
                outputs.append(tensors(copy.deepcopy(module)(*args, **kwargs)))
        except Exception:
            return False
    same = (
        torch.equal(a, b)
        or torch.equal(a.isnan(), b.isnan())
        and torch.equal(a.nan_to_num(), b.nan_to_num())
        for a, b in zip(*outputs, strict=True)
    )
    return not all(same)


def check_sample(module_info: Any, sample: Any, index: int, training: bool) -> bool:
    """Compares one sample; False when there is nothing to compare (CPU itself cannot run it,
    or it is random and the flagos generator is not CPU's)."""
    args, kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
    try:
        torch.manual_seed(0)
        cpu_module = module_info.module_cls(*args, **kwargs).to(torch.float64)
    except Exception:
        return False
    cpu_module.train(training)
    flagos_module = copy.deepcopy(cpu_module).to("flagos")
    cpu_args, cpu_kwargs = sample.forward_input.args, sample.forward_input.kwargs
    if not SEEDED and draws_random_numbers(cpu_module, cpu_args, cpu_kwargs):
        return False
    try:
        torch.manual_seed(1)
        expected = cpu_module(*cpu_args, **cpu_kwargs)
    except Exception:
        return False
    flagos_args, flagos_kwargs = to_flagos(cpu_args), to_flagos(cpu_kwargs)
    torch.manual_seed(1)  # the flagos generator draws as CPU's from the same seed
    got = flagos_module(*flagos_args, **flagos_kwargs)

    what = f"{module_info.module_cls.__name__} sample {index} ({'train' if training else 'eval'})"
    for n, (want, have) in enumerate(zip(tensors(expected), tensors(got), strict=True)):
        close(have, want, f"{what}, output {n}")
    for (name, want), have in zip(cpu_module.named_buffers(), flagos_module.buffers(), strict=True):
        close(have, want, f"{what}, buffer {name} after forward")

    differentiable = [t for t in tensors(expected) if t.requires_grad]
    if differentiable:
        sum(t.sum() for t in differentiable).backward()
        sum(t.sum() for t in tensors(got) if t.requires_grad).backward()
        for (name, want), have in zip(
            cpu_module.named_parameters(), flagos_module.parameters(), strict=True
        ):
            if want.grad is not None:
                assert have.grad is not None, f"{what}: no gradient of {name}"
                close(have.grad, want.grad, f"{what}, gradient of {name}")
        for n, (want, have) in enumerate(
            zip(tensors((cpu_args, cpu_kwargs)), tensors((flagos_args, flagos_kwargs)), strict=True)
        ):
            if want.grad is not None:
                close(have.grad, want.grad, f"{what}, gradient of input {n}")
    return True


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("module_info", module_db, ids=lambda m: m.name)
def test_module_matches_cpu(module_info: Any, training: bool) -> None:
    samples = module_info.module_inputs_func(
        module_info, device="cpu", dtype=torch.float64, requires_grad=True, training=training
    )
    compared = 0
    for index, sample in enumerate(samples):
        if sample.forward_input is not None:
            compared += check_sample(module_info, sample, index, training)
    if compared == 0:
        reason = "no sample that CPU runs"
        pytest.skip(reason if SEEDED else reason + " without drawing random numbers")
