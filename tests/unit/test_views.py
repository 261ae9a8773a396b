"""Views on flagos share storage with their base, track `_base`, and carry autograd."""

from __future__ import annotations

import pytest
import torch


def pair(*shape: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    cpu = torch.arange(int(torch.tensor(shape).prod()), dtype=dtype).reshape(shape).clone()
    return cpu.to("flagos"), cpu


VIEWS = {
    "view": lambda t: t.view(4, 6),
    "view_flat": lambda t: t.view(-1),
    "reshape": lambda t: t.reshape(6, 4),
    "transpose": lambda t: t.transpose(0, 1),
    "t": lambda t: t.t(),
    "permute": lambda t: t.permute(1, 0),
    "slice": lambda t: t[1:3, ::2],
    "select": lambda t: t[2],
    "narrow": lambda t: t.narrow(1, 2, 3),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "squeeze": lambda t: t.unsqueeze(1).squeeze(1),
    "expand": lambda t: t[:, :1].expand(4, 5),
    "as_strided": lambda t: t.as_strided((3, 3), (7, 1), 2),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "diagonal": lambda t: t.diagonal(),
    "unbind0": lambda t: t.unbind(0)[1],
    "split": lambda t: t.split(2, dim=1)[1],
    "chunk": lambda t: t.chunk(2, dim=0)[0],
    "movedim": lambda t: t.movedim(0, 1),
    "view_dtype": lambda t: t.view(torch.int32),
    "flatten": lambda t: t.flatten(),
    "mT": lambda t: t.mT,
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_shares_storage_and_matches_cpu(name: str) -> None:
    fn = VIEWS[name]
    base, base_cpu = pair(4, 6)
    v = fn(base)
    v_cpu = fn(base_cpu)
    assert v.device == base.device
    assert v.shape == v_cpu.shape and v.stride() == v_cpu.stride()
    assert v.storage_offset() == v_cpu.storage_offset()
    assert v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    # view tracking as on CPU (view(dtype) is the one op here that CPU does not track)
    assert v._is_view() == v_cpu._is_view()
    assert (v._base is base) == (v_cpu._base is base_cpu)
    if name != "view_dtype":
        assert v._is_view() and v._base is base
    assert torch.equal(v.cpu(), v_cpu)


@pytest.mark.parametrize(
    "name",
    [
        "view",
        "transpose",
        "slice",
        "select",
        "narrow",
        "as_strided",
        "unfold",
        "diagonal",
        "permute",
    ],
)
def test_writes_through_view_reach_base(name: str) -> None:
    fn = VIEWS[name]
    base, base_cpu = pair(4, 6)
    fn(base).mul_(-1)
    fn(base_cpu).mul_(-1)
    assert torch.equal(base.cpu(), base_cpu)
    base.add_(100)
    base_cpu.add_(100)
    assert torch.equal(fn(base).cpu(), fn(base_cpu))


def test_view_of_view_keeps_root_base() -> None:
    base, _ = pair(4, 6)
    v1 = base.t()
    v2 = v1[1:]
    v3 = v2.unsqueeze(0)
    assert v3._base is base and v2._base is base
    v3.zero_()
    assert torch.equal(base.t()[1:].cpu(), torch.zeros(5, 4))


def test_non_views_do_not_share() -> None:
    base, _ = pair(4, 6)
    for t in (base.clone(), base.t().contiguous(), base + 0, base.reshape(4, 6).clone()):
        assert not t._is_view()
        assert t.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    # reshape of a non-contiguous tensor copies, as on CPU
    r = base.t().reshape(-1)
    assert r.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert torch.equal(r.cpu(), pair(4, 6)[1].t().reshape(-1))


def test_contiguous_of_contiguous_is_self() -> None:
    base, _ = pair(3, 3)
    assert base.contiguous() is base
    assert not base.t().is_contiguous()
    assert base.t().contiguous().is_contiguous()


def test_as_strided_overlapping_and_offset() -> None:
    base, base_cpu = pair(10)
    win = base.as_strided((4, 3), (2, 1), 1)
    win_cpu = base_cpu.as_strided((4, 3), (2, 1), 1)
    assert torch.equal(win.cpu(), win_cpu)
    assert win.storage_offset() == 1


def test_unfold_values_and_storage() -> None:
    base, base_cpu = pair(2, 10)
    u = base.unfold(1, 4, 3)
    assert torch.equal(u.cpu(), base_cpu.unfold(1, 4, 3))
    assert u.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()


def test_view_errors_match_cpu() -> None:
    base, base_cpu = pair(4, 6)
    with pytest.raises(RuntimeError):
        base_cpu.t().view(-1)
    with pytest.raises(RuntimeError, match="view"):
        base.t().view(-1)
    with pytest.raises(RuntimeError):
        base.view(5, 5)


def test_autograd_through_views() -> None:
    x_cpu = torch.randn(4, 6, generator=torch.Generator().manual_seed(0), requires_grad=True)
    x = x_cpu.detach().to("flagos").requires_grad_()

    def f(t: torch.Tensor) -> torch.Tensor:
        a = t.view(6, 4).t()[1:, ::2]
        b = t.unfold(1, 3, 3).sum(-1)
        c = t.as_strided((2, 2), (6, 1), 1)
        return (a * a).sum() + (b.exp()).sum() + c.sum() * 3 + t.diagonal().sum()

    f(x).backward()
    f(x_cpu).backward()
    assert x.grad.device == x.device
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)


def test_inplace_on_view_updates_base_autograd() -> None:
    leaf_cpu = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    leaf = leaf_cpu.detach().to("flagos").requires_grad_()

    def f(t: torch.Tensor) -> torch.Tensor:
        y = t * 2
        y[1].mul_(3)
        y.t()[0].add_(1)
        return (y**2).sum()

    f(leaf).backward()
    f(leaf_cpu).backward()
    torch.testing.assert_close(leaf.grad.cpu(), leaf_cpu.grad)


def test_view_grad_fn_is_view_backward() -> None:
    x = torch.ones(2, 3, device="flagos", requires_grad=True)
    v = x.view(3, 2)
    assert v.grad_fn is not None and "View" in type(v.grad_fn).__name__
    t = x.t()
    assert t.grad_fn is not None and "T" in type(t.grad_fn).__name__
    y = x * 1
    y.t().mul_(2)
    assert y.grad_fn is not None


def test_detach_shares_storage() -> None:
    x = torch.ones(3, device="flagos", requires_grad=True)
    d = x.detach()
    assert d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    d.zero_()
    assert float(x.detach().sum()) == 0.0


def test_native_and_flagos_views_share_memory_both_ways() -> None:
    # The zero-copy bridges other components use (_flagos_to_cuda_view on CUDA builds). The
    # native tensor keeps its memory: the flagos view shares it, never takes it over.
    import torch_fl

    native_type = torch_fl._C._native_device_type()
    expected = torch.arange(6.0).reshape(2, 3)
    native = expected.clone().to(native_type)
    as_flagos = torch_fl._C._native_to_flagos_view(native, 0)
    assert as_flagos.device == torch.device("flagos", 0)
    assert as_flagos.data_ptr() == native.data_ptr()
    torch.testing.assert_close(native.cpu(), expected)
    as_flagos.mul_(2)
    torch.testing.assert_close(native.cpu(), expected * 2)
    back = torch_fl._C._flagos_to_native_view(as_flagos)
    assert back.device.type == native_type and back.data_ptr() == native.data_ptr()
    back.add_(1)
    torch.testing.assert_close(as_flagos.cpu(), expected * 2 + 1)
    del native, back  # the flagos view keeps the memory alive
    torch.testing.assert_close(as_flagos.cpu(), expected * 2 + 1)
    with pytest.raises(RuntimeError, match="_native_to_flagos_view expects a"):
        torch_fl._C._native_to_flagos_view(as_flagos, 0)
    with pytest.raises(RuntimeError, match="_flagos_to_native_view expects a flagos tensor"):
        torch_fl._C._flagos_to_native_view(expected)
