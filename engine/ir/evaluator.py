"""Reference evaluator: execute the loop IR with torch on the CPU, independent of any code generator.

A loop body runs once, over whole index grids: index variables are bound to broadcastable int64 tensors,
so `ops.add` is one torch add over every element. This checks a lowering against eager before any code
is generated, and tells codegen bugs apart from lowering bugs.
"""
from __future__ import annotations

import math

import sympy
import torch

from engine.ir import derived
from engine.ir.indexing import loop_var, py_index
from engine.ir.nodes import (Constant, Extern, InputBuffer, MultiOutput, Pointwise, Reduction, Scan, Scatter,
                             TensorArg, TensorValue)
from engine.ir.ops import compute_dtype, ops, reduction_identity, use_handler
from engine.ir.graph import LoweredGraph
from engine.ir.strided import strided_view

_TORCH_UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "log": torch.log, "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin,
    "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh,
    "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh, "erf": torch.erf, "erfc": torch.erfc,
    "erfinv": torch.erfinv, "lgamma": torch.lgamma, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "round": torch.round, "sign": torch.sign,
    "reciprocal": torch.reciprocal, "square": torch.square, "logical_not": torch.logical_not,
    "bitwise_not": torch.bitwise_not, "isnan": torch.isnan, "isinf": torch.isinf, "signbit": torch.signbit,
}
_TORCH_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.true_divide,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "truncdiv": lambda a, b: torch.div(a, b, rounding_mode="trunc"), "remainder": torch.remainder,
    "fmod": torch.fmod, "pow": torch.pow, "maximum": torch.maximum, "minimum": torch.minimum,
    "atan2": torch.atan2, "hypot": torch.hypot, "copysign": torch.copysign, "eq": torch.eq, "ne": torch.ne,
    "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or, "logical_xor": torch.logical_xor, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor, "left_shift": torch.bitwise_left_shift,
    "right_shift": torch.bitwise_right_shift,
}


def _elementwise_max(a, b):
    return torch.maximum(torch.as_tensor(a), torch.as_tensor(b))


def _elementwise_min(a, b):
    return torch.minimum(torch.as_tensor(a), torch.as_tensor(b))


class TorchEvaluator:
    """Ops handler whose values are torch tensors broadcast over the loop's index grid."""

    def __init__(self, storages: dict[str, torch.Tensor], buffers: dict, env: dict, shape: list[int] = (),
                 reduction_shape: list[int] = ()):
        self.storages = storages  # buffer name -> tensor in its own layout
        self.buffers = buffers
        self.env = dict(env)  # symbol name -> int64 tensor (loop variables) or int (sizes)
        self.env.update(max=_elementwise_max, min=_elementwise_min)
        self._indirect = 0
        self.shape, self.reduction_shape = list(shape), list(reduction_shape)  # the index grid's dims
        self.mask: torch.Tensor | None = None  # the condition of the masked() body being run

    def _index(self, expr) -> torch.Tensor:
        expr = sympy.sympify(expr)
        text = py_index(expr)
        try:
            value = eval(text, {}, self.env)  # text we printed ourselves from a sympy expression
        except Exception as e:
            raise RuntimeError(f"bad index {text}") from e
        # a float derived value stays a float (Note [Derived sizes]); indexes are int64
        return torch.as_tensor(value, dtype=torch.float64 if derived.is_float(expr) else torch.int64)

    def load(self, name, index):
        buffer, tensor = self.buffers[name], self.storages[name]
        # offsets are relative to the tensor's first element, as for a data pointer in generated code
        length = tensor.untyped_storage().nbytes() // tensor.element_size() - tensor.storage_offset()
        flat = tensor.as_strided((length,), (1,), tensor.storage_offset())
        offset = self._index(buffer.storage_offset(index))
        if self.mask is not None:  # where the mask is false the offset may leave the tensor: read element 0
            offset = torch.where(self.mask, offset, 0)
        value = flat[offset]
        return value.to(compute_dtype(value.dtype))

    def masked(self, mask, body, other):
        """Note [Masked loads]: the body's value where `mask` holds, the value `other` elsewhere."""
        outer = self.mask
        self.mask = mask.bool() if outer is None else outer & mask.bool()
        try:
            value = torch.as_tensor(body())
        finally:
            self.mask = outer
        return torch.where(mask.bool(), value, other)

    def constant(self, value, dtype):
        return torch.tensor(value, dtype=dtype)

    def index_expr(self, expr, dtype):
        return self._index(expr).to(dtype)

    def to_dtype(self, x, dtype):
        return x.to(dtype).to(compute_dtype(dtype))

    def where(self, cond, a, b):
        return torch.where(cond.bool(), a, b)

    # -- kernel structure (Note [Kernel structure ops]): a node's whole result at once ------------------------
    def store(self, name, index, value):
        node = self.buffers[name]
        self.storages[name] = torch.as_tensor(value).to(node.dtype).expand(self.shape).contiguous()

    def reduction(self, dtype, src_dtype, reduction_type, value):
        shape, rshape = self.shape, self.reduction_shape
        value = torch.as_tensor(value).expand(shape + rshape)
        dims = list(range(len(shape), len(shape) + len(rshape)))
        if not dims:
            return value if reduction_type not in ("argmax", "argmin") else torch.zeros(shape, dtype=torch.int64)
        if 0 in rshape:
            return torch.full(shape, reduction_identity(reduction_type, src_dtype))
        return _REDUCE[reduction_type](value, dims)

    def store_reduction(self, name, index, value):
        node = self.buffers[name]
        self.storages[name] = value.to(node.dtype).reshape(self.shape).contiguous()

    def store_add(self, name, index, value, mask):
        """Note [Accumulating stores]: every kept element's value added at its place, in the loop's order
        (index_add_ on the CPU adds one after the other), into the zeroed buffer evaluate_graph made."""
        offsets = self._index(self.buffers[name].storage_offset(index)).expand(self.shape).reshape(-1)
        values = torch.as_tensor(value).to(self.storages[name].dtype).expand(self.shape).reshape(-1)
        if mask is not None:
            keep = torch.as_tensor(mask).bool().expand(self.shape).reshape(-1)
            offsets, values = offsets[keep], values[keep]
        self.storages[name].view(-1).index_add_(0, offsets, values)

    def indirect(self, value, size):
        name = f"ind{self._indirect}"
        self._indirect += 1
        if size is None:  # a position already in range (Note [Op vocabulary])
            self.env[name] = value.long()
        else:
            size_value = self._index(size)
            self.env[name] = torch.where(value < 0, value + size_value, value).long()
        return sympy.Symbol(name, integer=True)


def _make(name, fn):
    return lambda self, *args: fn(*args)


for _name, _fn in {**_TORCH_UNARY, **_TORCH_BINARY}.items():  # one method per table entry (Note [Spelling tables])
    setattr(TorchEvaluator, _name, _make(_name, _fn))


def _grid(prefix: str, sizes, total_dims: int, offset: int, env: dict) -> list[sympy.Symbol]:
    symbols = []
    for d, size in enumerate(sizes):
        symbol = loop_var(prefix, d)
        shape = [1] * total_dims
        shape[offset + d] = int(size)
        env[str(symbol)] = torch.arange(int(size)).view(shape)
        symbols.append(symbol)
    return symbols


_REDUCE = {
    "sum": lambda v, dims: v.sum(dims) if dims else v, "prod": lambda v, dims: _prod(v, dims),
    "max": lambda v, dims: v.amax(dims) if dims else v, "min": lambda v, dims: v.amin(dims) if dims else v,
    "any": lambda v, dims: v.bool().any(dims[0]) if len(dims) == 1 else v.bool().flatten(-len(dims)).any(-1),
    "all": lambda v, dims: v.bool().all(dims[0]) if len(dims) == 1 else v.bool().flatten(-len(dims)).all(-1),
    "argmax": lambda v, dims: v.flatten(-len(dims)).argmax(-1), "argmin": lambda v, dims: v.flatten(-len(dims)).argmin(-1),
}


def _scan(values: torch.Tensor, node: Scan) -> torch.Tensor:
    """Note [Scans]: torch's own scan along the last dim, in the node's accumulation dtype."""
    if values.numel() == 0:
        return values
    if values.ndim == 0:
        values = values.reshape(1)
    scans = {"sum": lambda v: torch.cumsum(v, -1), "prod": lambda v: torch.cumprod(v, -1),
             "logsumexp": lambda v: torch.logcumsumexp(v, -1), "max": lambda v: torch.cummax(v, -1).values,
             "min": lambda v: torch.cummin(v, -1).values, "argmax": lambda v: torch.cummax(v, -1).indices,
             "argmin": lambda v: torch.cummin(v, -1).indices}
    return scans[node.scan_type](values).reshape(values.shape if node.size else ())


def _prod(v, dims):
    for d in sorted(dims, reverse=True):
        v = v.prod(d)
    return v


def _in_layout(tensor, node, concrete):
    """Library results in the layout the IR was promised (Note [Library output layout])."""
    stride = tuple(concrete(s) for s in node.stride)
    if tensor.stride() == stride or tensor.numel() <= 1:
        return tensor
    return torch.empty_strided(tensor.shape, stride, dtype=tensor.dtype).copy_(tensor)


def evaluate_graph(graph: LoweredGraph, inputs: list, storages: dict | None = None) -> list:
    """Run every IR node with torch; returns the graph's outputs. `storages` receives every buffer."""
    sizes = {}
    for symbol, (position, dim) in graph.size_vars.items():
        value = inputs[position]
        sizes[str(symbol)] = int(value.shape[dim] if dim is not None else value)
    for symbol, expr in graph.derived_sizes.items():  # Note [Derived sizes]
        sizes[str(symbol)] = derived.evaluate(expr, sizes, inputs)

    def concrete(e) -> int:
        e = sympy.sympify(e)
        return int(e.subs({s: sizes[str(s)] for s in e.free_symbols if str(s) in sizes}))

    storages = {} if storages is None else storages
    for buf in graph.inputs:
        if buf is not None:
            storages[buf.name] = inputs[buf.position]
    for const in graph.constants:
        storages[const.name] = const.value
    for node in graph.nodes:
        shape = [concrete(s) for s in node.size]
        if isinstance(node, Pointwise):
            env = dict(sizes)
            index = _grid("i", shape, len(shape), 0, env)
            with use_handler(TorchEvaluator(storages, graph.buffers, env, shape)):
                ops.store(node.name, index, node.inner_fn(index))
        elif isinstance(node, Scan):
            env = dict(sizes)
            index = _grid("i", shape, len(shape), 0, env)
            with use_handler(TorchEvaluator(storages, graph.buffers, env, shape)):
                values = torch.as_tensor(node.inner_fn(index)).to(node.acc_dtype).expand(shape)
            storages[node.name] = _scan(values, node).to(node.dtype).contiguous()
        elif isinstance(node, Scatter):
            ranges = [concrete(s) for s in node.ranges]
            env = dict(sizes)
            index = _grid("i", ranges, len(ranges), 0, env)
            storages[node.name] = torch.zeros(shape, dtype=node.dtype)
            with use_handler(TorchEvaluator(storages, graph.buffers, env, ranges)):
                target, value, keep = node.inner_fn(index)
                ops.store_add(node.name, target, value, keep)
        elif isinstance(node, Reduction):
            rshape = [concrete(s) for s in node.reduction_size]
            env = dict(sizes)
            total = len(shape) + len(rshape)
            index = _grid("i", shape, total, 0, env)
            rindex = _grid("r", rshape, total, len(shape), env)
            with use_handler(TorchEvaluator(storages, graph.buffers, env, shape, rshape)):
                value = ops.reduction(node.dtype, node.src_dtype, node.reduction_type, node.inner_fn(index, rindex))
                ops.store_reduction(node.name, index, value)
        elif isinstance(node, MultiOutput):
            storages[node.name] = _in_layout(storages[node.parent][node.index], node, concrete)
        elif isinstance(node, Extern):
            def materialize(arg):
                if isinstance(arg, TensorArg):
                    return strided_view(storages[arg.name], [concrete(s) for s in arg.size],
                                        [concrete(s) for s in arg.stride], concrete(arg.offset))
                if isinstance(arg, sympy.Expr):
                    return concrete(arg)
                return arg
            args, kwargs = torch.utils._pytree.tree_map(materialize, (list(node.args), node.kwargs))
            result = node.target(*args, **kwargs)
            storages[node.name] = _in_layout(result, node, concrete) if isinstance(result, torch.Tensor) else result
    outputs = []
    for value in graph.outputs:
        if isinstance(value, TensorValue):
            shape = [concrete(s) for s in value.size]
            env = dict(sizes)
            index = _grid("i", shape, len(shape), 0, env)
            with use_handler(TorchEvaluator(storages, graph.buffers, env)):
                out = value.load(index)
            outputs.append(torch.as_tensor(out).to(value.dtype).expand(shape).contiguous())
        elif isinstance(value, sympy.Expr):
            outputs.append(concrete(value))
        else:
            outputs.append(value)
    return outputs
