"""Lower a functional ATen FX graph to loop IR, one ATen node at a time."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx

from engine.ir.indexing import Expr, sympify_size
from engine.ir.nodes import (Buffer, Constant, Fallback, InputBuffer, MultiOutput, Pointwise, TensorArg,
                             TensorValue)
from engine.lowering import registry
from engine.lowering.registry import Unsupported, lowering_for


@dataclass
class LoweredGraph:
    """The loop IR of one graph: inputs, computed nodes in program order, and outputs."""
    inputs: list[InputBuffer | None]  # per placeholder; None for SymInt placeholders
    constants: list[Constant]
    nodes: list[Buffer]
    buffers: dict[str, Buffer]
    outputs: list[Any]  # TensorValue, sympy expr or None, in the graph's output order
    size_vars: dict[sympy.Symbol, tuple[int, int | None]]  # symbol -> (placeholder position, dim or None)
    device: str
    aten_nodes: dict[str, dict] = field(default_factory=dict)  # ATen node name -> origin info

    def node_by_name(self, name: str) -> Buffer:
        return self.buffers[name]


def _meta_sizes(val) -> tuple[Expr, ...]:
    return tuple(sympify_size(s) for s in val.shape)


def _meta_strides(val) -> tuple[Expr, ...]:
    return tuple(sympify_size(s) for s in val.stride())


class GraphLowering(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, device: str):
        super().__init__(gm, garbage_collect_values=False)
        self.device = device
        self.buffers: dict[str, Buffer] = {}
        self.nodes: list[Buffer] = []
        self.inputs: list[InputBuffer | None] = []
        self.constants: list[Constant] = []
        self.size_vars: dict[sympy.Symbol, tuple[int, int | None]] = {}
        self.current_node: torch.fx.Node | None = None

    # -- used by lowerings -------------------------------------------------------------------------------
    @property
    def out_meta(self):
        return self.current_node.meta["val"]

    def new_name(self) -> str:
        return f"buf{len(self.buffers)}"

    def origins(self) -> tuple[str, ...]:
        return (self.current_node.name,) if self.current_node is not None else ()

    def register(self, node: Buffer) -> Buffer:
        self.buffers[node.name] = node
        self.nodes.append(node)
        return node

    # -- fx.Interpreter hooks ----------------------------------------------------------------------------
    def run_node(self, n: torch.fx.Node):
        self.current_node = n
        return super().run_node(n)

    def placeholder(self, target, args, kwargs):
        position = len(self.inputs)
        val = self.current_node.meta.get("val")
        if isinstance(val, torch.Tensor):
            buf = InputBuffer(name=f"arg{position}", size=_meta_sizes(val), dtype=val.dtype,
                              device=self.device, origins=self.origins(), position=position,
                              input_stride=_meta_strides(val))
            self.buffers[buf.name] = buf
            self.inputs.append(buf)
            for dim, size in enumerate(buf.size):
                if isinstance(size, sympy.Symbol) and size not in self.size_vars:
                    self.size_vars[size] = (position, dim)
            return TensorValue(buf, buf.size)
        self.inputs.append(None)
        expr = sympify_size(val)
        if isinstance(expr, sympy.Symbol) and expr not in self.size_vars:
            self.size_vars[expr] = (position, None)
        return expr

    def get_attr(self, target, args, kwargs):
        tensor = self.fetch_attr(target)
        const = Constant(name=f"const{len(self.constants)}", size=tuple(sympy.Integer(s) for s in tensor.shape),
                         dtype=tensor.dtype, device=self.device, origins=self.origins(), value=tensor)
        self.buffers[const.name] = const
        self.constants.append(const)
        return TensorValue(const, const.size)

    def call_function(self, target, args, kwargs):
        if target is operator.getitem and isinstance(args[0], (tuple, list)):
            return args[0][args[1]]
        val = self.current_node.meta.get("val")
        if not isinstance(val, (torch.Tensor, tuple, list)):
            # arithmetic on sizes (sym_size, operator.mul on SymInts): the value is a sympy expression
            return sympify_size(val)
        lowering = lowering_for(target)
        if lowering is None:
            return self.fallback(target, args, kwargs, f"no lowering registered for {target}")
        try:
            return lowering(*args, **kwargs)
        except Unsupported as reason:
            return self.fallback(target, args, kwargs, str(reason))

    def output(self, target, args, kwargs):
        return list(args[0]) if isinstance(args[0], (tuple, list)) else [args[0]]

    # -- fallback: run the op eagerly ------------------------------------------------------------------------
    def as_tensor_arg(self, value: TensorValue) -> TensorArg:
        layout = value.strided_layout()
        if layout is None:
            value = realize(value)
            layout = value.strided_layout()
        stride, offset = layout
        return TensorArg(value.node.name, tuple(value.size), stride, offset)

    def fallback(self, target, args, kwargs, reason: str, node_class=Fallback):
        """Call `target` eagerly on our buffers (node_class=Extern for library calls we chose to make)."""
        args, kwargs = torch.utils._pytree.tree_map(
            lambda a: self.as_tensor_arg(a) if isinstance(a, TensorValue) else a, (args, kwargs))
        extra = {"reason": reason} if node_class is Fallback else {}
        val = self.out_meta
        if isinstance(val, torch.Tensor):
            node = node_class(name=self.new_name(), size=_meta_sizes(val), dtype=val.dtype, device=self.device,
                              origins=self.origins(), target=target, args=tuple(args), kwargs=dict(kwargs),
                              out_stride=_meta_strides(val), **extra)
            self.register(node)
            return TensorValue(node, node.size)
        parent = node_class(name=self.new_name(), size=(), dtype=torch.float32, device=self.device,
                            origins=self.origins(), target=target, args=tuple(args), kwargs=dict(kwargs),
                            out_stride=(), **extra)
        self.register(parent)
        results = []
        for i, item in enumerate(val):
            if not isinstance(item, torch.Tensor):
                results.append(None)
                continue
            out = MultiOutput(name=self.new_name(), size=_meta_sizes(item), dtype=item.dtype, device=self.device,
                              origins=self.origins(), parent=parent.name, index=i, out_stride=_meta_strides(item))
            self.register(out)
            results.append(TensorValue(out, out.size))
        return tuple(results)


def realize(value: TensorValue) -> TensorValue:
    """Materialize a view into a contiguous buffer of its own (a copy kernel)."""
    graph = registry.current()
    node = Pointwise(name=graph.new_name(), size=tuple(value.size), dtype=value.dtype, device=graph.device,
                     origins=graph.origins(), inner_fn=value.load)
    graph.register(node)
    return TensorValue(node, node.size)


def lower(gm: torch.fx.GraphModule, example_inputs, device: str) -> LoweredGraph:
    import engine.lowering.all_lowerings  # noqa: F401  (fills the registry)

    graph = GraphLowering(gm, device)
    previous = registry.set_current(graph)
    try:
        placeholders = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        outputs = graph.run(*placeholders)
    finally:
        registry.set_current(previous)
    return LoweredGraph(inputs=graph.inputs, constants=graph.constants, nodes=graph.nodes,
                        buffers=graph.buffers, outputs=outputs, size_vars=graph.size_vars, device=device)
