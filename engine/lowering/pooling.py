"""Average pooling: a Reduction over the kernel window, then a division by the window's size.

Note [Average pooling window]
For output position o along a spatial dim of input size H (kernel k, stride s, padding p), torch's CPU kernel
takes the window [o*s - p, min(o*s - p + k, H + p)); positions outside [0, H) read as zero. The divisor is
the window's size with the padding counted (count_include_pad) or without it, unless divisor_override is set.
Both are index expressions (Min/Max of loop variables), so one kernel serves every window, edges included.
"""
from __future__ import annotations

import sympy
import torch

from engine.ir.indexing import product
from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import check_dtype, load_as, out_dtype, out_size, pointwise_node, reduction_node
from engine.lowering.creation import clamp_index
from engine.lowering.registry import register_lowering

aten = torch.ops.aten


def _per_dim(value, n, default=None):
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        value = default
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return value * n if len(value) == 1 else value


def _avg_pool(x: TensorValue, spatial: int, kernel_size, stride, padding, count_include_pad, divisor_override):
    kernel = [int(k) for k in _per_dim(kernel_size, spatial)]
    stride = [int(s) for s in _per_dim(stride, spatial, kernel)]
    padding = [int(p) for p in _per_dim(padding, spatial, [0])]
    size = out_size()
    result_dtype = out_dtype()
    check_dtype(x.dtype)
    check_dtype(result_dtype)
    # integers: an int64 sum divided by the window size, truncating like eager's C++ kernel
    acc = compute_dtype(result_dtype) if result_dtype.is_floating_point else torch.int64
    lead = x.ndim - spatial
    in_sizes = x.size[lead:]

    def window_start(o, d):
        return o * stride[d] - padding[d]

    def sum_fn(index, rindex):
        source, inside = list(index[:lead]), None
        for d in range(spatial):
            position = window_start(index[lead + d], d) + rindex[d]
            source.append(clamp_index(position, in_sizes[d]))
            p = ops.index_expr(position, torch.int64)
            ok = ops.logical_and(ops.ge(p, ops.constant(0, torch.int64)),
                                 ops.lt(p, ops.index_expr(in_sizes[d], torch.int64)))
            inside = ok if inside is None else ops.logical_and(inside, ok)
        return ops.where(inside, load_as(x, source, acc), ops.constant(0, acc))

    summed = reduction_node(sum_fn, size=size, reduction_size=[sympy.Integer(k) for k in kernel],
                            reduction_type="sum", dtype=acc)

    def divisor(index):
        if divisor_override:
            return sympy.Integer(int(divisor_override))
        sizes = []
        for d in range(spatial):
            start = window_start(index[lead + d], d)
            end = sympy.Min(start + kernel[d], in_sizes[d] + padding[d])
            if not count_include_pad:
                start, end = sympy.Max(start, 0), sympy.Min(end, in_sizes[d])
            sizes.append(end - start)
        return product(sizes)

    def inner_fn(index):
        divide = ops.truediv if acc.is_floating_point else ops.truncdiv
        value = divide(summed.load(index), ops.index_expr(divisor(index), acc))
        return value

    return pointwise_node(inner_fn, computed_in=acc)


@register_lowering(aten.avg_pool2d.default)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, 2, kernel_size, stride, padding, count_include_pad, divisor_override)


@register_lowering(aten.avg_pool3d.default)
def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, 3, kernel_size, stride, padding, count_include_pad, divisor_override)
