"""Helpers every lowering uses: broadcasting loads, type promotion, building Pointwise/Reduction nodes."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import sympy
import torch

from engine.ir import derived, indexing
from engine.ir.indexing import Expr, FloorDiv, ModIndex
from engine.ir.nodes import Extern, Pointwise, Reduction, TensorValue
from engine.ir.ops import compute_dtype, ops
from engine.lowering.registry import Unsupported, current

SUPPORTED_DTYPES = {torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.uint8, torch.bool}


def check_dtype(dtype: torch.dtype) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise Unsupported(f"dtype {dtype} is not generated (complex and exotic dtypes run eagerly)")


def _torch_integer_functions() -> dict:
    """torch's sympy functions in symbolic sizes, as Glassbox's own (which the index printers know)."""
    from torch.utils._sympy import functions as f
    # torch's Mod is defined for a >= 0 (torch proved it); PythonMod takes any a, which only a derived size
    # computes exactly (Python's %) unless sympy sees a >= 0 too (Note [Splitting keeps operands non-negative])
    python_mod = lambda a, b: ModIndex(a, b) if a.is_nonnegative else f.PythonMod(a, b)
    # likewise a floor division of a negated number (-(n + 1) // 2): C's `/` rounds it toward zero, so it stays
    # torch's, a derived size computed in Python (Note [Negative symbolic positions] in lowering/views.py)
    floor_div = lambda a, b: f.FloorDiv(a, b) if a.is_negative or (
        not a.is_nonnegative and a.could_extract_minus_sign()) else FloorDiv(a, b)
    return {f.FloorDiv: floor_div, f.CleanDiv: FloorDiv, f.PythonMod: python_mod, f.Mod: ModIndex,
            f.ModularIndexing: lambda x, div, mod: ModIndex(FloorDiv(x, div), mod),
            f.CeilDiv: lambda a, b: FloorDiv(a + b - 1, b)}


def _from_torch_sympy(expr, table: dict) -> Expr:
    if not isinstance(expr, sympy.Basic) or not expr.args:
        return expr
    args = [_from_torch_sympy(a, table) for a in expr.args]
    return table.get(expr.func, expr.func)(*args)


def sympify_size(value) -> Expr:
    """A size (int or SymInt) as an index expression. Sizes under dynamic shapes may hold torch's FloorDiv
    (the length of x[::2] is (s0 + 1)//2): those become Glassbox's FloorDiv/ModIndex; what index arithmetic
    cannot spell becomes a derived size (Note [Derived sizes])."""
    expr = indexing.sympify_size(value)
    if not (isinstance(expr, sympy.Basic) and expr.args):
        return expr
    expr = _from_torch_sympy(expr, _torch_integer_functions())
    return current().name_size(expr) if derived.needs_name(expr) else expr  # Note [Derived sizes]


def out_size() -> tuple[Expr, ...]:
    return tuple(sympify_size(s) for s in current().out_meta.shape)


def out_dtype() -> torch.dtype:
    return current().out_meta.dtype


def normalize_dim(dim: int, ndim: int) -> int:
    return dim + max(ndim, 1) if dim < 0 else dim


def broadcast_index(value_size: Sequence[Expr], index: Sequence[Expr]) -> list[Expr]:
    """Right-align `index` to a tensor of `value_size`; size-1 dims read element 0."""
    lead = len(index) - len(value_size)
    return [sympy.Integer(0) if s == 1 else index[lead + d] for d, s in enumerate(value_size)]


def load_as(value: Any, index: Sequence[Expr], dtype: torch.dtype):
    """Load a tensor value broadcast to `index`, or a Python scalar, as `dtype`."""
    if value is None:
        return None
    if isinstance(value, TensorValue):
        loaded = value.load(broadcast_index(value.size, index))
        return loaded if compute_dtype(value.dtype) == dtype else ops.to_dtype(loaded, dtype)
    if isinstance(value, sympy.Expr):
        return ops.index_expr(value, dtype)
    return ops.constant(value, dtype)


def _meta_of(value: Any):
    if isinstance(value, TensorValue):
        return torch.empty([1] * value.ndim, dtype=value.dtype, device="meta")
    if isinstance(value, sympy.Expr):
        return 1
    return value


def promoted_dtype(*values: Any) -> torch.dtype:
    """torch's type promotion over tensors and Python scalars."""
    metas = [_meta_of(v) for v in values if v is not None]
    tensors = [m for m in metas if isinstance(m, torch.Tensor)]
    result = tensors[0] if tensors else torch.tensor(metas[0], device="meta")
    for other in metas:
        dtype = torch.result_type(result, other)
        result = torch.empty([1] * max(result.dim(), getattr(other, "ndim", 0)), dtype=dtype, device="meta")
    return result.dtype


# Note [Node builders]
# Every Pointwise and Reduction node a lowering makes goes through `pointwise_node` or `reduction_node`: they
# name the node, tag it with the ATen node being lowered, register it with the graph, and (pointwise) cast the
# body's value from the dtype it was computed in to the node's dtype, once, at the end. A lowering therefore
# writes its arithmetic in one compute dtype and never spells the final cast itself.


def pointwise_node(body: Callable, *, size: Sequence[Expr] | None = None, dtype: torch.dtype | None = None,
                   computed_in: torch.dtype | None = None) -> TensorValue:
    """A Pointwise node (Note [Node builders]): `body(index)` yields a value in `computed_in` (by default the
    compute dtype of `dtype`, see engine/ir/ops.py); the node stores it as `dtype` (default: the ATen node's)."""
    graph = current()
    size = tuple(size) if size is not None else out_size()
    dtype = dtype or out_dtype()
    computed_in = computed_in or compute_dtype(dtype)
    inner_fn = body if computed_in == dtype else lambda index: ops.to_dtype(body(index), dtype)
    node = Pointwise(name=graph.new_name(), size=size, dtype=dtype, device=graph.device,
                     origins=graph.origins(), inner_fn=inner_fn)
    graph.register(node)
    return TensorValue(node, size)


def reduction_node(body: Callable, *, size: Sequence[Expr], reduction_size: Sequence[Expr], reduction_type: str,
                   dtype: torch.dtype, src_dtype: torch.dtype | None = None) -> TensorValue:
    """A Reduction node (Note [Node builders]): out[index] = reduce(body(index, rindex) over reduction_size),
    each body value in `src_dtype` (default `dtype`)."""
    graph = current()
    node = Reduction(name=graph.new_name(), size=tuple(size), dtype=dtype, device=graph.device,
                     origins=graph.origins(), reduction_size=tuple(reduction_size), reduction_type=reduction_type,
                     src_dtype=src_dtype or dtype, inner_fn=body)
    graph.register(node)
    return TensorValue(node, tuple(size))


def make_pointwise(fn: Callable, *inputs: Any, compute: torch.dtype | None = None,
                   size: Sequence[Expr] | None = None, dtype: torch.dtype | None = None,
                   input_dtypes: Sequence[torch.dtype | None] | None = None) -> TensorValue:
    """A Pointwise node computing fn(*loads) with broadcasting; the result is cast to the node's dtype.

    Inputs are loaded in the compute dtype (float32 for half types), or per input as `input_dtypes` says."""
    dtype = dtype or out_dtype()
    check_dtype(dtype)
    for value in inputs:
        if isinstance(value, TensorValue):
            check_dtype(value.dtype)
    compute = compute_dtype(compute or dtype)
    dtypes = input_dtypes or [None] * len(inputs)

    def body(index):
        return fn(*[load_as(v, index, d or compute) for v, d in zip(inputs, dtypes)])

    # predicates already yield bool; everything else is computed in `compute`
    computed_in = torch.bool if getattr(fn, "yields_bool", False) else compute
    return pointwise_node(body, size=size, dtype=dtype, computed_in=computed_in)


def make_reduction(x: TensorValue, dims: Sequence[int], keepdim: bool, reduction_type: str,
                   dtype: torch.dtype | None = None, value_fn: Callable | None = None) -> TensorValue:
    """A Reduction over `dims` of x. `value_fn(loaded)` transforms each element before reducing."""
    ndim = x.ndim
    # a 0-dim tensor reduces over nothing: its dims 0 and -1 name the scalar itself
    dims = sorted({normalize_dim(d, ndim) for d in dims if ndim}) if dims else list(range(ndim))
    kept = [d for d in range(ndim) if d not in dims]
    size = tuple(sympy.Integer(1) if d in dims else x.size[d] for d in range(ndim)) if keepdim else \
        tuple(x.size[d] for d in kept)
    reduction_size = tuple(x.size[d] for d in dims)
    dtype = dtype or out_dtype()
    check_dtype(x.dtype)
    check_dtype(dtype)
    src = compute_dtype(dtype) if reduction_type not in ("argmax", "argmin", "any", "all") else \
        compute_dtype(x.dtype)

    def body(index, rindex):
        full = [None] * ndim
        kept_index = [index[d] for d in kept] if keepdim else list(index)
        for d, i in zip(kept, kept_index):
            full[d] = i
        for d, r in zip(dims, rindex):
            full[d] = r
        loaded = load_as(x, full, src)
        return value_fn(loaded) if value_fn else loaded

    return reduction_node(body, size=size, reduction_size=reduction_size, reduction_type=reduction_type,
                          dtype=dtype, src_dtype=src)


def predicate(fn: Callable) -> Callable:
    fn.yields_bool = True
    return fn


def allocation(graph, size, stride, dtype) -> TensorValue:
    """An uninitialized buffer of this layout: an Extern call of empty_strided (used for empty tensors)."""
    node = graph.register(Extern(name=graph.new_name(), size=tuple(size), dtype=dtype, device=graph.device,
                                 origins=graph.origins(), target=torch.ops.aten.empty_strided.default,
                                 args=(list(size), list(stride)),
                                 kwargs={"dtype": dtype, "device": torch.device(graph.device)},
                                 out_stride=tuple(stride)))
    return TensorValue(node, node.size)


def realize(value: TensorValue) -> TensorValue:
    """Materialize a view into a contiguous buffer of its own (a copy kernel)."""
    graph = current()
    if any(size == 0 for size in value.size):  # Note [Empty tensors]: nothing to copy
        return allocation(graph, tuple(value.size), tuple(indexing.contiguous_strides(value.size)), value.dtype)
    return pointwise_node(value.load, size=value.size, dtype=value.dtype, computed_in=value.dtype)
