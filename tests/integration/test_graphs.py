"""Graph capture and replay of flagos work (torch.flagos.FlagOSGraph, torch.flagos.graph,
make_graphed_callables, torch.accelerator.Graph on torch >= 2.13).

On the cpu accelerator (CI) graphs record the flagos operators and replay them (checked against
eager), device-graph entry points refuse with the reason, and the refusal of a cpu_fallback
operator inside a capture is checked with the copying fallback forced. The rest runs on the
H200 (marker `gpu`): replays against eager flagos and against CUDA graphs of the same work,
memory, pools, RNG, training through graphed callables.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import threading

import pytest
import torch

import torch_fl

ON_CUDA = torch_fl.build_config.ACCELERATOR == "cuda"
HAS_ACCELERATOR_GRAPH = hasattr(torch.accelerator, "Graph")
HAS_FLAGGEMS = importlib.util.find_spec("flag_gems") is not None


# ---- the cpu accelerator: graphs record the operators and replay them ----

host_only = pytest.mark.skipif(ON_CUDA, reason="the cpu accelerator's recorded graphs")


def _host_capture(fn, pool=None):  # noqa: ANN001, ANN202
    g = torch.flagos.FlagOSGraph()
    with torch.flagos.graph(g, pool=pool):
        assert torch.flagos.is_current_stream_capturing()
        out = fn()
    assert not torch.flagos.is_current_stream_capturing()
    return g, out


@host_only
def test_host_graph_replays_a_model_like_eager() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    model.to("flagos")
    static = torch.zeros(3, 8, device="flagos")
    with torch.no_grad():
        g, out = _host_capture(lambda: model(static))
        for step in range(3):
            data = torch.randn(3, 8, generator=torch.Generator().manual_seed(step))
            static.copy_(data)
            address = out.data_ptr()
            g.replay()
            assert out.data_ptr() == address
            torch.testing.assert_close(out.cpu(), reference(data))


@host_only
def test_host_graph_replays_in_place_out_and_backward() -> None:
    counter = torch.zeros(4, device="flagos")
    a = torch.arange(4.0, device="flagos")
    result = torch.empty(4, device="flagos")
    lin = torch.nn.Linear(4, 2).to("flagos")
    x = torch.zeros(3, 4, device="flagos", requires_grad=True)

    def body():  # noqa: ANN202
        counter.add_(1)
        torch.mul(a, 2, out=result)
        loss = lin(x).square().sum()
        return torch.autograd.grad(loss, (lin.weight, x))

    g, (grad_w, grad_x) = _host_capture(body)
    for step in range(2):
        data = torch.randn(3, 4, generator=torch.Generator().manual_seed(step))
        with torch.no_grad():
            x.copy_(data)
            a.fill_(step + 1.0)
        g.replay()
        # Once per replay: the capture itself leaves earlier tensors as they were, as on CUDA.
        assert counter.cpu().tolist() == [step + 1.0] * 4
        assert result.cpu().tolist() == [2.0 * (step + 1)] * 4
        cpu_lin = copy.deepcopy(lin).cpu()
        cpu_x = data.clone().requires_grad_()
        ref_w, ref_x = torch.autograd.grad(cpu_lin(cpu_x).square().sum(), (cpu_lin.weight, cpu_x))
        torch.testing.assert_close(grad_w.cpu(), ref_w)
        torch.testing.assert_close(grad_x.cpu(), ref_x)


@host_only
@pytest.mark.parametrize(
    ("optimizer", "options"),
    [
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
        (torch.optim.Adam, {"lr": 0.01, "capturable": True}),
        (torch.optim.AdamW, {"lr": 0.01, "capturable": True, "foreach": False}),
    ],
    ids=["sgd_momentum", "adam_capturable", "adamw_capturable_loop"],
)
def test_a_whole_training_step_captured_trains_like_eager(optimizer, options) -> None:
    # torch.cuda.graphs' whole-network recipe: warm up eagerly, capture forward, backward and
    # step, then replay per batch. The capture must not step the weights itself (a CUDA
    # capture runs nothing), so the replays follow an eager run batch for batch.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    reference = copy.deepcopy(model)
    model.to("flagos")
    opt = optimizer(model.parameters(), **options)
    cpu_options = {k: v for k, v in options.items() if k != "capturable"}  # the same arithmetic
    ref_opt = optimizer(reference.parameters(), **cpu_options)
    batches = [
        (torch.randn(4, 6, generator=g), torch.randn(4, 2, generator=g))
        for g in [torch.Generator().manual_seed(i) for i in range(5)]
    ]

    def eager_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ref_opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(reference(x), y)
        loss.backward()
        ref_opt.step()
        return loss.detach()

    static_x = batches[0][0].to("flagos")
    static_y = batches[0][1].to("flagos")

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(static_x), static_y)
        loss.backward()
        opt.step()
        return loss

    step()  # warm-up, as the recipe does (it makes the grads and the optimizer state)
    eager_step(*batches[0])
    before = [p.detach().cpu().clone() for p in model.parameters()]
    g, static_loss = _host_capture(step)
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p.detach().cpu(), b)  # the capture stepped nothing
    for x, y in batches[1:]:
        static_x.copy_(x.to("flagos"))
        static_y.copy_(y.to("flagos"))
        g.replay()
        torch.testing.assert_close(static_loss.cpu(), eager_step(x, y))
        for p, ref in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.detach().cpu(), ref.detach())


@host_only
def test_host_graph_random_operators_draw_per_replay_from_the_seed() -> None:
    ones = torch.ones(2000, device="flagos")
    g, out = _host_capture(lambda: torch.nn.functional.dropout(ones, 0.5))
    masks = []
    for _ in range(2):
        torch.flagos.manual_seed(11)
        g.replay()
        first = out.cpu().clone()
        g.replay()
        masks.append((first, out.cpu().clone()))
    assert not torch.equal(*masks[0])  # a fresh mask per replay
    assert torch.equal(masks[0][0], masks[1][0]) and torch.equal(masks[0][1], masks[1][1])


@host_only
@pytest.mark.parametrize(
    "sync",
    [lambda t: t.sum().item(), lambda t: t.cpu(), lambda t: t.nonzero(), lambda t: bool(t[0])],
    ids=["item", "cpu", "nonzero", "bool"],
)
def test_host_graph_refuses_host_synchronisation(sync) -> None:
    t = torch.ones(4, device="flagos")
    g = torch.flagos.FlagOSGraph()
    with pytest.raises(RuntimeError, match="capture"):
        with torch.flagos.graph(g):
            sync(t)
    assert not torch.flagos.is_current_stream_capturing()
    assert not torch_fl._C._capturing_on_this_thread()


@host_only
def test_host_graph_does_not_replay_host_work(tmp_path) -> None:
    host = torch.zeros(2)
    device = torch.zeros(2, device="flagos")

    def body():  # noqa: ANN202
        host.add_(1)  # cpu tensors: run at capture, not replayed (as with CUDA graphs)
        return device.add_(1)

    g, _ = _host_capture(body)
    g.replay()
    g.replay()
    assert host.tolist() == [1.0, 1.0] and device.cpu().tolist() == [2.0, 2.0]
    g.debug_dump(str(tmp_path / "graph.txt"))
    assert (tmp_path / "graph.txt").read_text().split() == ["aten.add_.Tensor"]


@host_only
def test_host_graph_pools_reset_and_misuse() -> None:
    handle = torch.flagos.graph_pool_handle()
    assert handle != torch.flagos.graph_pool_handle()
    x = torch.ones(3, device="flagos")
    g, y = _host_capture(lambda: x * 2, pool=handle)
    assert g.pool() == handle
    g2, _ = _host_capture(lambda: y + 1, pool=g.pool())
    assert g2.pool() == handle
    with torch.flagos.stream(torch.flagos.Stream()):
        with pytest.raises(RuntimeError, match="holds a capture already"):
            g.capture_begin()
    g.reset()
    with pytest.raises(RuntimeError, match="captured nothing"):
        g.pool()
    g, y = _host_capture(lambda: x * 5)
    x.fill_(2.0)
    g.replay()
    assert y.cpu().tolist() == [10.0] * 3
    with pytest.raises(RuntimeError, match="cannot be captured on the default stream"):
        torch.flagos.FlagOSGraph().capture_begin()


def test_replay_needs_a_capture_and_an_empty_capture_warns() -> None:
    # As torch.cuda.CUDAGraph: replay before any capture (or after reset) is an error; a capture
    # of nothing warns, and its replay does nothing.
    g = torch.flagos.FlagOSGraph()
    with pytest.raises(RuntimeError, match="without a preceding"):
        g.replay()
    with pytest.warns(UserWarning, match="is empty"):
        with torch.flagos.graph(g):
            pass
    g.replay()
    g.reset()
    with pytest.raises(RuntimeError, match="without a preceding"):
        g.replay()


@pytest.mark.skipif(ON_CUDA, reason="the refusal is the cpu accelerator's")
def test_cpu_accelerator_refuses_device_graph_entry_points() -> None:
    with pytest.raises(RuntimeError, match="needs a device accelerator.*records and replays"):
        torch.flagos.make_graphed_callables(torch.nn.Linear(2, 2), (torch.ones(2),))


@pytest.mark.skipif(ON_CUDA, reason="the refusal is the cpu accelerator's")
@pytest.mark.skipif(not HAS_ACCELERATOR_GRAPH, reason="torch.accelerator.Graph is torch >= 2.13")
def test_accelerator_graph_reaches_flagos_implementation() -> None:
    # torch's own message would be "not supported"; ours proves the registry found flagos's.
    assert torch.accelerator.current_accelerator().type == "flagos"
    with pytest.raises(RuntimeError, match="torch.accelerator.Graph needs a device accelerator"):
        torch.accelerator.Graph()


def test_graph_context_wants_a_flagos_graph() -> None:
    with pytest.raises(TypeError, match="expects a torch.flagos.FlagOSGraph"):
        torch.flagos.graph(object())


@host_only
def test_graph_takes_torch_cuda_graph_s_keywords() -> None:
    g = torch.flagos.FlagOSGraph()
    x = torch.ones(3, device="flagos")
    with torch.flagos.graph(cuda_graph=g, capture_error_mode="global"):
        y = x * 2
    x.fill_(4.0)
    g.replay()
    assert y.cpu().tolist() == [8.0] * 3
    with pytest.raises(TypeError, match="takes one FlagOSGraph"):
        torch.flagos.graph(g, cuda_graph=g)
    with pytest.raises(NotImplementedError, match="check_input_liveness"):
        torch.flagos.graph(g, check_input_liveness=True)


def test_capture_flag_is_per_thread() -> None:
    seen: list[bool] = []
    torch_fl._C._note_capture_begin()
    try:
        assert torch_fl._C._capturing_on_this_thread()
        worker = threading.Thread(
            target=lambda: seen.append(torch_fl._C._capturing_on_this_thread())
        )
        worker.start()
        worker.join()
    finally:
        torch_fl._C._note_capture_end()
    assert seen == [False]
    assert not torch_fl._C._capturing_on_this_thread()
    torch_fl._C._note_capture_end()  # an unmatched end does not go negative
    assert not torch_fl._C._capturing_on_this_thread()


@host_only
def test_a_failed_end_of_another_graph_keeps_the_capture_marked() -> None:
    g1, g2 = torch.flagos.FlagOSGraph(), torch.flagos.FlagOSGraph()
    x = torch.ones(3, device="flagos")
    with torch.flagos.stream(torch.flagos.Stream()):
        g1.capture_begin()
        with pytest.raises(RuntimeError, match="without capture_begin"):
            g2.capture_end()
        assert torch.flagos.is_current_stream_capturing()
        y = x * 2
        g1.capture_end()
    assert not torch.flagos.is_current_stream_capturing()
    x.fill_(5.0)
    g1.replay()
    assert torch.equal(y.cpu(), torch.full((3,), 10.0))


@pytest.mark.skipif(
    not hasattr(torch.Stream, "is_capturing"), reason="torch.Stream.is_capturing is newer"
)
def test_stream_is_capturing_names_the_capturing_stream() -> None:
    side = torch.flagos.Stream()
    assert not side.is_capturing()
    g = torch.flagos.FlagOSGraph()
    with torch.flagos.graph(g, stream=side):
        assert side.is_capturing()
        assert torch.accelerator.current_stream().is_capturing()
        assert not torch.flagos.default_stream().is_capturing()
        _ = torch.ones(2, device="flagos") + 1
    assert not side.is_capturing()


def test_copying_fallback_inside_a_capture_names_the_operator() -> None:
    """A host-copying cpu_fallback call would break a stream capture; the router says which
    operator did it and how to route it instead, and nothing is computed or left behind."""
    x = torch.randn(8, device="flagos")
    allocated = torch.flagos.memory_allocated()
    torch_fl._C._routing_set_force_copy_fallback(True)
    torch_fl._C._note_capture_begin()
    try:
        with torch_fl.routing.route("aten::exp", "cpu_fallback"):
            with pytest.raises(
                RuntimeError, match=r"aten::exp runs on cpu_fallback.*cannot capture"
            ):
                torch.exp(x)
    finally:
        torch_fl._C._note_capture_end()
        torch_fl._C._routing_set_force_copy_fallback(False)
    assert torch.flagos.memory_allocated() == allocated
    torch.testing.assert_close(torch.exp(x).cpu(), torch.exp(x.cpu()))


def test_copying_fallback_on_another_thread_using_the_capturing_stream_is_refused() -> None:
    """Work another thread queues on a capturing stream (the autograd engine's thread in a
    captured backward) is captured too: the copying fallback is refused there, and only there."""
    x = torch.randn(8, device="flagos")
    side = torch.flagos.Stream()
    results: dict[str, str] = {}

    def call(name: str, stream: torch.Stream) -> None:
        with torch.flagos.stream(stream):
            try:
                torch.exp(x)
                results[name] = "ran"
            except RuntimeError as e:
                results[name] = str(e)

    torch_fl._C._routing_set_force_copy_fallback(True)
    try:
        with torch_fl.routing.route("aten::exp", "cpu_fallback"), torch.flagos.stream(side):
            torch_fl._C._note_capture_begin()
            try:
                for name, stream in (("capturing", side), ("other", torch.flagos.Stream())):
                    worker = threading.Thread(target=call, args=(name, stream))
                    worker.start()
                    worker.join()
            finally:
                torch_fl._C._note_capture_end()
            call("after", side)  # still on cpu_fallback: nothing left marked
    finally:
        torch_fl._C._routing_set_force_copy_fallback(False)
    assert "aten::exp runs on cpu_fallback" in results["capturing"], results
    assert results["other"] == "ran" and results["after"] == "ran", results


# ---- the cuda accelerator: CUDA graphs of flagos work ----


def _mlp(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16)
    ).to(device)


# Eager and graphed training of one model on DEVICE; prints the losses of each as JSON.
GRAPHED_TRAINING = """
import copy, json, torch
device = "DEVICE"
module = torch.flagos if device == "flagos" else torch.cuda
torch.manual_seed(0)
eager = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16)).to(device)
plain = copy.deepcopy(eager)
sample = torch.randn(8, 64, device=device, requires_grad=True)
graphed = module.make_graphed_callables(plain, (sample,))
losses = {"eager": [], "graphed": []}
runs = (("eager", eager, eager), ("graphed", graphed, plain))
optimizers = {name: torch.optim.SGD(params.parameters(), lr=0.05) for name, _, params in runs}
for step in range(4):
    data = torch.randn(8, 64, generator=torch.Generator().manual_seed(step)).to(device)
    target = torch.randn(8, 16, generator=torch.Generator().manual_seed(99 + step)).to(device)
    for name, model, _ in runs:
        optimizers[name].zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizers[name].step()
        losses[name].append(loss.item())
print(json.dumps(losses))
"""


# relu and add on FlagGems' Triton kernels, captured and replayed against eager flagos.
FLAGGEMS_CAPTURE = """
import torch, torch_fl
from torch_fl import flaggems, routing
ops = ["relu", "add.Tensor"]
flaggems.install(ops)
for op in ops:
    routing.set_route(op, "flagos_python")
x = torch.randn(4096, device="flagos")
y = torch.randn(4096, device="flagos")
with torch.flagos.stream(torch.flagos.Stream()):
    torch.relu(x + y)
torch.flagos.synchronize()
routing.reset_stats()
g = torch.flagos.FlagOSGraph()
with torch.flagos.graph(g):
    out = torch.relu(x + y)
assert routing.stats()["aten::relu"] == {"flagos_python": 1}, routing.stats()
for _ in range(3):
    x.normal_()
    g.replay()
    torch.flagos.synchronize()
    expected = torch.relu(x.cpu() + y.cpu())
    torch.testing.assert_close(out.cpu(), expected)
assert routing.stats()["aten::relu"] == {"flagos_python": 1}, routing.stats()
print("captured FlagGems calls replayed")
"""


def _capture(fn, *, pool=None):  # noqa: ANN001, ANN202
    g = torch.flagos.FlagOSGraph()
    with torch.flagos.stream(torch.flagos.Stream()):
        fn()  # warm-up outside the capture
    torch.flagos.synchronize()
    with torch.flagos.graph(g, pool=pool):
        out = fn()
    return g, out


@pytest.mark.gpu
@pytest.mark.skipif(not ON_CUDA, reason="needs the cuda accelerator build")
class TestCudaGraphs:
    def test_replay_matches_eager_and_cuda_graph(self) -> None:
        flagos_model, cuda_model = _mlp("flagos"), _mlp("cuda")
        static_flagos = torch.zeros(4, 64, device="flagos")
        static_cuda = torch.zeros(4, 64, device="cuda")
        with torch.no_grad():
            g, out_flagos = _capture(lambda: flagos_model(static_flagos))
            g_cuda = torch.cuda.CUDAGraph()
            with torch.cuda.stream(torch.cuda.Stream()):
                cuda_model(static_cuda)
            torch.cuda.synchronize()
            with torch.cuda.graph(g_cuda):
                out_cuda = cuda_model(static_cuda)
            for step in range(3):
                data = torch.randn(4, 64, generator=torch.Generator().manual_seed(step))
                static_flagos.copy_(data)
                static_cuda.copy_(data)
                g.replay()
                g_cuda.replay()
                torch.flagos.synchronize()
                assert out_flagos.device == torch.device("flagos", 0)
                eager = flagos_model(data.to("flagos"))
                torch.testing.assert_close(out_flagos.cpu(), eager.cpu())
                assert torch.equal(out_flagos.cpu(), out_cuda.cpu())

    def test_replays_allocate_nothing_and_keep_addresses(self) -> None:
        x = torch.randn(256, 256, device="flagos")
        g, out = _capture(lambda: (x @ x).relu_() + 1)
        torch.flagos.synchronize()
        before = torch.flagos.memory_stats()
        address = out.data_ptr()
        for _ in range(5):
            x.normal_()
            g.replay()
            torch.flagos.synchronize()
            torch.testing.assert_close(out.cpu(), ((x @ x).relu_() + 1).cpu())
        after = torch.flagos.memory_stats()
        assert out.data_ptr() == address
        # the eager checks above allocate and free; the replays themselves add nothing live
        assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"]
        assert torch.flagos.memory_allocated() == torch.cuda.memory_allocated()

    def test_graphs_share_a_pool(self) -> None:
        x = torch.randn(1024, device="flagos")
        g1, y1 = _capture(lambda: x * 2)
        g2, y2 = _capture(lambda: y1 + 1, pool=g1.pool())
        handle = torch.flagos.graph_pool_handle()
        g3, y3 = _capture(lambda: x - 3, pool=handle)
        assert g2.pool() == g1.pool() and g3.pool() == handle
        x.fill_(5.0)
        g1.replay()
        g2.replay()
        g3.replay()
        torch.flagos.synchronize()
        assert y2.cpu().eq(11.0).all() and y3.cpu().eq(2.0).all()

    def test_dropout_replays_draw_like_cuda_graphs(self) -> None:
        """The flagos default generator is the CUDA default generator: a captured dropout draws
        a fresh mask per replay, the same masks a CUDA graph of it draws from the same seed."""
        masks = {}
        for device in ("flagos", "cuda"):
            ones = torch.ones(4096, device=device)
            torch.manual_seed(123)
            if device == "flagos":
                g, out = _capture(lambda o=ones: torch.nn.functional.dropout(o, 0.5))
            else:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.stream(torch.cuda.Stream()):
                    torch.nn.functional.dropout(ones, 0.5)
                torch.cuda.synchronize()
                with torch.cuda.graph(g):
                    out = torch.nn.functional.dropout(ones, 0.5)
            torch.manual_seed(7)
            seen = []
            for _ in range(3):
                g.replay()
                seen.append(out.cpu().clone())
            masks[device] = seen
        assert not torch.equal(masks["flagos"][0], masks["flagos"][1])
        for a, b in zip(masks["flagos"], masks["cuda"], strict=True):
            assert torch.equal(a, b)

    def test_capture_on_the_default_stream_is_refused(self) -> None:
        g = torch.flagos.FlagOSGraph()
        with pytest.raises(RuntimeError, match="cannot be captured on the default stream"):
            g.capture_begin()
        assert not torch.flagos.is_current_stream_capturing()

    def test_capture_state_is_visible(self) -> None:
        x = torch.ones(8, device="flagos")
        seen = []

        def body():  # noqa: ANN202
            seen.append(
                (
                    torch.flagos.is_current_stream_capturing(),
                    torch_fl._C._capturing_on_this_thread(),
                )
            )
            return x + 1

        _capture(body)
        assert seen[-1] == (True, True)
        assert not torch.flagos.is_current_stream_capturing()
        assert not torch_fl._C._capturing_on_this_thread()

    def test_cpu_fallback_inside_capture_is_refused_and_graph_still_works(self) -> None:
        x = torch.randn(64, device="flagos")
        g = torch.flagos.FlagOSGraph()
        with torch_fl.routing.route("aten::exp", "cpu_fallback"):
            with pytest.raises(RuntimeError, match="aten::exp runs on cpu_fallback"):
                with torch.flagos.graph(g):
                    y = x * 2
                    torch.exp(y)
        g.replay()  # the work captured before the refused call
        torch.flagos.synchronize()
        torch.testing.assert_close(y.cpu(), x.cpu() * 2)
        assert not torch_fl._C._capturing_on_this_thread()

    def test_cpu_fallback_in_a_captured_backward_is_refused_on_the_autograd_thread(self) -> None:
        # The backward of a captured forward runs on the autograd engine's device thread, on
        # the capturing stream; a host-copying call there must be refused as on the capturing
        # thread (named), not break the capture inside the CUDA runtime.
        x = torch.randn(64, device="flagos", requires_grad=True)
        g = torch.flagos.FlagOSGraph()
        with torch_fl.routing.route("aten::threshold_backward", "cpu_fallback"):
            with pytest.raises(RuntimeError, match="aten::threshold_backward runs on cpu_fallback"):
                with torch.flagos.graph(g):
                    torch.relu(x * 2).sum().backward()
        assert not torch_fl._C._capturing_on_this_thread()
        assert not torch.flagos.is_current_stream_capturing()
        y = torch.relu(x * 2).sum()  # eager work is unaffected afterwards
        y.backward()
        torch.testing.assert_close(x.grad.cpu(), (x.detach().cpu() > 0).float() * 2)

    def test_make_graphed_callables_trains_like_cuda(self, python_subprocess) -> None:
        """Training through graphed callables gives the losses the same training gives on cuda.
        The cuda reference runs in its own process without torch_fl: torch cannot run a native
        CUDA backward once a PrivateUse1 backend is registered (pytorch/pytorch#161129)."""
        losses = {}
        for device in ("flagos", "cuda"):
            env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "1" if device == "flagos" else "0"}
            result = python_subprocess(GRAPHED_TRAINING.replace("DEVICE", device), env=env)
            assert result.returncode == 0, result.stderr[-3000:]
            losses[device] = json.loads(result.stdout.strip().splitlines()[-1])
        for mode in ("eager", "graphed"):
            assert losses["flagos"][mode] == pytest.approx(losses["cuda"][mode], rel=1e-5)
        # graphed training is training: the first steps match eager exactly
        assert losses["flagos"]["graphed"][0] == losses["flagos"]["eager"][0]

    @pytest.mark.skipif(not HAS_FLAGGEMS, reason="needs FlagGems")
    def test_flaggems_kernels_are_captured(self, python_subprocess) -> None:
        """Triton kernels of the flagos_python route launch on the flagos stream, so a graph
        records them too (a fresh process: importing FlagGems is process-wide)."""
        result = python_subprocess(FLAGGEMS_CAPTURE, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
        assert result.returncode == 0, result.stderr[-3000:]
        assert "captured FlagGems calls replayed" in result.stdout

    @pytest.mark.skipif(not HAS_ACCELERATOR_GRAPH, reason="torch.accelerator.Graph: torch >= 2.13")
    def test_accelerator_graph_captures_flagos_work(self) -> None:
        x = torch.randn(128, device="flagos")
        g = torch.accelerator.Graph()
        with torch.flagos.stream(torch.flagos.Stream()):
            x.sin()
            torch.flagos.synchronize()
            with g:
                y = x.sin()
        x.fill_(0.5)
        g.replay()
        torch.flagos.synchronize()
        torch.testing.assert_close(y.cpu(), torch.full((128,), 0.5).sin())
