"""Lower a functional ATen FX graph to loop IR, one ATen node at a time."""
from __future__ import annotations

import operator
import types
import sympy
import torch
import torch.fx

from engine.ir import derived
from engine.ir.graph import LoweredGraph
from engine.ir.indexing import Expr
from engine.ir.nodes import (Buffer, Constant, Extern, Fallback, InputBuffer, MultiOutput, Pointwise, Reduction,
                             TensorArg, TensorValue)
from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import allocation, pointwise_node, realize, sympify_size
from engine.lowering.declined import unlowered_reason
from engine.lowering import layout as layouts, registry
from engine.lowering.registry import Unsupported, lowering_for


def _meta_sizes(val) -> tuple[Expr, ...]:
    return tuple(sympify_size(s) for s in val.shape)


def _meta_strides(val) -> tuple[Expr, ...]:
    return tuple(sympify_size(s) for s in val.stride())


# Note [Outputs that are views]
# An output that eager returns as a view (a chain of view ops from some base: an input, or a value of the
# graph) must come back with eager's size, strides and storage offset, not only eager's values: where it views
# a graph input, or the new value of an input the graph mutates, AOTAutograd rebuilds it from that input with
# the geometry our graph returns and throws our values away. Our view lowerings give eager's geometry where the
# view is strided in our IR; one they cannot prove strided under symbolic sizes (a reshape by a floor-divided
# size, then a slice: Longformer's chunk scores) came back as a copy, and the input's memory was read in the
# wrong order. Such an output is eager's own as_strided of its base: a view, no kernel. The base must be an
# input or a buffer of ours stored in eager's strides; other bases keep the copy.


def _view_base(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node `node` is a chain of views of (each op's result aliases its first argument: torch's is_view);
    None when `node` is no view."""
    base = node
    while base.op == "call_function" and _is_view_op(base.target) and base.args and \
            isinstance(base.args[0], torch.fx.Node):
        base = base.args[0]
    return None if base is node else base


def _same_layout(layout, strides, offset, size) -> bool:
    """Our (strides, offset) is eager's, ignoring the strides of size-1 dims."""
    return layout is not None and sympy.expand(layout[1] - offset) == 0 and \
        layouts.same_strides(size, layout[0], [sympify_size(s) for s in strides])


class GraphLowering(torch.fx.Interpreter):
    def __init__(self, gm: torch.fx.GraphModule, device: str, layout: layouts.LayoutDecision | None = None):
        super().__init__(gm, garbage_collect_values=False)
        self.device = device
        self.layout = layout or layouts.LayoutDecision(False, "")
        self.channels_last: list[str] = []  # buffers stored channels-last (Note [Channels-last convolutions])
        self.converted: dict[str, str] = {}  # of those, copies made for a library call: buffer -> FX node copied
        self.buffers: dict[str, Buffer] = {}
        self.nodes: list[Buffer] = []
        self.inputs: list[InputBuffer | None] = []
        self.constants: list[Constant] = []
        self.size_vars: dict[sympy.Symbol, tuple[int, int | None]] = {}
        self.derived_sizes: dict[sympy.Symbol, Expr] = {}  # Note [Derived sizes]
        self.current_node: torch.fx.Node | None = None
        self.host = host_nodes(gm, device)  # Note [Host tensors of a GPU graph]
        self.host_reads_inputs = host_reads_inputs(gm, self.host)  # Note [Host work under CUDA graphs]
        self.returns_host = torch.device(device).type != "cpu" and traced_on(gm, device)

    # -- used by lowerings -------------------------------------------------------------------------------
    @property
    def out_meta(self):
        return self.current_node.meta["val"]

    def name_size(self, expr: Expr) -> sympy.Symbol:
        """The derived size that stands for `expr` (Note [Derived sizes]): one symbol per expression."""
        for symbol, known in self.derived_sizes.items():
            if known == expr:
                return symbol
        symbol = derived.new_symbol(len(self.derived_sizes), expr)
        self.derived_sizes[symbol] = expr
        return symbol

    def new_name(self) -> str:
        return f"buf{len(self.buffers)}"

    def origins(self) -> tuple[str, ...]:
        return (self.current_node.name,) if self.current_node is not None else ()

    def prefers_channels_last(self) -> bool:
        return self.layout.channels_last and self.current_node.name in self.layout.preferred

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
        if isinstance(val, torch.Tensor) and val.dim() == 0 and val.device.type == "cpu" and \
                torch.device(self.device).type != "cpu" and val.dtype != torch.bool:
            return self.host_scalar(position, val)
        if isinstance(val, torch.Tensor):
            buf = InputBuffer(name=f"arg{position}", size=_meta_sizes(val), dtype=val.dtype,
                              device=self.device, origins=self.origins(), position=position,
                              input_stride=_meta_strides(val), input_device=str(val.device))
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

    def host_scalar(self, position: int, val: torch.Tensor) -> TensorValue:
        """A 0-d CPU tensor input of a GPU graph, read on the host and passed to kernels as a scalar (Note [CPU
        scalars on the GPU]): its loads are that value, made a 0-d node that fusion inlines."""
        buf = InputBuffer(name=f"arg{position}", size=(), dtype=val.dtype, device=self.device,
                          origins=self.origins(), position=position, input_stride=(), input_device=str(val.device))
        self.buffers[buf.name] = buf
        self.inputs.append(buf)
        item = derived.InputItem if val.dtype.is_floating_point else derived.IntInputItem
        symbol = self.name_size(item(sympy.Integer(position)))
        return pointwise_node(lambda index: ops.index_expr(symbol, compute_dtype(val.dtype)), size=(),
                              dtype=val.dtype)

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
        if self.current_node in self.host:  # Note [Host tensors of a GPU graph]
            return self.fallback(target, args, kwargs, reason="", node_class=Extern, device="cpu")
        if _statically_empty(val) and not _is_view_op(target):
            return self.empty_result(target, val)
        unsupported = _without_kernel_dtype(args, kwargs, val)
        if unsupported:
            return self.fallback(target, args, kwargs, unsupported)
        lowering = lowering_for(target)
        if lowering is None:
            return self.fallback(target, args, kwargs, unlowered_reason(target))
        first_new = len(self.nodes)
        try:
            result = lowering(*args, **kwargs)
        except Unsupported as reason:
            return self.fallback(target, args, kwargs, str(reason))
        if self.layout.channels_last:
            result, stored = layouts.store_preferred(self.current_node, result, first_new, self.nodes,
                                                     self.layout.preferred)
            self.channels_last += stored
        if isinstance(result, tuple):  # a result whose getitem is such an output (max pooling's values)
            orders = {u.args[1]: layouts.eager_order(u, u.meta.get("val")) for u in self.current_node.users
                      if u.target is operator.getitem}
            result = tuple(self._as_eager_returns(v, first_new, orders.get(i)) for i, v in enumerate(result))
        else:
            result = self._as_eager_returns(result, first_new, layouts.eager_order(self.current_node, val))
        return result

    def _as_eager_returns(self, result, first_new: int, order):
        """A graph output that eager returns in other strides than contiguous ones, computed in eager's order
        (Note [Outputs in eager's strides])."""
        if order is None or not isinstance(result, TensorValue) or not self.nodes or result.node is not self.nodes[-1]:
            return result  # a node of this lowering that a later one reads keeps its order: output() copies it
        placed = layouts.store_permuted(result, order, first_new, self.nodes)
        if placed is not result and order == (0, *range(2, len(order)), 1):
            self.channels_last.append(placed.node.name)
        return placed

    def output(self, target, args, kwargs):
        outputs = list(args[0]) if isinstance(args[0], (tuple, list)) else [args[0]]
        # an output handed back to torch must be a strided tensor: a view whose index map is not affine
        # (a reshape of a window view, say) is copied into a buffer of its own first
        outputs = [realize(v) if isinstance(v, TensorValue) and v.strided_layout() is None else v for v in outputs]
        fx_outputs = self.current_node.args[0]
        fx_outputs = list(fx_outputs) if isinstance(fx_outputs, (tuple, list)) else [fx_outputs]
        return [self._to_host(self._in_eager_strides(self._as_eager_view(v, n), n), n.meta.get("val"))
                if isinstance(n, torch.fx.Node) else v for v, n in zip(outputs, fx_outputs)]

    def _as_eager_view(self, value, node: torch.fx.Node):
        """Note [Outputs that are views]."""
        base = _view_base(node)
        val = node.meta.get("val")
        if base is None or not isinstance(value, TensorValue) or not isinstance(val, torch.Tensor) or \
                layouts.handed_over(node):  # a saved tensor keeps the strides the backward is told
            return value
        base_value, base_val = self.env.get(base), base.meta.get("val")
        if not isinstance(base_value, TensorValue) or not isinstance(base_val, torch.Tensor):
            return value
        offset = sympify_size(val.storage_offset()) - sympify_size(base_val.storage_offset())
        if value.node is base_value.node and _same_layout(value.strided_layout(), val.stride(), offset, value.size):
            return value
        if base.op == "placeholder" and isinstance(base_value.node, InputBuffer):
            start = sympify_size(val.storage_offset())  # the input is passed as it is, its storage offset too
        elif isinstance(base_value.node, (Pointwise, Reduction)) and \
                _same_layout(base_value.strided_layout(), base_val.stride(), 0, base_value.size):
            start = offset  # a buffer of ours (allocated, so at its storage's start) in eager's strides
        else:
            return value
        return self.fallback(torch.ops.aten.as_strided.default,
                             (base_value, list(_meta_sizes(val)), list(_meta_strides(val)), start), {},
                             reason="", node_class=Extern, val=val)

    def _in_eager_strides(self, value, node: torch.fx.Node):
        """Note [Outputs in eager's strides]; a saved tensor handed over to the backward keeps its own."""
        if layouts.handed_over(node):
            return value
        return layouts.in_eager_strides(value, node.meta.get("val"), self.nodes)

    def _to_host(self, value, val):
        """An output eager returns on the CPU, computed here on the graph's device, copied back to the CPU
        (Note [Host tensors of a GPU graph])."""
        if not (self.returns_host and isinstance(value, TensorValue) and isinstance(val, torch.Tensor)
                and val.device.type == "cpu" and value.node.device != "cpu"):
            return value
        return self.fallback(torch.ops.aten._to_copy.default, (value,), {"device": torch.device("cpu")},
                             reason="", node_class=Extern, device="cpu", val=val)

    def empty_result(self, target, val):
        """Note [Empty tensors]: an output with no elements computes nothing, so it gets no kernel (a loop of
        zero trips); it is an allocation of the promised size and strides (a library call to empty_strided)."""
        def allocate(item):
            if not isinstance(item, torch.Tensor):
                return None
            return allocation(self, _meta_sizes(item), _meta_strides(item), item.dtype)

        if isinstance(val, torch.Tensor):
            return allocate(val)
        return tuple(allocate(item) for item in val)

    # -- fallback: run the op eagerly ------------------------------------------------------------------------
    def as_tensor_arg(self, value: TensorValue) -> TensorArg:
        layout = value.strided_layout()
        if layout is None:
            value = realize(value)
            layout = value.strided_layout()
        stride, offset = layout
        return TensorArg(value.node.name, tuple(value.size), stride, offset)

    def fallback(self, target, args, kwargs, reason: str, node_class=Fallback, device: str | None = None,
                 val=None):
        """Call `target` eagerly on our buffers (node_class=Extern for library calls we chose to make), on
        `device` (the graph's unless told) with the result `val` (the current node's unless told)."""
        target, args, kwargs = BoundCall.bind(target, tuple(args), dict(kwargs))
        args, kwargs = torch.utils._pytree.tree_map(
            lambda a: self.as_tensor_arg(a) if isinstance(a, TensorValue) else a, (args, kwargs))
        extra = {"reason": reason} if node_class is Fallback else {}
        val = self.out_meta if val is None else val
        device = device or self.device
        if isinstance(val, torch.Tensor):
            node = node_class(name=self.new_name(), size=_meta_sizes(val), dtype=val.dtype, device=device,
                              origins=self.origins(), target=target, args=tuple(args), kwargs=dict(kwargs),
                              out_stride=_meta_strides(val), **extra)
            self.register(node)
            return TensorValue(node, node.size)
        parent = node_class(name=self.new_name(), size=(), dtype=torch.float32, device=device,
                            origins=self.origins(), target=target, args=tuple(args), kwargs=dict(kwargs),
                            out_stride=(), **extra)
        self.register(parent)
        results = []
        for i, item in enumerate(val):
            if not isinstance(item, torch.Tensor):
                results.append(None)
                continue
            out = MultiOutput(name=self.new_name(), size=_meta_sizes(item), dtype=item.dtype, device=device,
                              origins=self.origins(), parent=parent.name, index=i, out_stride=_meta_strides(item))
            self.register(out)
            results.append(TensorValue(out, out.size))
        return tuple(results)


class BoundCall:
    """A call with its operator-valued arguments bound in: the wrapper writes plain arguments as Python text,
    and an ATen op passed as an argument (with_effects(token, op, ...), say) has no such text."""

    def __init__(self, target, args: dict[int, object], kwargs: dict[str, object]):
        self.target, self.bound_args, self.bound_kwargs = target, args, kwargs

    @staticmethod
    def _unprintable(value) -> bool:
        # (not "any callable": sympy size expressions are callable too, and must stay run-time arguments)
        return isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator,
                                  types.FunctionType, types.BuiltinFunctionType))

    @classmethod
    def bind(cls, target, args: tuple, kwargs: dict):
        bound_args = {i: a for i, a in enumerate(args) if cls._unprintable(a)}
        bound_kwargs = {k: v for k, v in kwargs.items() if cls._unprintable(v)}
        if not bound_args and not bound_kwargs:
            return target, args, kwargs
        rest = tuple(a for i, a in enumerate(args) if i not in bound_args)
        return cls(target, bound_args, bound_kwargs), rest, {k: v for k, v in kwargs.items() if k not in bound_kwargs}

    def __call__(self, *args, **kwargs):
        full, rest = [], iter(args)
        for i in range(len(args) + len(self.bound_args)):
            full.append(self.bound_args[i] if i in self.bound_args else next(rest))
        return self.target(*full, **kwargs, **self.bound_kwargs)

    def __str__(self):
        bound = ", ".join(str(v) for v in [*self.bound_args.values(), *self.bound_kwargs.values()])
        return f"{self.target} with {bound}"

    __repr__ = __str__


# Note [Dtypes without kernels]
# Generated kernels know the real floating, integer and bool dtypes. An op that reads or produces any other
# (complex64, complex128, ComplexHalf, quantized types) runs eagerly as a Fallback that says so, views of such
# tensors included, so no kernel ever loads one (the FFTs of torch.fft return complex64 and used to reach the
# C++ printer, which had no type for it).
KERNEL_DTYPES = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                           torch.int16, torch.int8, torch.uint8, torch.bool})


def _without_kernel_dtype(args, kwargs, val) -> str | None:
    """Why this op runs eagerly (Note [Dtypes without kernels]), or None."""
    dtypes = [v.node.dtype for v in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(v, TensorValue)]
    dtypes += [v.dtype for v in torch.utils._pytree.tree_leaves(val) if isinstance(v, torch.Tensor)]
    other = sorted({str(d).replace("torch.", "") for d in dtypes if d not in KERNEL_DTYPES})
    if any(d.is_complex for d in dtypes if isinstance(d, torch.dtype)):
        return (f"generated kernels have no {', '.join(other)} type: runs eagerly. The loop IR computes real "
                f"scalars; complex arithmetic would be a pair of real ops per element over view_as_real's "
                f"trailing pair, not built, and an FFT (FNet) is a library call in eager and Inductor alike")
    return f"generated kernels have no {', '.join(other)} type: runs eagerly" if other else None


# Note [Host tensors of a GPU graph]
# Model code builds small CPU tensors inside a GPU graph (DeBERTa's `torch.tensor(min(q_len, span))`, a
# `.cpu()` of a result) and hands them back to Python, which reads them with .item() or slices by them. Lowered
# on the graph's device, such an output came back on the GPU: a device that differs from eager's, and a
# device-to-host wait at every later .item() (DeBERTa ran slower than eager). So a CPU tensor that reaches an
# output only through CPU tensors is computed on the CPU, eagerly, as eager does (one tiny op, no kernel); a
# CPU output that GPU kernels also read is computed on the GPU and copied back at the end. Inductor keeps such
# nodes on the CPU too.
#
# Note [Host work under CUDA graphs]
# A replay reruns the GPU work only, so a graph with host nodes replays only when their values cannot change
# between calls: when every host node is computed from constants and sizes alone (DeBERTa's span is
# `torch.tensor(min(q_len, max_span))`), never from a tensor input or a GPU value (a copy to the host would
# also be illegal while recording). Recordings are keyed by the sizes (Note [Cheap replay checks]), so the
# recording's host outputs are this call's; each replay hands out copies of them (a few bytes) so that a
# caller who writes into one changes no later call. Where host work reads an input, the graph is launched.
def traced_on(gm: torch.fx.GraphModule, device: str) -> bool:
    """Whether some value of the graph lives on `device`'s type. A graph traced on the CPU and lowered for
    another device (a test's stand-in) is not: its fake values say nothing about where eager computes."""
    kind = torch.device(device).type
    return any(isinstance(v, torch.Tensor) and v.device.type == kind
               for n in gm.graph.nodes for v in torch.utils._pytree.tree_leaves(n.meta.get("val")))


def host_nodes(gm: torch.fx.GraphModule, device: str) -> set[torch.fx.Node]:
    """The nodes of a `device` graph that eager computes on the CPU and that only CPU work and the outputs use."""
    if torch.device(device).type == "cpu" or not traced_on(gm, device):
        return set()

    def on_host(node) -> bool:
        vals = torch.utils._pytree.tree_leaves(node.meta.get("val"))
        return node.op == "call_function" and bool(vals) and all(
            isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in vals)

    host: set[torch.fx.Node] = set()
    for node in reversed(gm.graph.nodes):
        if on_host(node) and node.users and all(u.op == "output" or u in host for u in node.users):
            host.add(node)
    return host


def host_reads_inputs(gm: torch.fx.GraphModule, host: set[torch.fx.Node]) -> bool:
    """Whether a host node's value depends on a tensor input or on a value computed on the device (Note [Host
    work under CUDA graphs]); sizes and constants do not count."""
    if not host:
        return False
    aten = torch.ops.aten
    sizes = (aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default)
    fixed: set[torch.fx.Node] = set()  # nodes whose value is the same at every call of the same sizes
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        tensors = any(isinstance(v, torch.Tensor) for v in torch.utils._pytree.tree_leaves(val))
        if node.op == "get_attr" or (node.op == "placeholder" and not tensors) or node.target in sizes:
            fixed.add(node)
        elif node.op == "call_function" and (node in host or not tensors) and all(
                a in fixed for a in node.all_input_nodes):
            fixed.add(node)
    return not host <= fixed


def _statically_empty(val) -> bool:
    """Every tensor of the op's result has a zero-size dimension known at compile time."""
    items = [val] if isinstance(val, torch.Tensor) else list(val) if isinstance(val, (tuple, list)) else []
    tensors = [t for t in items if isinstance(t, torch.Tensor)]
    if not tensors or len(tensors) != len(items):
        return False
    return all(any(isinstance(s, int) and s == 0 for s in t.shape) for t in tensors)


def _is_view_op(target) -> bool:
    # views of an empty tensor stay views (no allocation, aliasing kept); they load nothing either way
    return getattr(target, "is_view", False)


def lower(gm: torch.fx.GraphModule, device: str, layout: str = "auto", phase: str = "inference") -> LoweredGraph:
    """`layout` (auto | channels_last | contiguous) and `phase` decide the 4D tensors' layout (Note
    [Channels-last convolutions])."""
    import engine.lowering.all_lowerings  # noqa: F401  (fills the registry)

    decision = layouts.decide_layout(gm, device, phase, layout)
    graph = GraphLowering(gm, device, decision)
    previous = registry.set_current(graph)
    try:
        placeholders = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        outputs = graph.run(*placeholders)
    finally:
        registry.set_current(previous)
    record = decision.record(graph.channels_last, graph.converted)
    if phase != "inference":  # Note [Channels-last training graphs]
        record.update(layouts.shared_tensors(gm, outputs))
    return LoweredGraph(inputs=graph.inputs, constants=graph.constants, nodes=graph.nodes,
                        buffers=graph.buffers, outputs=outputs, size_vars=graph.size_vars,
                        derived_sizes=graph.derived_sizes, device=device,
                        layout=record, host_reads_inputs=graph.host_reads_inputs)
