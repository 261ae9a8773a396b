"""Parameters keep their identity across `module.to("flagos")`, as across `.to("cuda")`.

Module.to() keeps a Parameter object (and every tie to it, and every optimizer holding it) by
`param.data = moved` when `torch._has_compatible_shallow_copy_type` allows it; PyTorch's own
answer leaves PrivateUse1 out, so flagos registers its own (csrc/aten/native/minimal.cpp).
Without it each module got a new Parameter and shared weights came out untied.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn


class TiedModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.head = nn.Linear(8, 16, bias=False)
        self.head.weight = self.embed.weight  # tied, as language models do

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(ids)))


@pytest.fixture
def swap_on_conversion():
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    yield
    torch.__future__.set_swap_module_params_on_conversion(previous)


def _train(model: nn.Module, device: str, steps: int = 3) -> list[float]:
    torch.manual_seed(1)
    ids = torch.randint(0, 16, (4, 6)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _reference() -> tuple[TiedModel, list[float]]:
    torch.manual_seed(0)
    model = TiedModel()
    return model, _train(copy.deepcopy(model), "cpu")


def test_a_plain_move_keeps_the_tie_and_trains_like_cpu() -> None:
    model, expected = _reference()
    moved = copy.deepcopy(model)
    weight = moved.embed.weight
    moved.to("flagos")
    assert moved.head.weight is moved.embed.weight is weight
    assert weight.device.type == "flagos"
    assert len(list(moved.parameters())) == 1
    torch.testing.assert_close(_train(moved, "flagos"), expected)


def test_an_optimizer_made_before_the_move_updates_the_moved_parameters() -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model.to("flagos")
    before = model.weight.detach().cpu().clone()
    model(torch.ones(3, 4, device="flagos")).sum().backward()
    opt.step()
    assert model.weight.device.type == "flagos" and model.weight.grad.device.type == "flagos"
    torch.testing.assert_close(model.weight.detach().cpu(), before - 3.0)


def test_moving_back_and_assigning_data_across_devices() -> None:
    model = nn.Linear(4, 2)
    weight = model.weight
    model.to("flagos").to("cpu")
    assert model.weight is weight and weight.device.type == "cpu"
    t = torch.zeros(3, requires_grad=True)
    t.data = torch.ones(3, device="flagos")
    assert t.device.type == "flagos" and t.requires_grad
    torch.testing.assert_close(t.detach().cpu(), torch.ones(3))


def test_swapping_parameters_on_conversion_keeps_the_tie(swap_on_conversion) -> None:
    model, expected = _reference()
    moved = copy.deepcopy(model).to("flagos")
    assert moved.head.weight is moved.embed.weight
    assert moved.head.weight.device.type == "flagos"
    assert len(list(moved.parameters())) == 1
    torch.testing.assert_close(_train(moved, "flagos"), expected)
