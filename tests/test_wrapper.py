"""The generated Python wrapper: arguments of eager and library calls, and graph outputs (issue 5, bug 4)."""
import pytest
import sympy
import torch

from engine.codegen.wrapper import generate_wrapper
from engine.ir.indexing import FloorDiv, ModIndex
from engine.ir.nodes import Pointwise, TensorValue
from engine.ir.graph import LoweredGraph
from engine.pipeline import Options, compile_graph

aten = torch.ops.aten


def apply_ops(ops, x, limit):
    """An eager op (no lowering: a Fallback) whose arguments have no Python literal: ATen ops in a list, inf."""
    for op in ops:
        x = op(x)
    return torch.clamp(x, max=limit)


def _graph_with_unprintable_arguments() -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(3, 4)
    y = graph.call_function(apply_ops, ([aten.relu.default, aten.neg.default], x, float("inf")))
    y.meta["val"] = torch.empty(3, 4)
    z = graph.call_function(aten.mul.Tensor, (y, 2.0))
    z.meta["val"] = torch.empty(3, 4)
    graph.output((z, float("-inf")))
    return torch.fx.GraphModule({}, graph)


def test_op_and_non_finite_arguments_are_bound_by_name():
    compiled = compile_graph(_graph_with_unprintable_arguments(), [torch.empty(3, 4)], Options())
    source = compiled.wrapper.source
    assert "aten." not in source and "OpOverload" not in source, source  # the ops are names, not reprs
    bound = [value for value in compiled.wrapper.constants.values() if isinstance(value, torch._ops.OpOverload)]
    assert bound == [aten.relu.default, aten.neg.default]
    x = torch.randn(3, 4)
    out, constant = compiled.call([x.clone()])
    torch.testing.assert_close(out, apply_ops([aten.relu.default, aten.neg.default], x, float("inf")) * 2)
    assert constant == float("-inf")


def test_an_output_view_without_strides_is_refused_clearly():
    # lowering copies such views into a buffer (GraphLowering.output); a wrapper handed one says so
    node = Pointwise(name="buf0", size=(sympy.Integer(4), sympy.Integer(6)), dtype=torch.float32, device="cpu",
                     inner_fn=lambda index: None)
    # a "transpose through a reshape": element (i, j) of the view is flat element i + 4*j
    view = TensorValue(node, (sympy.Integer(24),),
                       lambda index: [ModIndex(index[0], 4), FloorDiv(index[0], 4)])
    graph = LoweredGraph(inputs=[], constants=[], nodes=[node], buffers={"buf0": node}, outputs=[view],
                         size_vars={}, device="cpu")
    with pytest.raises(ValueError, match="no strides"):
        generate_wrapper(graph, [], None, {})
