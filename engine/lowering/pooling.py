"""Pooling: average pooling as a Reduction over the kernel window, then a division by the window's size;
max pooling (with its indices) as an elementwise max over the unrolled window.

Note [Average pooling window]
For output position o along a spatial dim of input size H (kernel k, stride s, padding p), torch's CPU kernel
takes the window [o*s - p, min(o*s - p + k, H + p)); positions outside [0, H) read as zero. The divisor is
the window's size with the padding counted (count_include_pad) or without it, unless divisor_override is set.
Both are index expressions (Min/Max of loop variables), so one kernel serves every window, edges included.
"""
from __future__ import annotations

import sympy
import torch

from engine.ir.indexing import Bounded, FloorDiv, product
from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import (check_dtype, load_as, out_dtype, out_size, pointwise_node, reduction_node,
                                    sympify_size)
from engine.lowering.registry import Unsupported, current, register_lowering

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
            source.append(Bounded(position, in_sizes[d]))
            p = ops.index_expr(position, torch.int64)
            ok = ops.logical_and(ops.ge(p, ops.constant(0, torch.int64)),
                                 ops.lt(p, ops.index_expr(in_sizes[d], torch.int64)))
            inside = ok if inside is None else ops.logical_and(inside, ok)
        return ops.masked(inside, lambda: load_as(x, source, acc), ops.constant(0, acc))  # padding: not read

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


# Note [Max pooling as our kernel]
# max_pool2d_with_indices is lowered whole, not through torch's decomposition (a gather of every window, then
# a max over a flattened axis, and only in recent torch: older ones run the op eagerly): each output is the
# max over its window unrolled into a chain of loads and compares, an elementwise node like any other, so
# the batch norm and ReLU that feed it are recomputed inside it instead of stored, and it is stored in the
# graph's layout (channels-last between convolutions: Note [Channels-last convolutions]), where an eager call
# returned whatever layout the library chose and the convolutions after it converted it back. The indices are
# a second node over the same window; nobody reads them in inference, so no kernel computes them there (Note
# [Unused nodes]). Both follow eager's CUDA and CPU kernels exactly: the window visits positions in order,
# a position replaces the best when its value is greater or NaN, the best starts at -inf on the first
# in-bounds position (so an all -inf window names that position). Windows of more than MAX_UNROLLED_WINDOW
# positions (a global max pool) run eagerly: an unrolled chain that long is no kernel to read.
MAX_UNROLLED_WINDOW = 25


def _first_inside(start, step: int):
    """The first window position at or after `start`, by `step`s, that is not in the left padding."""
    if step == 1:
        return sympy.Max(start, 0)
    return start + step * FloorDiv(sympy.Max(0, -start) + step - 1, step)


def _max_over_window(x, index, lead: int, kernel, stride, padding, dilation, acc):
    """(max value, flat input position of its first occurrence) of the window of output `index` (Note [Max
    pooling as our kernel])."""
    in_sizes = x.size[lead:]
    starts = [index[lead + d] * stride[d] - padding[d] for d in range(2)]
    first = [_first_inside(s, dilation[d]) for d, s in enumerate(starts)]
    best = ops.constant(float("-inf"), acc)
    where = ops.index_expr(first[0] * in_sizes[1] + first[1], torch.int64)
    for kh in range(kernel[0]):
        for kw in range(kernel[1]):
            position = [starts[0] + kh * dilation[0], starts[1] + kw * dilation[1]]
            inside = None
            for d in range(2):
                p = ops.index_expr(position[d], torch.int64)
                ok = ops.logical_and(ops.ge(p, ops.constant(0, torch.int64)),
                                     ops.lt(p, ops.index_expr(in_sizes[d], torch.int64)))
                inside = ok if inside is None else ops.logical_and(inside, ok)
            source = list(index[:lead]) + [Bounded(position[d], in_sizes[d]) for d in range(2)]
            value = ops.masked(inside, lambda source=source: load_as(x, source, acc), ops.constant(0, acc))
            better = ops.logical_and(inside, ops.logical_or(ops.gt(value, best), ops.isnan(value)))
            best = ops.where(better, value, best)
            where = ops.where(better, ops.index_expr(position[0] * in_sizes[1] + position[1], torch.int64), where)
    return best, where


@register_lowering(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    kernel = [int(k) for k in _per_dim(kernel_size, 2)]
    stride = [int(s) for s in _per_dim(stride, 2, kernel)]
    padding = [int(p) for p in _per_dim(padding, 2, [0])]
    dilation = [int(d) for d in _per_dim(dilation, 2, [1])]
    if not x.dtype.is_floating_point:
        raise Unsupported(f"max pooling of {x.dtype} runs eagerly (generated only for floating types)")
    if kernel[0] * kernel[1] > MAX_UNROLLED_WINDOW:
        raise Unsupported(f"a max pool window of {kernel[0]}x{kernel[1]} positions runs eagerly (more than "
                          f"{MAX_UNROLLED_WINDOW} to unroll: Note [Max pooling as our kernel])")
    check_dtype(x.dtype)
    values_meta, _ = current().out_meta
    size = tuple(sympify_size(s) for s in values_meta.shape)
    acc = compute_dtype(x.dtype)
    lead = x.ndim - 2

    def window(index):
        return _max_over_window(x, index, lead, kernel, stride, padding, dilation, acc)

    values = pointwise_node(lambda index: window(index)[0], size=size, dtype=values_meta.dtype, computed_in=acc)
    indices = pointwise_node(lambda index: window(index)[1], size=size, dtype=torch.int64)
    return values, indices
