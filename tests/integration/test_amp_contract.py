"""Mixed precision on flagos: torch.autocast("flagos") applies CUDA's per-operator policy,
torch.amp.GradScaler("flagos") scales, unscales, skips and updates, and a small training loop
under autocast follows its fp32 twin."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import torch_fl

pytestmark = pytest.mark.amp
DTYPES = [torch.bfloat16, torch.float16]
ON_GPU = torch_fl.build_config.ACCELERATOR != "cpu"


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="flagos")


@pytest.mark.parametrize("dtype", DTYPES)
def test_supported_dtypes_really_autocast(dtype: torch.dtype) -> None:
    assert dtype in torch.flagos.get_amp_supported_dtype()
    with torch.autocast("flagos", dtype=dtype):
        assert torch.mm(_x(4, 8), _x(8, 2)).dtype == dtype
    assert torch.flagos.is_bf16_supported()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "op",
    [
        lambda: torch.mm(_x(4, 8), _x(8, 2)),
        lambda: torch.bmm(_x(2, 4, 8), _x(2, 8, 3)),
        lambda: torch.matmul(_x(4, 8), _x(8, 2)),
        lambda: torch.addmm(_x(2), _x(4, 8), _x(8, 2)),
        lambda: F.linear(_x(4, 8), _x(3, 8), _x(3)),
        lambda: F.conv2d(_x(1, 2, 6, 6), _x(3, 2, 3, 3)),
        lambda: F.scaled_dot_product_attention(_x(1, 2, 4, 8), _x(1, 2, 4, 8), _x(1, 2, 4, 8)),
    ],
    ids=["mm", "bmm", "matmul", "addmm", "linear", "conv2d", "sdpa"],
)
def test_lower_precision_ops_run_in_the_autocast_dtype(op, dtype: torch.dtype) -> None:
    with torch.autocast("flagos", dtype=dtype):
        out = op()
    assert out.dtype == dtype
    assert out.device.type == "flagos"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "op",
    [
        lambda h: torch.exp(h),
        lambda h: torch.log(h.abs() + 1),
        lambda h: torch.rsqrt(h.abs() + 1),
        lambda h: F.layer_norm(h, (h.shape[-1],)),
        lambda h: F.mse_loss(h, torch.zeros_like(h)),
        lambda h: F.softmax(h, dim=-1),
        lambda h: F.log_softmax(h, dim=-1),
        lambda h: torch.cumsum(h, dim=-1),
        lambda h: h.norm(),
    ],
    ids=[
        "exp",
        "log",
        "rsqrt",
        "layer_norm",
        "mse_loss",
        "softmax",
        "log_softmax",
        "cumsum",
        "norm",
    ],
)
def test_fp32_ops_widen_low_precision_inputs(op, dtype: torch.dtype) -> None:
    with torch.autocast("flagos", dtype=dtype):
        h = torch.mm(_x(4, 8), _x(8, 6))
        assert h.dtype == dtype
        assert op(h).dtype == torch.float32


@pytest.mark.parametrize("dtype", DTYPES)
def test_promote_ops_take_the_widest_input(dtype: torch.dtype) -> None:
    with torch.autocast("flagos", dtype=dtype):
        low = torch.mm(_x(4, 8), _x(8, 6))
        wide = _x(4, 6)
        assert torch.addcmul(wide, low, low).dtype == torch.float32
        assert torch.atan2(low, wide).dtype == torch.float32
        assert torch.cat([low, wide]).dtype == torch.float32  # type promotion, not autocast


@pytest.mark.parametrize("dtype", DTYPES)
def test_autocast_does_not_leak_onto_cpu_tensors(dtype: torch.dtype) -> None:
    a, b = torch.randn(4, 8), torch.randn(8, 2)
    with torch.autocast("flagos", dtype=dtype):
        assert torch.mm(a, b).dtype == torch.float32
        assert torch.mm(a.to("flagos"), b.to("flagos")).dtype == dtype
    assert torch.mm(a.to("flagos"), b.to("flagos")).dtype == torch.float32


def _outcome(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor | None, str | None]:
    try:
        return fn(), None
    except RuntimeError as e:
        return None, str(e).splitlines()[0]


def _padding_mask(device: torch.device) -> torch.Tensor:
    return torch.tensor([[False] * 5, [False] * 3 + [True] * 2], device=device)


# torch.nn's transformer modules in eval, whose inference fast paths are fused native kernels
# that call linear, bmm and layer norm inside.
FUSED_LAYERS: dict[str, tuple[Callable[[], torch.nn.Module], Callable]] = {
    "mha": (
        lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True),
        lambda m, x: m(x, x, x)[0],
    ),
    "encoder_layer": (
        lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
        lambda m, x: m(x),
    ),
    "encoder_layer_norm_first": (
        lambda: torch.nn.TransformerEncoderLayer(
            8, 2, 16, dropout=0.0, batch_first=True, norm_first=True
        ),
        lambda m, x: m(x),
    ),
    "encoder_padding_mask": (
        lambda: torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True), 2
        ),
        lambda m, x: m(x, src_key_padding_mask=_padding_mask(x.device)),
    ),
}


@pytest.mark.parametrize("name", sorted(FUSED_LAYERS))
def test_fused_transformer_layers_under_autocast_match_the_native_device(name: str) -> None:
    # Under torch.autocast("flagos") these modules give what the same module gives on the native
    # device under its autocast: the same dtype and values, or the same error. Natively CPU's
    # modules take the fused kernels under CPU's autocast (their operators inside autocast),
    # CUDA's skip them under CUDA's (torch.is_autocast_enabled() reads CUDA's state alone), so
    # flagos's take them too and run them as the unfused path would come out.
    make, call = FUSED_LAYERS[name]
    native = "cuda" if ON_GPU else "cpu"
    torch.manual_seed(0)
    module = make().eval()
    x = torch.randn(2, 5, 8)
    flagos_module = copy.deepcopy(module).to("flagos")
    native_module = module.to(native)
    with torch.no_grad():
        with torch.autocast(native, dtype=torch.bfloat16):
            want, want_error = _outcome(lambda: call(native_module, x.to(native)))
        with torch.autocast("flagos", dtype=torch.bfloat16):
            got, got_error = _outcome(lambda: call(flagos_module, x.to("flagos")))
    assert got_error == want_error
    if want is not None:
        assert got is not None and got.dtype == want.dtype
        got, want = got.float().cpu(), want.float().cpu()
        if name == "encoder_padding_mask":
            # Padded positions are unspecified: the nested fast path leaves zeros there, the
            # unfused path (CUDA's under its autocast) computes them. The rest must agree.
            kept = ~_padding_mask(torch.device("cpu"))
            got, want = got[kept], want[kept]
        torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)


def test_an_autocast_of_the_native_device_alone_does_not_reach_flagos_kernels() -> None:
    make, call = FUSED_LAYERS["mha"]
    mha = make().eval().to("flagos")
    native = "cuda" if ON_GPU else "cpu"
    with torch.no_grad(), torch.autocast(native, dtype=torch.bfloat16):
        assert call(mha, torch.randn(2, 5, 8, device="flagos")).dtype == torch.float32


def test_autocast_disabled_region_and_binary_cross_entropy_banned() -> None:
    with torch.autocast("flagos", dtype=torch.bfloat16):
        with torch.autocast("flagos", enabled=False):
            assert torch.mm(_x(4, 8), _x(8, 2)).dtype == torch.float32
        p = torch.sigmoid(_x(4))
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, torch.rand(4, device="flagos"))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_grad_scaler_finite_step_unscales_and_grows() -> None:
    model = _model().to("flagos")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("flagos", init_scale=1024.0, growth_interval=1)
    x = _x(16, 8)
    with torch.autocast("flagos", dtype=torch.bfloat16):
        loss = model(x).float().square().mean()
    scaler.scale(loss).backward()
    scaled = model[0].weight.grad.detach().clone()
    scaler.unscale_(opt)
    torch.testing.assert_close(model[0].weight.grad.cpu(), scaled.cpu() / 1024.0)
    before = model[0].weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(before.cpu(), model[0].weight.detach().cpu())
    assert scaler.get_scale() == 2048.0
    assert scaler._scale.device.type == "flagos"


def test_grad_scaler_skips_non_finite_steps_and_backs_off() -> None:
    model = _model().to("flagos")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("flagos", init_scale=1024.0)
    with torch.autocast("flagos", dtype=torch.bfloat16):
        loss = model(_x(16, 8)).float().mean()
    scaler.scale(loss).backward()
    model[2].bias.grad[0] = float("nan")
    params = [p.detach().clone() for p in model.parameters()]
    scaler.step(opt)
    scaler.update()
    for before, after in zip(params, model.parameters(), strict=True):
        assert torch.equal(before.cpu(), after.detach().cpu())
    assert scaler.get_scale() == 512.0


@pytest.mark.parametrize("dtype", [torch.bfloat16] + ([torch.float16] if ON_GPU else []))
def test_training_loop_follows_fp32(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    data = torch.randn(64, 8)
    target = data @ torch.randn(8, 4)
    losses: dict[str, list[float]] = {}
    for mode in ("fp32", "amp"):
        model = _model().to("flagos")
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        scaler = torch.amp.GradScaler("flagos", enabled=(mode == "amp" and dtype == torch.float16))
        losses[mode] = []
        for _ in range(30):
            opt.zero_grad()
            with torch.autocast("flagos", dtype=dtype, enabled=(mode == "amp")):
                loss = F.mse_loss(model(data.to("flagos")).float(), target.to("flagos"))
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses[mode].append(loss.item())
    assert losses["amp"][-1] < 0.5 * losses["amp"][0]
    for a, f in zip(losses["amp"], losses["fp32"], strict=True):
        assert abs(a - f) <= 0.05 * f + 0.02
