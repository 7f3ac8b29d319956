"""Lowerings build IR nodes through one set of builders (Note [Node builders]); one lowering per ATen op."""
import ast
from pathlib import Path

import pytest
import torch

from engine.ir.handlers import IRPrinter
from engine.ir.nodes import Pointwise, Reduction
from engine.ir.ops import use_handler
from engine.lowering import registry
from engine.lowering.registry import DuplicateLowering, register_lowering
from lowered_graphs import lowered

LOWERING = Path(__file__).resolve().parents[1] / "engine" / "lowering"


def test_second_lowering_for_an_op_is_an_error():
    import engine.lowering.all_lowerings  # noqa: F401
    before = dict(registry.LOWERINGS)
    with pytest.raises(DuplicateLowering, match="relu"):
        @register_lowering(torch.ops.aten.sigmoid.default, torch.ops.aten.relu)
        def another_relu(x):
            return x
    assert registry.LOWERINGS == before  # a refused registration adds nothing, not even its other targets


def test_nodes_are_built_only_by_the_builders():
    """No lowering module constructs Pointwise/Reduction itself: only common.py's builders do."""
    offenders = []
    for path in LOWERING.glob("*.py"):
        if path.name == "common.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Pointwise", "Reduction"):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders


def _body_text(graph, node):
    printer = IRPrinter(graph.buffers)
    with use_handler(printer):
        if isinstance(node, Reduction):
            node.inner_fn([0] * len(node.size), [0] * len(node.reduction_size))
        else:
            node.inner_fn([0] * len(node.size))
    return printer.lines


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_computed_in_float32_and_cast_once(dtype):
    graph = lowered(lambda x, y: x * y + 1, torch.randn(8, 8, dtype=dtype), torch.randn(8, 8, dtype=dtype))
    for node in graph.nodes:
        assert isinstance(node, Pointwise)
        lines = _body_text(graph, node)
        casts = [line for line in lines if f"to_{str(dtype)[6:]}(" in line]
        assert len(casts) == 1 and lines[-1] == casts[0], lines  # the final cast, last


def test_float32_nodes_have_no_cast():
    graph = lowered(lambda x: (x * 2).relu().sum(-1), torch.randn(8, 8))
    for node in graph.nodes:
        assert not any("to_" in line for line in _body_text(graph, node))
