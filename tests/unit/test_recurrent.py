"""Recurrent layers on flagos match CPU, forward and backward. ATen runs PrivateUse1 LSTM/GRU
cells through the fused-cell operators, which only CUDA implements natively; without the
`cuda` route flagos computes them itself (csrc/aten/native/rnn_cells.cpp)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import torch_fl  # noqa: F401

TOL = {"rtol": 1e-4, "atol": 1e-5}


def _flatten(out: torch.Tensor | tuple) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for part in out for t in _flatten(part)]


def _compare(module: nn.Module, inputs: tuple, create_graph: bool = False) -> None:
    flagos_module = copy.deepcopy(module).to("flagos")
    results = {}
    for device, m in (("cpu", module), ("flagos", flagos_module)):
        args = tuple(
            tuple(t.to(device).requires_grad_() for t in a)
            if isinstance(a, tuple)
            else a.to(device).requires_grad_()
            for a in inputs
        )
        flat = _flatten(m(*args))
        loss = sum(
            (o * torch.linspace(-1, 1, o.numel(), device=device).view_as(o)).sum() for o in flat
        )
        leaves = [t for a in args for t in (a if isinstance(a, tuple) else (a,))]
        grads = torch.autograd.grad(loss, [*leaves, *m.parameters()], create_graph=create_graph)
        if create_graph:  # second order: the gradient of the gradients' sum
            grads = torch.autograd.grad(sum(g.square().sum() for g in grads), list(m.parameters()))
        results[device] = [o.detach().cpu() for o in flat] + [g.detach().cpu() for g in grads]
    for f, c in zip(results["flagos"], results["cpu"], strict=True):
        torch.testing.assert_close(f, c, **TOL)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layers_match_cpu(kind: str, bias: bool) -> None:
    torch.manual_seed(0)
    layer = getattr(nn, kind)(5, 7, num_layers=2, bias=bias, batch_first=True)
    _compare(layer, (torch.randn(3, 4, 5),))


def test_lstm_with_initial_state_and_packed_sequences_matches_cpu() -> None:
    torch.manual_seed(1)
    lstm = nn.LSTM(4, 6, bidirectional=True)
    _compare(lstm, (torch.randn(5, 2, 4), (torch.randn(2, 2, 6), torch.randn(2, 2, 6))))
    packed = {}
    for device in ("cpu", "flagos"):
        m = copy.deepcopy(lstm).to(device)
        seq = nn.utils.rnn.pack_padded_sequence(
            torch.randn(5, 2, 4, generator=torch.Generator().manual_seed(2)).to(device),
            torch.tensor([5, 3]),
        )
        packed[device] = m(seq)[0].data.cpu()
    torch.testing.assert_close(packed["flagos"], packed["cpu"], **TOL)


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_recurrent_cells_match_cpu(kind: str) -> None:
    torch.manual_seed(3)
    cell = getattr(nn, kind)(5, 7)
    state = (torch.randn(2, 7), torch.randn(2, 7)) if kind == "LSTMCell" else torch.randn(2, 7)
    _compare(cell, (torch.randn(2, 5), state))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_double_backward_matches_cpu(kind: str) -> None:
    torch.manual_seed(4)
    _compare(getattr(nn, kind)(3, 4), (torch.randn(2, 1, 3),), create_graph=True)


N, H = 3, 4
_LSTM = torch.ops.aten._thnn_fused_lstm_cell
_GRU = torch.ops.aten._thnn_fused_gru_cell


def _gates(count: int, rows: int = N, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(rows, count * H, device="flagos", dtype=dtype)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: _LSTM(_gates(4), _gates(4), _gates(1, rows=1)), "prev_hidden.*12 elements"),
        (lambda: _LSTM(_gates(4), _gates(4, rows=1), _gates(1)), "same size"),
        (
            lambda: _LSTM(_gates(4), _gates(4), _gates(1), _gates(1, 1)[0, :1], _gates(1, 1)[0]),
            "input_bias.*16 elements",
        ),
        (lambda: _LSTM(_gates(4), _gates(4), _gates(1, dtype=torch.float64)), "scalar type"),
        (lambda: _GRU(_gates(3), _gates(3), _gates(1, dtype=torch.float64)), "scalar type"),
        (lambda: _GRU(_gates(3), _gates(3), _gates(1, rows=2)), "prev_hidden.*12 elements"),
    ],
    ids=["lstm_state", "lstm_hidden_gates", "lstm_bias", "lstm_dtype", "gru_dtype", "gru_state"],
)
def test_fused_cells_check_their_arguments_as_cuda_does(call, match: str) -> None:
    # nn.LSTMCell / nn.GRUCell check first; a direct call of the aten operator must not
    # broadcast a wrongly shaped state or bias, nor promote another dtype.
    with pytest.raises(RuntimeError, match=match):
        call()
