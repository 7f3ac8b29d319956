"""Test helper: the loop IR that Glassbox lowers a function to, without generating code."""
import torch

from engine.lowering.graph import LoweredGraph, lower
from engine.tools.aten_graphs import capture_aten


def lowered_graphs(fn, *inputs) -> list[LoweredGraph]:
    """Capture fn(*inputs) with Dynamo + AOTAutograd, as our backend would, and lower every ATen graph."""
    return [lower(gm, "cpu") for gm, _ in capture_aten(fn, *inputs)]


def lowered(fn, *inputs) -> LoweredGraph:
    graphs = lowered_graphs(fn, *inputs)
    assert len(graphs) == 1, f"{len(graphs)} graphs"
    return graphs[0]


def pointwise_chain(length: int, shape=(4, 8)) -> LoweredGraph:
    """The loop IR of `length` chained ATen mul/add ops, built as an FX graph directly (tracing 2000 ops with
    Dynamo takes a minute, and the point here is the compiler's own stages)."""
    graph = torch.fx.Graph()
    val = torch.empty(shape, device="meta")  # lowering reads only shapes and dtypes
    x = graph.placeholder("x")
    x.meta["val"] = val
    for i in range(length):
        op, scalar = (torch.ops.aten.mul.Tensor, 1.0001) if i % 2 == 0 else (torch.ops.aten.add.Tensor, 0.001)
        x = graph.call_function(op, (x, scalar))
        x.meta["val"] = val
    graph.output((x,))
    return lower(torch.fx.GraphModule(torch.nn.Module(), graph), "cpu")
