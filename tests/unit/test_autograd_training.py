"""A small MLP trains on flagos exactly as it trains on CPU, step by step."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import torch_fl


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(8, 16),
        nn.ReLU(),
        nn.Linear(16, 16),
        nn.Tanh(),
        nn.LayerNorm(16),
        nn.Linear(16, 3),
    )


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(42)
    return [
        (torch.randn(12, 8, generator=g), torch.randint(0, 3, (12,), generator=g)) for _ in range(n)
    ]


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
        lambda p: torch.optim.Adam(p, lr=0.01),
        lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=False),
        # The fused kernels (one call per parameter group), as `fused=True` users pick them.
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, fused=True),
        lambda p: torch.optim.Adam(p, lr=0.01, fused=True),
        lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1, amsgrad=True, fused=True),
        lambda p: torch.optim.Adagrad(p, lr=0.05, fused=True),
    ],
    ids=[
        "sgd_momentum",
        "adam",
        "adamw_loop",
        "sgd_fused",
        "adam_fused",
        "adamw_fused",
        "adagrad_fused",
    ],
)
def test_mlp_training_matches_cpu_step_by_step(make_opt) -> None:
    cpu_model = make_model()
    dev_model = copy.deepcopy(cpu_model).to("flagos")
    cpu_opt = make_opt(cpu_model.parameters())
    dev_opt = make_opt(dev_model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    for step, (x, y) in enumerate(batches(5)):
        cpu_opt.zero_grad()
        dev_opt.zero_grad()
        cpu_loss = loss_fn(cpu_model(x), y)
        dev_loss = loss_fn(dev_model(x.to("flagos")), y.to("flagos"))
        assert dev_loss.device.type == "flagos"
        torch.testing.assert_close(dev_loss.cpu(), cpu_loss, msg=f"loss at step {step}")
        cpu_loss.backward()
        dev_loss.backward()
        for (name, p_cpu), p_dev in zip(
            cpu_model.named_parameters(), dev_model.parameters(), strict=True
        ):
            assert p_dev.grad is not None and p_dev.grad.device == p_dev.device
            torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, msg=f"grad {name} step {step}")
        cpu_opt.step()
        dev_opt.step()
        for (name, p_cpu), p_dev in zip(
            cpu_model.named_parameters(), dev_model.parameters(), strict=True
        ):
            torch.testing.assert_close(
                p_dev.detach().cpu(), p_cpu.detach(), msg=f"{name} step {step}"
            )
    for state in dev_opt.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                assert value.device.type == "flagos"


@pytest.mark.parametrize("overflow_at", [None, 1])
def test_grad_scaler_with_a_fused_optimizer_matches_cpu(overflow_at: int | None) -> None:
    # The scaler hands its scale and found-inf flag to the fused kernel, which unscales and skips
    # inside; an overflowing step must leave the parameters untouched and halve the scale.
    cpu_model = make_model()
    dev_model = copy.deepcopy(cpu_model).to("flagos")
    runs = []
    for model, device in ((cpu_model, "cpu"), (dev_model, "flagos")):
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, fused=True)
        scaler = torch.amp.GradScaler(device, init_scale=256.0, growth_interval=1)
        scales = []
        for step, (x, y) in enumerate(batches(3)):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            scaler.scale(loss).backward()
            if step == overflow_at:
                next(model.parameters()).grad[0, 0] = float("inf")
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        runs.append((scales, [p.detach().cpu() for p in model.parameters()]))
    (cpu_scales, cpu_params), (dev_scales, dev_params) = runs
    assert dev_scales == cpu_scales
    if overflow_at is not None:
        assert cpu_scales[overflow_at] < cpu_scales[overflow_at - 1]
    for p_dev, p_cpu in zip(dev_params, cpu_params, strict=True):
        torch.testing.assert_close(p_dev, p_cpu)


def test_loss_decreases_on_flagos() -> None:
    model = make_model(1).to("flagos")
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    x, y = batches(1)[0]
    x, y = x.to("flagos"), y.to("flagos")
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5


def test_grad_of_functions_matches_cpu() -> None:
    g = torch.Generator().manual_seed(7)
    a_cpu = torch.randn(5, 4, generator=g, requires_grad=True)
    b_cpu = torch.randn(4, 3, generator=g, requires_grad=True)
    a = a_cpu.detach().to("flagos").requires_grad_()
    b = b_cpu.detach().to("flagos").requires_grad_()

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(a @ b)
        h = torch.cat([h, h.pow(2)], dim=1).softmax(-1)
        return (h.log_softmax(0) * h).sum() + a.norm() + b.max()

    ga, gb = torch.autograd.grad(f(a, b), (a, b))
    ga_cpu, gb_cpu = torch.autograd.grad(f(a_cpu, b_cpu), (a_cpu, b_cpu))
    assert ga.device.type == "flagos"
    torch.testing.assert_close(ga.cpu(), ga_cpu)
    torch.testing.assert_close(gb.cpu(), gb_cpu)


def test_second_order_grad_matches_cpu() -> None:
    x_cpu = torch.linspace(-1, 1, 7, requires_grad=True)
    x = x_cpu.detach().to("flagos").requires_grad_()
    for t in (x, x_cpu):
        (g,) = torch.autograd.grad((t**3).sin().sum(), t, create_graph=True)
        g.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)


def test_no_grad_and_inference_mode() -> None:
    model = make_model().to("flagos")
    x = torch.randn(2, 8, device="flagos")
    with torch.no_grad():
        out = model(x)
    assert out.grad_fn is None and not out.requires_grad
    with torch.inference_mode():
        out2 = model(x)
    assert out2.is_inference()
    torch.testing.assert_close(out.cpu(), out2.cpu())


def test_grad_accumulates_across_backwards() -> None:
    w = torch.ones(3, device="flagos", requires_grad=True)
    (w * 2).sum().backward()
    (w * 3).sum().backward()
    assert torch.equal(w.grad.cpu(), torch.full((3,), 5.0))


def test_backward_on_flagos1_keeps_grads_there(two_devices) -> None:
    model = make_model().to("flagos:1")
    x = torch.randn(4, 8).to("flagos:1")
    model(x).sum().backward()
    for p in model.parameters():
        assert p.grad.device == torch.device("flagos", 1)


def test_dropout_train_eval() -> None:
    torch.flagos.manual_seed(0)
    drop = nn.Dropout(0.5)
    x = torch.ones(1000, device="flagos")
    y = drop(x)
    zeros = int((y == 0).sum())
    assert 300 < zeros < 700
    assert torch.equal(y[y != 0].cpu(), torch.full((1000 - zeros,), 2.0))
    drop.eval()
    assert torch.equal(drop(x).cpu(), x.cpu())


@pytest.mark.parametrize("train", [True, None, False])
@pytest.mark.parametrize("channels_last", [False, True])
def test_native_dropout_mask_like_the_native_device(
    train: bool | None, channels_last: bool
) -> None:
    # A bool mask in the input's layout, as the native kernels and the meta kernel (what
    # torch.compile assumes) make it; on the cpu accelerator also the same draws as CPU's.
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=fmt)
    native = "cuda" if torch_fl.build_config.ACCELERATOR == "cuda" else "cpu"
    torch.manual_seed(3)
    want_out, want_mask = torch.native_dropout(x.to(native), 0.4, train)
    torch.flagos.manual_seed(3)
    out, mask = torch.native_dropout(x.to("flagos"), 0.4, train)
    assert mask.dtype == want_mask.dtype == torch.bool
    assert (out.stride(), mask.stride()) == (want_out.stride(), want_mask.stride())
    if native == "cpu":
        assert torch.equal(mask.cpu(), want_mask) and torch.equal(out.cpu(), want_out)
    else:  # another generator: the mask and the scaling must agree
        expected = x if train is False else torch.where(mask.cpu(), x * (1 / 0.6), 0.0)
        torch.testing.assert_close(out.cpu(), expected)


def test_small_cnn_matches_cpu() -> None:
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    dev_model = copy.deepcopy(cpu_model).to("flagos")
    x = torch.randn(2, 3, 8, 8)
    cpu_out = cpu_model(x)
    dev_out = dev_model(x.to("flagos"))
    torch.testing.assert_close(dev_out.cpu(), cpu_out)
    cpu_out.sum().backward()
    dev_out.sum().backward()
    for p_cpu, p_dev in zip(cpu_model.parameters(), dev_model.parameters(), strict=True):
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_replays_the_dropout_masks(use_reentrant: bool) -> None:
    # The recomputed forward must draw the same dropout masks as the first one, or the
    # gradients are silently wrong: checkpoint stashes the flagos RNG state only when
    # torch.flagos reports itself initialised.
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.5), nn.Linear(32, 8)).to("flagos")
    x = torch.randn(4, 16, device="flagos", requires_grad=True)
    grads = []
    for checkpointed in (True, False):
        torch.manual_seed(1)
        y = checkpoint(block, x, use_reentrant=use_reentrant) if checkpointed else block(x)
        y.square().sum().backward()
        grads.append([x.grad.cpu().clone()] + [p.grad.cpu().clone() for p in block.parameters()])
        x.grad = None
        block.zero_grad(set_to_none=True)
    for with_checkpoint, without in zip(*grads, strict=True):
        torch.testing.assert_close(with_checkpoint, without, rtol=0, atol=0)
    assert torch.flagos._initialized


def test_backward_on_the_calling_thread_with_multithreading_off() -> None:
    """The README's switch for tiny models: with autograd multithreading off, a flagos backward
    runs on the calling thread and its gradients equal the CPU's (and the default's)."""
    import threading

    def grads(device: str, multithreading: bool) -> tuple[list[torch.Tensor], set[int]]:
        model = make_model().to(device)
        threads: set[int] = set()
        x, y = batches(1)[0]
        out = model(x.to(device))
        out.register_hook(lambda g: threads.add(threading.get_ident()))
        with torch.autograd.set_multithreading_enabled(multithreading):
            nn.functional.cross_entropy(out, y.to(device)).backward()
        return [p.grad.cpu() for p in model.parameters()], threads

    reference, _ = grads("cpu", True)
    on_caller, threads = grads("flagos", False)
    assert threads == {threading.get_ident()}
    default, _ = grads("flagos", True)
    for want, got, got_default in zip(reference, on_caller, default, strict=True):
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(got_default, want)
