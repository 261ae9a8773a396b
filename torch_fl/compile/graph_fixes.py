"""Post-grad rewrites of flagos graphs, for Inductor lowerings that test device types by name.

Run by the flagos custom pass (inductor_backend.post_grad_pass) on every post-grad graph
Inductor compiles for flagos, before lowering. Each rewrite keeps eager's semantics:

- `move_cpu_scalars_to_flagos`: a pointwise lowering puts its kernel on the first input's
  device unless some input is on a device Inductor lists as a GPU (`GPU_TYPES`, which flagos
  is not), so `cpu_scalar * x` (a 0-dim cpu tensor first, which eager allows with a tensor of
  any device) would compute on the cpu and hand back a cpu tensor. The scalar is moved to the
  flagos device of the result first, as eager's kernel reads it.
- `flatten_full_argreductions` (C++ kernels only): `argmax()`/`argmin()` over all dimensions of
  a non-contiguous input must answer the logical (row-major) index; Inductor computes it only
  for Triton and for C++ kernels on device type "cpu", and flagos C++ kernels would answer the
  position in memory. The input is flattened first (`argmax(x.reshape(-1), 0)`), which is
  what the index means.
"""

from __future__ import annotations

import torch
from torch import fx

from torch_fl.compile import DEVICE

_ARG_REDUCTIONS = (torch.ops.aten.argmax.default, torch.ops.aten.argmin.default)


def _tensor_meta(node: fx.Node) -> torch.Tensor | None:
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def _on_flagos(node: fx.Node) -> torch.Tensor | None:
    val = _tensor_meta(node)
    return val if val is not None and val.device.type == DEVICE else None


def move_cpu_scalars_to_flagos(graph: fx.Graph) -> bool:
    """Feeds 0-dim cpu tensors to operators with a flagos result as flagos tensors."""
    moved: dict[tuple[fx.Node, torch.device], fx.Node] = {}
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target is torch.ops.prims.device_put.default:
            continue
        result = _on_flagos(node)
        if result is None:
            continue
        for arg in node.all_input_nodes:
            val = _tensor_meta(arg)
            if val is None or val.device.type != "cpu" or val.dim() != 0:
                continue
            key = (arg, result.device)
            if key not in moved:
                with graph.inserting_before(node):
                    put = graph.call_function(
                        torch.ops.prims.device_put.default, (arg, result.device)
                    )
                put.meta["val"] = val.to(result.device)
                moved[key] = put
            node.replace_input_with(arg, moved[key])
            changed = True
    return changed


def flatten_full_argreductions(graph: fx.Graph) -> bool:
    """Rewrites argmax/argmin over every dimension of a flagos tensor as one over its flat view."""
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _ARG_REDUCTIONS:
            continue
        source = node.args[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        val = _on_flagos(source) if isinstance(source, fx.Node) else None
        if dim is not None or val is None or val.dim() < 2:
            continue
        with graph.inserting_before(node):
            flat = graph.call_function(torch.ops.aten.reshape.default, (source, [-1]))
            flat.meta["val"] = val.reshape(-1)
            index = graph.call_function(node.target, (flat, 0, False))
            index.meta["val"] = node.target(flat.meta["val"], 0, False)
            if keepdim:
                kept = graph.call_function(torch.ops.aten.reshape.default, (index, [1] * val.dim()))
                kept.meta["val"] = index.meta["val"].reshape([1] * val.dim())
                index = kept
        node.replace_all_uses_with(index)
        graph.erase_node(node)
        changed = True
    return changed
