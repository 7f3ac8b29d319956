"""Interpolation's gradient: nearest (floor and exact) and linear/bilinear/trilinear upsampling backward, up
or down, align_corners both ways, as one gather per input-gradient element.

Note [Interpolation backward as a gather]
Eager's kernels scatter: each output gradient is added, times its weight, into the input positions the
forward read (1 per dim for nearest, 2 for linear); torch's decomposition of the forward makes the gradient
an index_put that accumulates (atomics on a GPU). Turned around, input position h along a dim receives from
the outputs o whose source positions name h: a run of consecutive outputs. The kernel visits, per dim, the
outputs first(h) .. first(h) + count - 1, recomputes each one's source positions and weight with the
forward's own float arithmetic (nearest_source and linear_taps in interpolation.py), and adds its gradient,
times the product of the per-dim weights, where every dim's source names h (a `where`, not a multiply by a
zero weight, so an inf gradient elsewhere adds no NaN). Candidates past the outputs' end are masked off.
first(h) = floor(h * r) + shift, r = out/in ((out - 1)/(in - 1) with align_corners), and `count` are found
at lowering time by enumerating, for every output, the input positions its sources can name: the exact
rational source position, and both neighbours of an integer where the source lies within a relative 1e-4
of one (the kernel's float rounding may fall either side), unless the scale is a power of two, whose
products are exact. So no output that names h is left out of its run whatever the rounding, and the run
is as short as the arithmetic allows: 2 per dim for a nearest x2, 5 for a bilinear x2 (4 weighted, and
the first output, clamped to source 0 with weight 0, names position 1 too: eager adds its 0 * gradient,
a NaN where that gradient is inf, and so do we). The sizes must be static for this count: a graph with
symbolic sizes keeps torch's decomposition (Note [Interpolation kept whole] in engine/decompose.py). Up to MAX_UNROLLED_WINDOW visits are unrolled into an elementwise node, more
become a Reduction over the visits (gather_windows in pooling.py).
Bicubic's gradient (4 taps a dim, 16 weights) keeps torch's decomposition in training.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import sympy
import torch

from engine.ir.indexing import FloorDiv
from engine.ir.ops import ops
from engine.lowering.common import check_dtype, load_as
from engine.lowering.interpolation import linear_taps, nearest_source, scales_per_dim
from engine.lowering.pooling import gather_windows
from engine.lowering.registry import Unsupported, register_lowering

aten = torch.ops.aten
NEAR_INTEGER = 1e-4  # relative distance to an integer within which float rounding may take either side


def _scale_value(i_n: int, o_n: int, align_corners: bool, scale_factor) -> float:
    if align_corners:
        return (i_n - 1) / (o_n - 1) if o_n > 1 else 0.0
    if scale_factor is not None and scale_factor > 0:
        return 1.0 / float(scale_factor)
    return i_n / o_n


def _floors(v: float, exact: bool) -> set[int]:
    """The integers the kernel's floor of v may give (Note [Interpolation backward as a gather])."""
    n = math.floor(v)
    if exact:
        return {n}
    near = NEAR_INTEGER * max(1.0, abs(v))
    return {n} | ({n - 1} if v - n <= near else set()) | ({n + 1} if n + 1 - v <= near else set())


def _named(o: int, i_n: int, o_n: int, mode: str, align_corners: bool, scale_factor) -> set[int]:
    """The input positions output `o`'s sources may name along one dim."""
    if i_n == o_n and not (mode == "linear" and align_corners):
        return {o}
    scale = _scale_value(i_n, o_n, align_corners, scale_factor)
    exact = scale == 0.0 or math.frexp(scale)[0] == 0.5  # a power of two: products are exact
    if mode == "linear":
        v = scale * o if align_corners else max(scale * (o + 0.5) - 0.5, 0.0)
        starts = {min(max(n, 0), i_n - 1) for n in _floors(v, exact)}
        return starts | {min(n + 1, i_n - 1) for n in starts}
    v = scale * (o + 0.5) if mode == "exact" else scale * o
    return {min(max(n, 0), i_n - 1) for n in _floors(v, exact)}


def _run(i_n: int, o_n: int, mode: str, align_corners: bool, scale_factor):
    """(count, cover) of the outputs that name an input position along one dim, cover(h) giving the first
    and the outputs' end (Note [Interpolation backward as a gather])."""
    naming: list[list[int]] = [[] for _ in range(i_n)]
    for o in range(o_n):
        for h in _named(o, i_n, o_n, mode, align_corners, scale_factor):
            naming[h].append(o)
    ratio = Fraction(o_n - 1, i_n - 1) if align_corners and i_n > 1 and o_n > 1 else Fraction(o_n, i_n)
    num, den = ratio.numerator, ratio.denominator
    named = [h for h in range(i_n) if naming[h]]
    shift = min(min(naming[h]) - h * num // den for h in named)
    count = max(max(naming[h]) - max(h * num // den + shift, 0) + 1 for h in named)
    end = sympy.Integer(o_n)

    def cover(h):
        return _first_output(h, num, den, shift), end

    return count, cover


@functools.lru_cache(maxsize=65536, typed=True)
def _first_output(h, num: int, den: int, shift: int):
    """The first output naming input position `h` (_run). Cached by expression: a body reruns at the same index
    for every handler and fusion candidate, and sympy's Max constructor compares its arguments each time."""
    offset = h * num + shift * den
    return FloorDiv(offset if shift >= 0 else sympy.Max(offset, 0), den)


def _backward(grad, input_size, mode: str, align_corners: bool, scales, spatial: int):
    check_dtype(grad.dtype)
    lead = grad.ndim - spatial
    in_sizes = [sympy.sympify(s) for s in list(input_size)[lead:]]
    out_sizes = list(grad.size[lead:])
    if not all(isinstance(s, sympy.Integer) for s in in_sizes + out_sizes):
        raise Unsupported("an interpolation gradient over symbolic sizes runs eagerly (its runs of outputs are "
                          "counted at lowering time: Note [Interpolation backward as a gather])")
    in_sizes, out_sizes = [int(s) for s in in_sizes], [int(s) for s in out_sizes]
    scales = scales_per_dim(scales, spatial)
    runs = [_run(in_sizes[d], out_sizes[d], mode, align_corners, scales[d]) for d in range(spatial)]

    def share(index, source, outputs, acc):
        touched, weight = [], None
        for d in range(spatial):
            h = ops.index_expr(index[lead + d], torch.int64)
            if mode == "linear":
                tap = linear_taps(outputs[d], in_sizes[d], out_sizes[d], align_corners, scales[d], acc)
                if tap is None:  # equal sizes: the output at h only, weight 1 (its run holds just it)
                    continue
                i0, i1, lam = tap
                at0, at1 = ops.eq(i0, h), ops.eq(i1, h)
                zero = ops.constant(0.0, acc)
                w = ops.add(ops.where(at0, ops.sub(ops.constant(1.0, acc), lam), zero), ops.where(at1, lam, zero))
                touched.append(ops.logical_or(at0, at1))
                weight = w if weight is None else ops.mul(weight, w)
            else:
                src = nearest_source(outputs[d], in_sizes[d], out_sizes[d], scales[d], exact=mode == "exact")
                if src is not None:
                    touched.append(ops.eq(src, h))
        value = load_as(grad, source, acc)
        if weight is not None:
            value = ops.mul(weight, value)
        if not touched:
            return value
        every = touched[0]
        for t in touched[1:]:
            every = ops.logical_and(every, t)
        return ops.where(every, value, ops.constant(0.0, acc))

    return gather_windows(grad, lead, runs, share)


@register_lowering(aten.upsample_nearest1d_backward.default)
def upsample_nearest1d_backward(grad, output_size, input_size, scales=None):
    return _backward(grad, input_size, "nearest", False, [scales], 1)


@register_lowering(aten.upsample_nearest2d_backward.default)
def upsample_nearest2d_backward(grad, output_size, input_size, scales_h=None, scales_w=None):
    return _backward(grad, input_size, "nearest", False, [scales_h, scales_w], 2)


@register_lowering(aten.upsample_nearest3d_backward.default)
def upsample_nearest3d_backward(grad, output_size, input_size, scales_d=None, scales_h=None, scales_w=None):
    return _backward(grad, input_size, "nearest", False, [scales_d, scales_h, scales_w], 3)


@register_lowering(aten._upsample_nearest_exact1d_backward.default)
def upsample_nearest_exact1d_backward(grad, output_size, input_size, scales=None):
    return _backward(grad, input_size, "exact", False, [scales], 1)


@register_lowering(aten._upsample_nearest_exact2d_backward.default)
def upsample_nearest_exact2d_backward(grad, output_size, input_size, scales_h=None, scales_w=None):
    return _backward(grad, input_size, "exact", False, [scales_h, scales_w], 2)


@register_lowering(aten._upsample_nearest_exact3d_backward.default)
def upsample_nearest_exact3d_backward(grad, output_size, input_size, scales_d=None, scales_h=None,
                                      scales_w=None):
    return _backward(grad, input_size, "exact", False, [scales_d, scales_h, scales_w], 3)


@register_lowering(aten.upsample_linear1d_backward.default)
def upsample_linear1d_backward(grad, output_size, input_size, align_corners, scales=None):
    return _backward(grad, input_size, "linear", align_corners, [scales], 1)


@register_lowering(aten.upsample_bilinear2d_backward.default)
def upsample_bilinear2d_backward(grad, output_size, input_size, align_corners, scales_h=None, scales_w=None):
    return _backward(grad, input_size, "linear", align_corners, [scales_h, scales_w], 2)


@register_lowering(aten.upsample_trilinear3d_backward.default)
def upsample_trilinear3d_backward(grad, output_size, input_size, align_corners, scales_d=None, scales_h=None,
                                  scales_w=None):
    return _backward(grad, input_size, "linear", align_corners, [scales_d, scales_h, scales_w], 3)
