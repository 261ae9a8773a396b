"""Sparse COO tensors on flagos: made, moved, computed on and trained with as on the cpu.

A flagos sparse tensor is a sparse tensor over flagos indices and values; its operators run the
native device's sparse kernels over zero-copy aliases. Every result is compared with the same
operation on cpu sparse tensors. Compressed layouts (CSR, CSC, BSR, BSC) are refused where
they would be made, with a message saying what to do instead.
"""

from __future__ import annotations

import copy
import gc
import io
import pickle
from collections.abc import Callable

import pytest
import torch
import torch.nn as nn

import torch_fl

FLAGOS = torch.device("flagos", 0)


def _sparse(
    shape: tuple[int, ...] = (4, 5),
    nnz: int = 6,
    dense_dims: tuple[int, ...] = (),
    dtype: torch.dtype = torch.float32,
    coalesced: bool = False,
    seed: int = 0,
) -> torch.Tensor:
    """A cpu sparse COO tensor, uncoalesced unless asked (repeated indices included)."""
    g = torch.Generator().manual_seed(seed)
    indices = torch.stack([torch.randint(0, n, (nnz,), generator=g) for n in shape])
    values = torch.randn((nnz, *dense_dims), generator=g).to(dtype)
    s = torch.sparse_coo_tensor(indices, values, (*shape, *dense_dims))
    return s.coalesce() if coalesced else s


def _same(result: torch.Tensor, reference: torch.Tensor, **tol: float) -> None:
    """`result` is on flagos, has `reference`'s layout, dtype and shape, and its values."""
    assert result.device == FLAGOS
    assert result.layout == reference.layout
    assert result.dtype == reference.dtype and result.shape == reference.shape
    if result.layout == torch.sparse_coo:
        assert result._indices().device == FLAGOS and result._values().device == FLAGOS
        result, reference = result.to_dense(), reference.to_dense()
    torch.testing.assert_close(result.cpu(), reference, **tol)


# ---- moving and making -------------------------------------------------------------------------


@pytest.mark.parametrize("coalesced", [False, True], ids=["uncoalesced", "coalesced"])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.int64, torch.complex64], ids=str
)
@pytest.mark.parametrize("dense_dims", [(), (3,)], ids=["plain", "hybrid"])
def test_round_trip_keeps_indices_values_and_flags(coalesced, dtype, dense_dims) -> None:
    s = _sparse(dense_dims=dense_dims, dtype=dtype, coalesced=coalesced)
    f = s.to("flagos")
    assert f.layout == torch.sparse_coo and f.device == FLAGOS
    assert (f.sparse_dim(), f.dense_dim(), f._nnz()) == (s.sparse_dim(), s.dense_dim(), s._nnz())
    assert f.is_coalesced() == s.is_coalesced()
    assert torch.equal(f._indices().cpu(), s._indices())
    assert torch.equal(f._values().cpu(), s._values())
    back = f.cpu()
    assert back.layout == torch.sparse_coo and torch.equal(back.to_dense(), s.to_dense())


def test_parts_are_the_tensors_own() -> None:
    # _values() and _indices() are the sparse tensor's parts, not copies: writing to them
    # changes the tensor, as on the cpu.
    s = _sparse(coalesced=True)
    f = s.to("flagos")
    f._values().mul_(2)
    s._values().mul_(2)
    _same(f, s)
    assert f.values().data_ptr() == f._values().data_ptr()


def test_factories_make_flagos_sparse_tensors() -> None:
    s = _sparse()
    f = torch.sparse_coo_tensor(s._indices().to("flagos"), s._values().to("flagos"), s.shape)
    _same(f, s)
    f = torch.sparse_coo_tensor(s._indices(), s._values(), s.shape, device="flagos")
    _same(f, s)
    e = torch.empty(3, 4, device="flagos", layout=torch.sparse_coo)
    assert e.layout == torch.sparse_coo and e.device == FLAGOS and e._nnz() == 0
    z = torch.zeros(3, 4, device="flagos", layout=torch.sparse_coo)
    _same(z, torch.zeros(3, 4, layout=torch.sparse_coo))
    d = torch.randn(4, 5)
    d[d < 0.3] = 0
    _same(d.to("flagos").to_sparse(), d.to_sparse())
    with pytest.raises(RuntimeError, match="index"):  # invariants are checked as on the cpu
        torch.sparse_coo_tensor(
            torch.tensor([[9]]), torch.ones(1), (3,), device="flagos", check_invariants=True
        )


def test_save_load_pickle_deepcopy_and_repr() -> None:
    f = _sparse(dense_dims=(2,)).to("flagos")
    buffer = io.BytesIO()
    torch.save({"s": f}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)["s"]
    _same(loaded, f.cpu())
    buffer.seek(0)
    assert torch.load(buffer, map_location="cpu")["s"].device.type == "cpu"
    _same(pickle.loads(pickle.dumps(f)), f.cpu())
    _same(copy.deepcopy(f), f.cpu())
    assert "device='flagos:0'" in repr(f) and "sparse_coo" in repr(f)


# ---- operators ---------------------------------------------------------------------------------

DENSE = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
OPS: dict[str, Callable[..., torch.Tensor]] = {
    "to_dense": lambda s, d: s.to_dense(),
    "coalesce": lambda s, d: s.coalesce(),
    "add": lambda s, d: s + s.coalesce(),
    "sub": lambda s, d: s - 2 * s,
    "mul_scalar": lambda s, d: s * 3,
    "mul_sparse": lambda s, d: s * s,
    "div_scalar": lambda s, d: s / 4,
    "neg": lambda s, d: -s,
    "abs": lambda s, d: s.abs(),
    "sin": lambda s, d: s.coalesce().sin(),
    "pow": lambda s, d: s.coalesce().pow(2),
    "transpose": lambda s, d: s.t(),
    "clone": lambda s, d: s.clone(),
    "sum": lambda s, d: torch.sparse.sum(s),
    "sum_dim": lambda s, d: torch.sparse.sum(s, dim=1),
    "softmax": lambda s, d: torch.sparse.softmax(s.coalesce(), dim=1),
    "index_select": lambda s, d: s.index_select(0, torch.tensor([3, 0, 3]).to(d.device)),
    "sparse_mm": lambda s, d: torch.sparse.mm(s, d),
    "mm": lambda s, d: s @ d,
    "addmm": lambda s, d: torch.sparse.addmm(torch.ones(4, 3, device=d.device), s, d),
    "dense_add_sparse": lambda s, d: torch.ones(4, 5, device=d.device) + s,
    "sparse_mask": lambda s, d: torch.ones(4, 5, device=d.device).sparse_mask(s.coalesce()),
    "narrow_copy": lambda s, d: s.narrow_copy(1, 1, 3),
    "unsqueeze": lambda s, d: s.unsqueeze(0),
    "to_double": lambda s, d: s.double(),
}


@pytest.mark.parametrize("name", list(OPS))
def test_operator_matches_cpu(name: str) -> None:
    s = _sparse()
    op = OPS[name]
    _same(op(s.to("flagos"), DENSE.to("flagos")), op(s, DENSE), rtol=1e-5, atol=1e-5)


def test_in_place_results_are_the_callers_tensors() -> None:
    s = _sparse()
    f = s.to("flagos")
    assert f.mul_(2) is f
    s.mul_(2)
    _same(f, s)
    other = _sparse(seed=3)
    assert f.add_(other.to("flagos")) is f  # grows the indices and values
    s.add_(other)
    _same(f, s)
    assert f.zero_() is f
    _same(f, s.zero_())
    g = torch.empty(4, 5, device="flagos", layout=torch.sparse_coo)
    g.copy_(other)  # cpu -> flagos
    _same(g, other)
    h = torch.empty(4, 5, device="flagos", layout=torch.sparse_coo)
    h.copy_(g)  # flagos -> flagos
    _same(h, other)
    dense = torch.zeros(4, 5, device="flagos")
    assert dense.add_(g) is dense
    _same(dense, other.to_dense())


def test_out_argument_is_resized_and_returned() -> None:
    s = _sparse()
    out = torch.empty(0, device="flagos", layout=torch.sparse_coo)
    result = torch.add(s.to("flagos"), s.to("flagos"), out=out)
    assert result is out
    _same(out, s + s)


def test_an_out_argument_that_is_also_an_input_is_one_tensor_to_the_kernel() -> None:
    # torch.smm runs sspaddmm(r, s, d, out=r) on an empty r; the kernel treats r as its input
    # only when it is the same tensor as the output.
    s, d = _sparse((3, 3)), torch.randn(3, 4)
    if torch_fl._C._native_device_type() == "cuda":
        # CUDA has no sspaddmm kernel: flagos refuses what cuda tensors refuse.
        for device in ("cuda", "flagos"):
            with pytest.raises(RuntimeError, match="sspaddmm is not implemented"):
                torch.smm(s.to(device), d.to(device))
        return
    _same(torch.smm(s.to("flagos"), d.to("flagos")), torch.smm(s, d))
    for device in ("cpu", "flagos"):
        r = _sparse((3, 4), nnz=2, seed=1).to(device)
        result = torch.sspaddmm(r, s.to(device), d.to(device), beta=0.5, out=r)
        assert result is r
    want = torch.sspaddmm(_sparse((3, 4), nnz=2, seed=1), s, d, beta=0.5)
    _same(r, want)


# ---- autograd and training ---------------------------------------------------------------------


def test_gradients_through_sparse_operators_match_cpu() -> None:
    s = _sparse(coalesced=True)
    grads = []
    for device in ("cpu", "flagos"):
        values = s._values().clone().to(device).requires_grad_()
        dense = DENSE.clone().to(device).requires_grad_()
        t = torch.sparse_coo_tensor(s._indices().to(device), values, s.shape)
        (torch.sparse.mm(t, dense) ** 2 + t.to_dense().sum()).sum().backward()
        grads.append((values.grad, dense.grad))
    for flagos_grad, cpu_grad in zip(grads[1], grads[0], strict=True):
        assert flagos_grad.device == FLAGOS
        torch.testing.assert_close(flagos_grad.cpu(), cpu_grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["SGD", "SparseAdam", "Adagrad"])
def test_sparse_embedding_training_matches_cpu(optimizer: str) -> None:
    torch.manual_seed(0)
    reference = nn.Embedding(12, 4, sparse=True)
    model = copy.deepcopy(reference).to("flagos")
    opts = [getattr(torch.optim, optimizer)(m.parameters(), lr=0.1) for m in (reference, model)]
    batches = [torch.tensor([1, 5, 5, 9]), torch.tensor([0, 1, 11]), torch.tensor([5, 5])]
    for batch in batches:
        for m, opt, idx in ((reference, opts[0], batch), (model, opts[1], batch.to("flagos"))):
            opt.zero_grad()
            (m(idx) ** 2).sum().backward()
            opt.step()
        assert model.weight.grad.layout == torch.sparse_coo
        assert model.weight.grad.device == FLAGOS
    torch.testing.assert_close(model.weight.detach().cpu(), reference.weight.detach())


# ---- memory ------------------------------------------------------------------------------------


def test_operators_keep_no_memory_alive() -> None:
    s = _sparse(dense_dims=(8,))
    torch.flagos.synchronize()
    gc.collect()
    baseline = torch.flagos.memory_allocated()
    for _ in range(3):
        f = s.to("flagos")
        r = (f + f).coalesce() * 2
        f.mul_(3)
        _ = torch.sparse.sum(r).item()
        del f, r
    gc.collect()
    torch.flagos.synchronize()
    assert torch.flagos.memory_allocated() == baseline


# ---- errors ------------------------------------------------------------------------------------


def test_a_factory_on_a_missing_device_names_the_valid_range() -> None:
    bad = torch.flagos.device_count()
    with pytest.raises(IndexError, match=rf"Invalid device flagos:{bad}"):
        torch.empty(2, 3, device=f"flagos:{bad}", layout=torch.sparse_coo)
    with pytest.raises(IndexError, match=rf"Invalid device flagos:{bad}"):
        _sparse().to(f"flagos:{bad}")


def test_mixing_a_cpu_sparse_tensor_is_the_usual_device_error() -> None:
    s = _sparse()
    with pytest.raises(RuntimeError, match="same device.*flagos:0 and cpu"):
        s.to("flagos") + s


def test_indices_and_values_on_two_devices_are_refused_naming_both() -> None:
    s = _sparse()
    indices, values = s._indices(), s._values()
    for i, v in ((indices.to("flagos"), values), (indices, values.to("flagos"))):
        with pytest.raises(RuntimeError, match=r"backend of indices \(.+\) must match backend of"):
            torch.sparse_coo_tensor(i, v, s.shape)


def test_an_operator_without_a_native_sparse_kernel_says_so() -> None:
    f = _sparse().to("flagos")
    with pytest.raises(NotImplementedError, match=r"aten::cumsum.*no Sparse\w+ kernel"):
        torch.cumsum(f, 0)


COMPRESSED_MESSAGE = "sparse COO layout.*not the compressed ones.*to_sparse_coo"


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(3, 3).to_sparse_csr().to("flagos"),
        lambda: torch.randn(4, 4).to_sparse_bsr((2, 2)).to("flagos"),
        lambda: torch.randn(3, 3).to_sparse_csc().to("flagos"),
        lambda: torch.empty(2, 2, device="flagos", layout=torch.sparse_csr),
        lambda: torch.sparse_csr_tensor(
            torch.tensor([0, 1, 2]), torch.tensor([0, 1]), torch.ones(2), device="flagos"
        ),
        lambda: torch.zeros_like(torch.ones(2, 2, device="flagos"), layout=torch.sparse_csr),
        lambda: torch.zeros_like(torch.ones(2, 2, device="flagos"), layout=torch.sparse_csc),
        lambda: torch.zeros_like(torch.eye(2).to_sparse_csr(), device="flagos"),
    ],
    ids=[
        "csr_to",
        "bsr_to",
        "csc_to",
        "empty_csr",
        "csr_factory",
        "zeros_like_csr",
        "zeros_like_csc",
        "zeros_like_of_cpu_csr",
    ],
)
def test_compressed_layouts_are_refused_where_they_would_be_made(make) -> None:
    with pytest.raises(NotImplementedError, match=COMPRESSED_MESSAGE):
        make()


def test_a_kernel_making_a_compressed_result_is_refused_with_the_way_out() -> None:
    with pytest.raises(RuntimeError, match="strided and sparse COO.*to_sparse_coo"):
        torch.randn(3, 3, device="flagos").to_sparse_csr()


def test_a_second_device_keeps_its_tensors_there(two_devices) -> None:
    s = _sparse()
    f = s.to("flagos:1")
    assert f.device == torch.device("flagos", 1) and f._values().device == f.device
    r = (f * 2).coalesce()
    assert r.device == f.device and r._indices().device == f.device
    torch.testing.assert_close(r.to_dense().cpu(), (s * 2).to_dense())
    with pytest.raises(RuntimeError, match="same device"):
        f + s.to("flagos:0")


@pytest.mark.parametrize("target", ["flagos:1", "cpu", "flagos"])
def test_like_factories_put_their_result_on_the_device_asked_for(target, two_devices) -> None:
    s = _sparse(coalesced=True)
    with torch.flagos.device(1):  # "flagos" is the current device, not the argument's
        made = torch.empty_like(s.to("flagos:0"), device=target)
    want = torch.device("flagos", 1) if target.startswith("flagos") else torch.device(target)
    assert made.device == want and made._values().device == want
    assert made.layout == torch.sparse_coo and made.shape == s.shape
