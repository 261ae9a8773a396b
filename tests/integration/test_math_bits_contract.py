"""Math bits on flagos: conj() and _neg_view() stay lazy views (only a bit is set, storage is
shared), and operators that honour the bits give the same results as on the CPU."""

from __future__ import annotations

import torch

import torch_fl  # noqa: F401


def _complex(n: int = 6) -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    return torch.complex(torch.randn(n, n, generator=g), torch.randn(n, n, generator=g))


def test_conj_is_a_lazy_view() -> None:
    x = _complex().to("flagos")
    y = x.conj()
    assert y.is_conj() and not x.is_conj()
    assert y.device == x.device
    assert y.data_ptr() == x.data_ptr()
    assert y._base is x or y._is_view()
    torch.testing.assert_close(y.resolve_conj().cpu(), x.cpu().conj().resolve_conj())


def test_private_conj_keeps_the_view_lazy() -> None:
    x = _complex().to("flagos")
    y = torch._conj(x)
    assert y.is_conj()
    assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_conj_of_real_is_identity() -> None:
    x = torch.randn(4, device="flagos")
    assert not x.conj().is_conj()
    assert x.conj().data_ptr() == x.data_ptr()


def test_conj_aware_operators_match_cpu() -> None:
    a = _complex()
    b = _complex().t()
    fa, fb = a.to("flagos"), b.to("flagos")
    torch.testing.assert_close((fa.conj() @ fb).cpu(), a.conj() @ b)
    torch.testing.assert_close((fa.conj() + fb.conj()).cpu(), a.conj() + b.conj())
    out = torch.empty_like(fa)
    out.copy_(fa.conj())
    assert not out.is_conj()
    torch.testing.assert_close(out.cpu(), a.conj().resolve_conj())


def test_neg_view_is_lazy_and_resolves() -> None:
    x = torch.randn(5, device="flagos")
    y = torch._neg_view(x)
    assert y.is_neg() and y.data_ptr() == x.data_ptr()
    torch.testing.assert_close(y.resolve_neg().cpu(), -x.cpu())
    torch.testing.assert_close((y * 2).cpu(), -2 * x.cpu())


def test_in_place_write_through_conj_view() -> None:
    a = _complex()
    x = a.to("flagos")
    x.conj().mul_(2)
    torch.testing.assert_close(x.cpu(), a * 2)
