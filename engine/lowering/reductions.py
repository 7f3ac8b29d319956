"""Reductions over any dims. Composite ones (mean, var) are built from simple nodes; fusion joins them."""
from __future__ import annotations

import sympy
import torch

from engine.ir.indexing import product
from engine.ir.nodes import TensorValue
from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import make_pointwise, make_reduction, normalize_dim, out_dtype
from engine.lowering.registry import register_lowering

aten = torch.ops.aten


def _dims(x: TensorValue, dims) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(x.ndim))
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    return sorted({normalize_dim(d, x.ndim) for d in dims}) if x.ndim else []


def _reduced_count(x: TensorValue, dims) -> sympy.Expr:
    return product(x.size[d] for d in _dims(x, dims)) if x.ndim else sympy.Integer(1)


def _reduce_then_cast(x, dims, keepdim, reduction_type, dtype):
    """Reduce in the compute dtype (float32 for half types), then round to `dtype` if it differs."""
    acc = compute_dtype(dtype)
    result = make_reduction(x, _dims(x, dims), keepdim, reduction_type, dtype=acc)
    if acc != dtype:
        result = make_pointwise(lambda v: v, result, dtype=dtype, size=result.size)
    return result


@register_lowering(aten.sum.dim_IntList, aten.sum.default)
def sum_(x, dim=None, keepdim=False, *, dtype=None):
    return _reduce_then_cast(x, dim, keepdim, "sum", out_dtype())


@register_lowering(aten.prod.dim_int, aten.prod.default)
def prod(x, dim=None, keepdim=False, *, dtype=None):
    return _reduce_then_cast(x, dim, keepdim, "prod", out_dtype())


@register_lowering(aten.amax, aten.amin)
def amax_amin(x, dim=(), keepdim=False):
    from engine.lowering.registry import current
    kind = "max" if current().current_node.target is aten.amax.default else "min"
    return make_reduction(x, _dims(x, dim), keepdim, kind)


@register_lowering(aten.max.dim, aten.min.dim)
def max_min_dim(x, dim, keepdim=False):
    from engine.lowering.registry import current
    meta = current().out_meta
    kind = "max" if current().current_node.target is aten.max.dim else "min"
    dims = _dims(x, dim)
    values = make_reduction(x, dims, keepdim, kind, dtype=meta[0].dtype)
    indices = make_reduction(x, dims, keepdim, "arg" + kind, dtype=torch.int64)
    return values, indices


@register_lowering(aten.max.default, aten.min.default)
def max_min_all(x):
    from engine.lowering.registry import current
    kind = "max" if current().current_node.target is aten.max.default else "min"
    return make_reduction(x, list(range(x.ndim)), False, kind)


@register_lowering(aten.argmax, aten.argmin)
def argmax_argmin(x, dim=None, keepdim=False):
    from engine.lowering.registry import current
    kind = "argmax" if current().current_node.target is aten.argmax.default else "argmin"
    if dim is None:  # over the flattened tensor
        flat = x.view([product(x.size)], lambda idx: _unflatten_one(idx[0], x.size))
        result = make_reduction(flat, [0], False, kind, dtype=torch.int64)
        if keepdim:
            return result.view([sympy.Integer(1)] * x.ndim, lambda idx: [])
        return result
    return make_reduction(x, _dims(x, dim), keepdim, kind, dtype=torch.int64)


def _unflatten_one(linear, size):
    from engine.ir.indexing import unflatten
    return unflatten(linear, size)


@register_lowering(aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims, aten.all.default)
def any_all(x, dim=None, keepdim=False):
    from engine.lowering.registry import current
    kind = "any" if current().current_node.target.overloadpacket is aten.any else "all"
    return make_reduction(x, _dims(x, dim), keepdim, kind, dtype=torch.bool)


@register_lowering(aten.mean.dim, aten.mean.default)
def mean(x, dim=None, keepdim=False, *, dtype=None):
    result_dtype = out_dtype()
    acc = compute_dtype(result_dtype)
    total = make_reduction(x, _dims(x, dim), keepdim, "sum", dtype=acc)
    count = _reduced_count(x, dim)
    return make_pointwise(lambda s, n: ops.truediv(s, n), total, count, dtype=result_dtype, size=total.size)


# Note [Variance accumulates as eager's]
# Eager's CPU variance (var, std, var_mean, and batch norm's statistics, which the decomposition turns into
# var_mean) accumulates in double whatever the data's type (ATen's Welford reduction on the CPU keeps double
# accumulators). Over few values of nearly equal size the difference is the whole answer: timm ReXNet's
# squeeze-excitation batch norm over 2 values per channel came out 5.2e-4 RMS from an fp64 reference in
# float32 sums, against eager's 2.8e-5, and its training gradients differed by up to 71.6. So on the CPU the
# mean, the deviations and their squares are computed in float64 (the deviation of a float32 value from a
# double mean is exact there) and rounded to the result's type at the end. On a GPU eager accumulates float32
# in float32, and so do we.


def _variance_accumulation(result_dtype: torch.dtype) -> torch.dtype:
    from engine.lowering.registry import current
    if result_dtype.is_floating_point and torch.device(current().device).type == "cpu":
        return torch.float64  # Note [Variance accumulates as eager's]
    return compute_dtype(result_dtype)


def _variance(x, dim, correction, keepdim, result_dtype):
    dims = _dims(x, dim)
    acc = _variance_accumulation(result_dtype)
    count = _reduced_count(x, dims)
    total = make_reduction(x, dims, True, "sum", dtype=acc)
    mean_kept = make_pointwise(lambda s, n: ops.truediv(s, n), total, count, dtype=acc, size=total.size)
    deviation = make_pointwise(lambda v, m: ops.mul(ops.sub(v, m), ops.sub(v, m)), x, mean_kept, dtype=acc,
                               size=x.size)
    squares = make_reduction(deviation, dims, keepdim, "sum", dtype=acc)
    correction = 1 if correction is None else correction
    var = make_pointwise(lambda s, n: ops.truediv(s, n), squares, sympy.Max(count - correction, 0),
                         dtype=result_dtype, size=squares.size)
    return var, mean_kept


@register_lowering(aten.var.correction)
def var(x, dim=None, *, correction=None, keepdim=False):
    return _variance(x, dim, correction, keepdim, out_dtype())[0]


@register_lowering(aten.var_mean.correction)
def var_mean(x, dim=None, *, correction=None, keepdim=False):
    from engine.lowering.registry import current
    result_dtype = current().out_meta[0].dtype
    var_value, mean_kept = _variance(x, dim, correction, keepdim, result_dtype)
    if keepdim:
        mean_value = make_pointwise(lambda m: m, mean_kept, dtype=result_dtype, size=mean_kept.size)
    else:
        dims = _dims(x, dim)
        kept = [d for d in range(x.ndim) if d not in dims]
        squeezed = mean_kept.view([x.size[d] for d in kept], lambda idx: _scatter_kept(idx, kept, x.ndim))
        mean_value = make_pointwise(lambda m: m, squeezed, dtype=result_dtype, size=squeezed.size)
    return var_value, mean_value


def _scatter_kept(idx, kept, ndim):
    full = [sympy.Integer(0)] * ndim
    for d, i in zip(kept, idx):
        full[d] = i
    return full


def _scan(x: TensorValue, dim: int, scan_type: str, result_dtype: torch.dtype) -> TensorValue:
    """A Scan node over `dim` of x (Note [Scans] in ir/nodes.py): the dim moved last in the node's own size,
    read back through the inverse permutation."""
    from engine.ir.nodes import Scan
    from engine.lowering.common import check_dtype, load_as
    from engine.lowering.registry import current

    check_dtype(x.dtype)
    check_dtype(result_dtype)
    ndim = max(x.ndim, 1)
    dim = normalize_dim(dim, ndim)
    if scan_type in ("argmax", "argmin", "max", "min"):
        acc = compute_dtype(x.dtype)  # cummax/cummin compare the input's values
    else:
        acc = compute_dtype(result_dtype)
    size = tuple(x.size) if x.ndim else (sympy.Integer(1),)
    order = [d for d in range(ndim) if d != dim] + [dim]  # node dim k is x's dim order[k]
    node_size = tuple(size[d] for d in order)

    def inner_fn(index):
        source = [None] * ndim
        for k, d in enumerate(order):
            source[d] = index[k]
        return load_as(x, source if x.ndim else [], acc)

    graph = current()
    node = graph.register(Scan(name=graph.new_name(), size=node_size, dtype=result_dtype, device=graph.device,
                               origins=graph.origins(), inner_fn=inner_fn, scan_type=scan_type, acc_dtype=acc))
    value = TensorValue(node, node_size)
    if order != list(range(ndim)):
        value = value.view(size, lambda idx: [idx[order[k]] for k in range(ndim)])
    if not x.ndim:
        value = value.view((), lambda idx: [sympy.Integer(0)])
    return value


@register_lowering(aten.cumsum.default)
def cumsum(x, dim, *, dtype=None):
    return _scan(x, dim, "sum", out_dtype())


@register_lowering(aten.cumprod.default)
def cumprod(x, dim, *, dtype=None):
    return _scan(x, dim, "prod", out_dtype())


@register_lowering(aten.logcumsumexp.default)
def logcumsumexp(x, dim):
    from engine.lowering.registry import Unsupported
    if not out_dtype().is_floating_point:
        raise Unsupported(f"logcumsumexp of {x.dtype} runs eagerly")
    return _scan(x, dim, "logsumexp", out_dtype())


@register_lowering(aten.cummax.default, aten.cummin.default)
def cummax_cummin(x, dim):
    from engine.lowering.registry import Unsupported, current
    kind = "max" if current().current_node.target is aten.cummax.default else "min"
    if x.dtype == torch.bool:
        raise Unsupported(f"cum{kind} of bool runs eagerly")
    values_meta, _ = current().out_meta
    return _scan(x, dim, kind, values_meta.dtype), _scan(x, dim, "arg" + kind, torch.int64)
