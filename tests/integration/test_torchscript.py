"""TorchScript on flagos: scripted and traced code runs the same operators as eager code, and
gets the same results as on CPU.

TorchScript boxes its calls, and builds some arguments differently from Python: the index list
of `x[i] = v` is a List[Tensor] where the schema says Tensor?[].
"""

from __future__ import annotations

import pytest
import torch

import torch_fl

# torch.jit is deprecated in favour of torch.compile and torch.export, not gone: users still run it.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


@pytest.fixture(params=["aliases", "host copies"])
def fallback_mapping(request):
    torch_fl._C._routing_set_force_copy_fallback(request.param == "host copies")
    yield request.param
    torch_fl._C._routing_set_force_copy_fallback(False)


@torch.jit.script
def assign_through_mask(x: torch.Tensor) -> torch.Tensor:
    x[x < 5] = -1.0
    return x


@torch.jit.script
def assign_through_index(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    x[i] = 7.0
    x[i, 1:] += 1.0
    return x[i]


@torch.jit.script
def gather_rows(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    return x[i] * 2


@torch.jit.script
def plus(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


@pytest.mark.usefixtures("fallback_mapping")
def test_scripted_indexing_matches_cpu() -> None:
    x = torch.arange(12.0).reshape(4, 3)
    rows = torch.tensor([0, 2])
    for fn, args in [
        (assign_through_mask, (x,)),
        (assign_through_index, (x, rows)),
        (gather_rows, (x, rows)),
    ]:
        want = fn(*[a.clone() for a in args])
        got = fn(*[a.to("flagos") for a in args])
        assert got.device.type == "flagos"
        torch.testing.assert_close(got.cpu(), want)


def test_scripted_and_traced_models_train_as_on_cpu() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    data, target = torch.randn(32, 8), torch.randint(0, 2, (32,))
    results = {}
    for device in ["cpu", "flagos"]:
        for kind in ["script", "trace"]:
            net = torch.nn.Sequential(*[m for m in model]).to(device)
            net.load_state_dict(model.state_dict())
            x, y = data.to(device), target.to(device)
            compiled = torch.jit.script(net) if kind == "script" else torch.jit.trace(net, x)
            loss = torch.nn.functional.cross_entropy(compiled(x), y)
            loss.backward()
            results[device, kind] = [loss.detach().cpu()] + [
                p.grad.cpu() for p in compiled.parameters()
            ]
            net.zero_grad()
    for kind in ["script", "trace"]:
        for got, want in zip(results["flagos", kind], results["cpu", kind], strict=True):
            torch.testing.assert_close(got, want)


def test_scripted_mixed_devices_are_refused_as_in_eager_code() -> None:
    with pytest.raises(RuntimeError, match="same device"):
        plus(torch.zeros(4, 3, device="flagos"), torch.ones(4, 3))
    if torch.flagos.device_count() < 2:
        return
    with pytest.raises(RuntimeError, match="same device"):
        assign_through_index(
            torch.zeros(4, 3, device="flagos"), torch.tensor([0], device="flagos:1")
        )
