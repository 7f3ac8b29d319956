"""histc: a histogram of equal-width bins over a fixed range, as a Reduction per bin.

Note [Histogram as a reduction per bin]
histc counts the elements of x that fall in each of `bins` equal bins over [min, max]; mixture-of-experts
layers (transformers' grouped experts) call it to count the tokens routed to each expert, over as many bins
as experts. Each bin is a Reduction over every element of x: the sum of 1 where the element's bin is this
one. The bin is eager's CPU rule (aten/src/ATen/native/cpu/HistogramKernel.cpp, linear interpolation
without local search) in x's own type: pos = (int64)((x - min) * bins / (max - min)), max itself counted in
the last bin, elements outside [min, max] and NaN in none; min and max as x's type, the ends of the bin
edges eager builds with linspace (its last edge is max exactly). The sum of ones is exact below 2^24 a bin
in float32. Each element is read once per bin, so only small histograms are generated (at most
MAX_GENERATED_BINS bins, a router's expert count); a larger one needs a scatter that adds 1 per element
(atomics on a GPU) and runs eagerly. When min == max (histc's default 0, 0) the range is the data's own
min and max, reduced before any element can be binned: that runs eagerly too.

Note [Integer histograms]
Eager's CPU histc has no integer kernel (it raises); its CUDA kernel bins integers (a router's int32 expert
ids) in 64-bit integer arithmetic: pos = (x - min) * bins / (max - min), exact and truncated, min and max
converted to x's type, and counts of x's type. Generated the same way on CUDA; on the CPU the op is left to
eager, whose error the user should see.
"""
from __future__ import annotations

import sympy
import torch

from engine.ir.ops import ops
from engine.lowering.common import load_as, out_dtype, out_size, reduction_node
from engine.lowering.registry import Unsupported, current, register_lowering

aten = torch.ops.aten
MAX_GENERATED_BINS = 64


@register_lowering(aten.histc.default)
def histc(x, bins=100, min=0, max=0):
    integer = not x.dtype.is_floating_point and x.dtype is not torch.bool
    low, high, bins = (int(min), int(max), int(bins)) if integer else (float(min), float(max), int(bins))
    if integer and not str(current().device).startswith("cuda"):
        raise Unsupported(f"histc of {x.dtype} on the CPU runs eagerly: eager's CPU kernel has no integer "
                          "version and raises its own error (Note [Integer histograms])")
    if not integer and x.dtype not in (torch.float32, torch.float64):
        raise Unsupported(f"histc of {x.dtype} runs eagerly: eager bins half-precision values in their own "
                          "type, whose rounding of (x - min) * bins / (max - min) is not reproduced here "
                          "(generated for float32, float64 and integers)")
    if low == high:
        raise Unsupported("histc with min == max (the default 0, 0) bins over the data's own min and max, two "
                          "reductions that must finish before any element is binned; it runs eagerly (Note "
                          "[Histogram as a reduction per bin] in engine/lowering/histogram.py)")
    if low > high or bins <= 0:
        raise Unsupported("histc with max < min or no bins: eager raises its own error")
    if bins > MAX_GENERATED_BINS:
        raise Unsupported(f"histc over {bins} bins runs eagerly: generated as one reduction per bin, each reading "
                          f"every element, it is generated up to {MAX_GENERATED_BINS} bins; more needs a scatter "
                          "that adds 1 per element (Note [Histogram as a reduction per bin])")
    # Note [Integer histograms]: integers are binned in exact 64-bit arithmetic, counted in x's type
    compute = torch.int64 if integer else x.dtype
    divide, scale, one, zero = (ops.floordiv, bins, 1, 0) if integer else (ops.truediv, float(bins), 1.0, 0.0)

    def count(index, rindex):
        value = load_as(x, rindex, compute)
        lo, hi = ops.constant(low, compute), ops.constant(high, compute)
        inside = ops.logical_and(ops.ge(value, lo), ops.le(value, hi))
        scaled = divide(ops.mul(ops.sub(value, lo), ops.constant(scale, compute)), ops.sub(hi, lo))
        pos = ops.to_dtype(scaled, torch.int64)
        last = ops.constant(bins - 1, torch.int64)
        pos = ops.where(ops.eq(pos, ops.constant(bins, torch.int64)), last, pos)
        here = ops.logical_and(inside, ops.eq(pos, ops.index_expr(index[0], torch.int64)))
        return ops.where(here, ops.constant(one, x.dtype), ops.constant(zero, x.dtype))

    return reduction_node(count, size=out_size(), reduction_size=list(x.size) or [sympy.Integer(1)],
                          reduction_type="sum", dtype=out_dtype())
