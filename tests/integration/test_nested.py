"""Nested tensors on flagos: the jagged layout (a Python subclass over dense flagos tensors) and
the strided one (the native device's nested kernels over an alias of its buffer) compute as on
the cpu, including nn.TransformerEncoder's inference path with a padding mask."""

from __future__ import annotations

import copy

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


def _strided(device: str) -> torch.Tensor:
    return torch.nested.nested_tensor([p.to(device) for p in PARTS], device=device)


@pytest.mark.parametrize(
    "op",
    [
        lambda t: (t.relu() * 2 + 1).sin(),
        lambda t: t.softmax(-1),
        lambda t: F.linear(t, torch.ones(3, 8, device=t.device), torch.ones(3, device=t.device)),
        lambda t: t.transpose(1, 2).contiguous(),
        lambda t: F.layer_norm(
            t, (8,), torch.ones(8, device=t.device), torch.zeros(8, device=t.device)
        ),
    ],
    ids=["pointwise", "softmax", "linear", "transpose_contiguous", "layer_norm"],
)
def test_strided_operators_match_cpu(op) -> None:
    out, ref = op(_strided("flagos")), op(_strided("cpu"))
    assert out.device.type == "flagos" and out.is_nested and not out.is_sparse
    assert out.layout == ref.layout == torch.strided
    for o, r in zip(out.unbind(), ref.unbind(), strict=True):
        assert o.device.type == "flagos"
        torch.testing.assert_close(o.cpu(), r, rtol=1e-5, atol=1e-5)
    padded = torch.nested.to_padded_tensor(out, 0.0)
    assert padded.device.type == "flagos" and not padded.is_nested
    torch.testing.assert_close(padded.cpu(), torch.nested.to_padded_tensor(ref, 0.0))


def _heads(device: str, lengths=(3, 5), seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    parts = [torch.randn(2, n, 8, generator=gen) for n in lengths]  # (heads, length, dim)
    return torch.nested.nested_tensor([p.to(device) for p in parts], device=device)


def test_strided_scaled_dot_product_attention_matches_cpu() -> None:
    # SDPA asks the device which fused kernel to take before running; that question carries
    # the nested tensors too.
    q, k, v = (_heads("flagos", seed=s) for s in range(3))
    out = F.scaled_dot_product_attention(q, k, v)
    ref = F.scaled_dot_product_attention(*(_heads("cpu", seed=s) for s in range(3)))
    assert out.device.type == "flagos" and out.is_nested
    for o, r in zip(out.unbind(), ref.unbind(), strict=True):
        torch.testing.assert_close(o.cpu(), r, rtol=1e-5, atol=1e-5)


def test_strided_scaled_dot_product_attention_refuses_what_cpu_refuses() -> None:
    # A transposed nested tensor is not contiguous: the same error as on the cpu.
    for device in ("cpu", "flagos"):
        q = _heads(device).transpose(1, 2)
        with pytest.raises(RuntimeError, match="must be contiguous"):
            F.scaled_dot_product_attention(q, q, q)


def test_strided_in_place_writes_the_flagos_buffer() -> None:
    nt, ref = _strided("flagos"), _strided("cpu")
    nt.mul_(3).add_(1)
    ref.mul_(3).add_(1)
    for o, r in zip(nt.unbind(), ref.unbind(), strict=True):
        torch.testing.assert_close(o.cpu(), r)


def test_transformer_encoder_with_a_padding_mask_matches_cpu() -> None:
    # Eval mode with a key padding mask takes nn.TransformerEncoder's nested-tensor path (its
    # default, enable_nested_tensor=True): padded positions come back as zeros, as on the cpu.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 2).eval()
    x = torch.randn(3, 5, 8)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True], [False] * 4 + [True]])
    on_flagos = copy.deepcopy(enc).to("flagos")
    with torch.no_grad():
        want = enc(x, src_key_padding_mask=mask)
        got = on_flagos(x.to("flagos"), src_key_padding_mask=mask.to("flagos"))
    assert got.device.type == "flagos"
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(got[1, 3:].cpu(), torch.zeros(2, 8))


def test_strided_moves_and_copies_between_devices() -> None:
    nt = _strided("cpu")
    on_flagos = nt.to("flagos")
    assert on_flagos.is_nested and on_flagos.device.type == "flagos"
    back = on_flagos.cpu()
    assert back.device.type == "cpu"
    for a, b in zip(back.unbind(), nt.unbind(), strict=True):
        assert torch.equal(a, b)
    assert torch.empty_like(on_flagos, device="cpu").device.type == "cpu"
    for like in [torch.empty_like, torch.ones_like]:
        assert like(on_flagos, device="cpu").device.type == "cpu"
        if torch.flagos.device_count() > 1:
            assert like(on_flagos, device="flagos:1").device == torch.device("flagos", 1)
    ones = torch.ones_like(on_flagos, device="cpu")
    for a, b in zip(ones.unbind(), nt.unbind(), strict=True):
        assert torch.equal(a, torch.ones_like(b))
    target = torch.nested.nested_tensor([torch.zeros_like(p) for p in PARTS], device="flagos")
    target.copy_(on_flagos)
    for a, b in zip(target.unbind(), nt.unbind(), strict=True):
        assert torch.equal(a.cpu(), b)


def test_strided_gradients_match_cpu() -> None:
    # A leaf's gradient accumulator asks for the nested sizes through an operator of its own;
    # joining the leaf's history inside a routed call deadlocked on the leaf's lock.
    grads = {}
    for device in ["cpu", "flagos"]:
        x = torch.nested.nested_tensor([p.to(device) for p in PARTS], requires_grad=True)
        assert not x.detach().requires_grad
        first = (x * 2).unbind()[0]
        loss = torch.nested.to_padded_tensor(x * 3, 0.0).sum() + first.sum()
        loss.backward()
        grads[device] = [g.cpu() for g in x.grad.unbind()]
    for got, want in zip(grads["flagos"], grads["cpu"], strict=True):
        torch.testing.assert_close(got, want)
