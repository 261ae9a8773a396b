"""torch.save / torch.load of flagos tensors, modules and state dicts."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from torch import nn


def roundtrip(obj: object, **load_kwargs) -> object:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool]
)
def test_flagos_tensor_roundtrip_stays_on_flagos(dtype: torch.dtype) -> None:
    src = (torch.arange(12) % 3).to(dtype).reshape(3, 4)
    t = src.to("flagos")
    loaded = roundtrip(t)
    assert loaded.device == torch.device("flagos", 0)
    assert loaded.dtype == dtype
    assert torch.equal(loaded.cpu(), src)
    assert loaded.data_ptr() != t.data_ptr()


@pytest.mark.usefixtures("two_devices")
def test_flagos1_tensor_restores_on_flagos1() -> None:
    t = torch.arange(5.0, device="flagos:1")
    loaded = roundtrip(t)
    assert loaded.device == torch.device("flagos", 1)
    assert torch.equal(loaded.cpu(), torch.arange(5.0))
    moved = roundtrip(t, map_location="flagos:0")
    assert moved.device == torch.device("flagos", 0)


@pytest.mark.parametrize("location", ["flagos", "flagos:0", torch.device("flagos")])
def test_cpu_checkpoint_loads_onto_flagos(location: object) -> None:
    src = torch.randn(4, 4)
    loaded = roundtrip(src, map_location=location)
    assert loaded.device.type == "flagos"
    assert torch.equal(loaded.cpu(), src)


def test_flagos_checkpoint_loads_onto_cpu() -> None:
    src = torch.randn(3, 3)
    loaded = roundtrip(src.to("flagos"), map_location="cpu")
    assert loaded.device.type == "cpu"
    assert torch.equal(loaded, src)
    loaded = roundtrip(src.to("flagos"), map_location=lambda storage, loc: storage)
    assert loaded.device.type == "cpu"


def test_views_keep_sharing_after_load() -> None:
    base = torch.arange(10.0, device="flagos")
    view = base[2:5]
    loaded_base, loaded_view = roundtrip((base, view))
    assert loaded_view.untyped_storage().data_ptr() == loaded_base.untyped_storage().data_ptr()
    loaded_view.fill_(-1)
    expected = torch.arange(10.0)
    expected[2:5] = -1
    assert torch.equal(loaded_base.cpu(), expected)


def test_non_contiguous_tensor_roundtrip() -> None:
    src = torch.randn(4, 5)
    loaded = roundtrip(src.to("flagos").t())
    assert loaded.stride() == src.t().stride()
    assert torch.equal(loaded.cpu(), src.t())


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def test_state_dict_roundtrip_through_file(tmp_path: Path) -> None:
    model = make_model().to("flagos")
    model(torch.randn(6, 4, device="flagos"))  # updates BatchNorm running stats
    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    state = torch.load(path, map_location="flagos")
    for key, value in model.state_dict().items():
        assert state[key].device.type == "flagos", key
        assert torch.equal(state[key].cpu(), value.cpu()), key
    fresh = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2)).to(
        "flagos"
    )
    fresh.load_state_dict(state)
    fresh.eval()
    model.eval()
    x = torch.randn(3, 4, device="flagos")
    assert torch.equal(fresh(x).cpu(), model(x).cpu())


def test_cpu_state_dict_into_flagos_model() -> None:
    cpu_model = make_model()
    state = roundtrip(cpu_model.state_dict(), map_location="flagos")
    assert all(v.device.type == "flagos" for v in state.values())
    dev_model = make_model().to("flagos")
    with torch.no_grad():
        for p in dev_model.parameters():
            p.zero_()
    dev_model.load_state_dict(state)
    cpu_model.eval()
    dev_model.eval()
    x = torch.randn(2, 4)
    torch.testing.assert_close(dev_model(x.to("flagos")).cpu(), cpu_model(x))


def test_optimizer_state_roundtrip() -> None:
    model = make_model().to("flagos")
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(4, 4, device="flagos")).sum().backward()
    opt.step()
    state = roundtrip(opt.state_dict())
    for entry in state["state"].values():
        assert entry["exp_avg"].device.type == "flagos"
    fresh = torch.optim.Adam(model.parameters(), lr=0.01)
    fresh.load_state_dict(state)
    for key, entry in opt.state_dict()["state"].items():
        loaded = fresh.state_dict()["state"][key]
        assert torch.equal(loaded["exp_avg"].cpu(), entry["exp_avg"].cpu())


def test_weights_only_load() -> None:
    src = torch.randn(3)
    loaded = roundtrip({"w": src.to("flagos")}, weights_only=True)
    assert loaded["w"].device.type == "flagos"
    assert torch.equal(loaded["w"].cpu(), src)


def test_map_location_to_invalid_device_fails() -> None:
    bad = torch.flagos.device_count()
    with pytest.raises((IndexError, RuntimeError)):
        roundtrip(torch.ones(2), map_location=f"flagos:{bad}")
