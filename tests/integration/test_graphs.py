"""Graph capture and replay of flagos work (torch.flagos.FlagOSGraph, torch.flagos.graph,
make_graphed_callables, torch.accelerator.Graph on torch >= 2.13).

On the cpu accelerator (CI) every entry point refuses with the reason; the refusal of a
cpu_fallback operator inside a capture is checked there with the copying fallback forced. The
rest runs on the H200 (marker `gpu`): replays against eager flagos and against CUDA graphs of the
same work, memory, pools, RNG, training through graphed callables.
"""

from __future__ import annotations

import importlib.util
import json
import threading

import pytest
import torch

import torch_fl

ON_CUDA = torch_fl.build_config.ACCELERATOR == "cuda"
HAS_ACCELERATOR_GRAPH = hasattr(torch.accelerator, "Graph")
HAS_FLAGGEMS = importlib.util.find_spec("flag_gems") is not None


# ---- the cpu accelerator: nothing to capture, and every entry point says so ----


@pytest.mark.skipif(ON_CUDA, reason="the refusal is the cpu accelerator's")
@pytest.mark.parametrize(
    "entry",
    [
        lambda: torch.flagos.FlagOSGraph(),
        lambda: torch.flagos.graph_pool_handle(),
        lambda: torch.flagos.make_graphed_callables(torch.nn.Linear(2, 2), (torch.ones(2),)),
    ],
    ids=["FlagOSGraph", "graph_pool_handle", "make_graphed_callables"],
)
def test_cpu_accelerator_refuses_graph_capture(entry) -> None:
    with pytest.raises(RuntimeError, match="needs a device accelerator.*cpu accelerator"):
        entry()
    assert not torch.flagos.is_current_stream_capturing()


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
