"""Tied parameters across `module.to("flagos")`.

PyTorch keeps a Parameter object (and so every tie to it) across `.to()` only when the new
tensor's type is shallow-copy compatible with the old one, which it decides from a fixed list
of in-tree backends; PrivateUse1 is not on it, so a plain `.to("flagos")` gives each module its
own new Parameter and unties shared weights (GPT-2's embedding and LM head, for one). The two
remedies the docs give are checked here against CPU training of the tied model.
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


def test_swapping_parameters_on_conversion_keeps_the_tie(swap_on_conversion) -> None:
    model, expected = _reference()
    moved = copy.deepcopy(model).to("flagos")
    assert moved.head.weight is moved.embed.weight
    assert moved.head.weight.device.type == "flagos"
    assert len(list(moved.parameters())) == 1
    torch.testing.assert_close(_train(moved, "flagos"), expected)


def test_retying_after_the_move_matches_the_tied_cpu_model() -> None:
    model, expected = _reference()
    moved = copy.deepcopy(model).to("flagos")
    moved.head.weight = moved.embed.weight  # what transformers' model.tie_weights() does
    assert len(list(moved.parameters())) == 1
    torch.testing.assert_close(_train(moved, "flagos"), expected)
