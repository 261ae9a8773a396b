"""Nested tensors on flagos: the jagged layout computes as on the cpu; the strided nested
layout, which has no flagos kernels, says to use the jagged one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

PARTS = [torch.randn(2, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]
PARTS[1] = torch.randn(5, 8, generator=torch.Generator().manual_seed(7))


def _jagged(device: str) -> torch.Tensor:
    return torch.nested.nested_tensor(
        [p.to(device) for p in PARTS], layout=torch.jagged, device=device
    )


@pytest.mark.parametrize(
    "op",
    [
        lambda t: (t.relu() * 2 + 1).sin(),
        lambda t: F.linear(t, torch.ones(4, 8, device=t.device)),
        lambda t: t.softmax(-1),
        lambda t: F.layer_norm(t, (8,)),
    ],
    ids=["pointwise", "linear", "softmax", "layer_norm"],
)
def test_jagged_operators_match_cpu(op) -> None:
    out, ref = op(_jagged("flagos")), op(_jagged("cpu"))
    assert out.device.type == "flagos" and out.is_nested
    for o, r in zip(out.unbind(), ref.unbind(), strict=True):
        assert o.device.type == "flagos"
        torch.testing.assert_close(o.cpu(), r, rtol=1e-5, atol=1e-5)
    padded = torch.nested.to_padded_tensor(out, 0.0)
    torch.testing.assert_close(padded.cpu(), torch.nested.to_padded_tensor(ref, 0.0))


def test_jagged_gradients_match_cpu() -> None:
    grads = []
    for device in ("cpu", "flagos"):
        w = torch.ones(8, device=device, requires_grad=True)
        t = _jagged(device)
        torch.nested.to_padded_tensor(t * w, 0.0).sum().backward()
        grads.append(w.grad)
    torch.testing.assert_close(grads[1].cpu(), grads[0])


def test_strided_nested_operators_say_to_use_the_jagged_layout() -> None:
    nt = torch.nested.nested_tensor([p.to("flagos") for p in PARTS], device="flagos")
    with pytest.raises(NotImplementedError, match=r"aten::add.*layout=torch.jagged"):
        nt + 1
