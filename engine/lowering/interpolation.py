"""Interpolation: nearest (floor and exact), linear/bilinear/trilinear and bicubic upsampling, up or down,
align_corners either way, as one elementwise gather per output element.

Note [Interpolation as one gather]
Each output element computes, from its own position along each spatial dim, the source position(s) and
weights, and reads the input there: nearest one element, linear 2 per dim (4 for bilinear), bicubic 4 per
dim (16). torch's decompositions build the same values out of separate nodes: index vectors over the
output's width (arange, scale, floor, clamp, the weights) broadcast against the rows. Fused greedily, those
vectors became a kernel of their own whenever the consumer groups had not merged yet, and the main kernel
read its source columns and weights back from memory, a dependent load before each gather. Lowered whole,
the index math is a few float ops on values every lane has in registers, the source positions are clamped
by construction, so they are read as is (ops.indirect with no size: no wrap of negative positions), and the
element is one node any consumer fuses with (the residual add after a decoder's upsample).
The arithmetic is eager's CPU kernels' (aten/src/ATen/native/UpSample.h), in the same order and type:
- the scale along a dim is (in - 1)/(out - 1) with align_corners (0 for a single output), else 1/scale_factor
  when the caller gave one, else in/out; computed in the input's compute type (float32 for half types),
  nearest's in float32 always;
- nearest: min(floor(o * scale), in - 1); nearest-exact: min(floor((o + 0.5) * scale), in - 1);
- linear: src = scale * o with align_corners, else max(scale * (o + 0.5) - 0.5, 0); i0 = floor(src),
  i1 = i0 + 1 where i0 < in - 1 else i0, lambda = clamp(src - i0, 0, 1); the value is lerped per dim;
- bicubic: src as linear but never clamped at 0; i = floor(src), t = clamp(src - i, 0, 1); taps at i - 1 .. i + 2
  clamped into [0, in - 1], weights the cubic convolution (A = -0.75) of t + 1, t, 1 - t, 2 - t; rows of
  4 taps each interpolated along the last dim first, then the results along the first.
"""
from __future__ import annotations

import sympy
import torch

from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import check_dtype, out_dtype, out_size, pointwise_node
from engine.lowering.registry import Unsupported, register_lowering

aten = torch.ops.aten
CUBIC_A = -0.75


def _scale(in_size, out_size_, align_corners: bool, scale_factor, dtype):
    """The source step per output step along one dim, as a value of `dtype` (Note [Interpolation as one
    gather])."""
    if align_corners:
        if out_size_ == 1:
            return ops.constant(0.0, dtype)
        return ops.truediv(ops.index_expr(in_size - 1, dtype), ops.index_expr(out_size_ - 1, dtype))
    if scale_factor is not None and scale_factor > 0:
        return ops.constant(1.0 / float(scale_factor), dtype)
    return ops.truediv(ops.index_expr(in_size, dtype), ops.index_expr(out_size_, dtype))


def _source(o, scale, align_corners: bool, dtype, cubic: bool):
    """The real source position of output position `o` (an index expression)."""
    position = ops.index_expr(o, dtype)
    if align_corners:
        return ops.mul(scale, position)
    src = ops.sub(ops.mul(scale, ops.add(position, ops.constant(0.5, dtype))), ops.constant(0.5, dtype))
    return src if cubic else ops.maximum(src, ops.constant(0.0, dtype))


def _position(value):
    """An int64 source position, already inside the input, as an index symbol read without a wrap."""
    return ops.indirect(value, None)


def _floor_int(value):
    return ops.to_dtype(ops.floor(value), torch.int64)


def _clamp_int(value, low, high):
    return ops.minimum(ops.maximum(value, low), high)


def _lerp(a, b, weight):
    return ops.add(a, ops.mul(ops.sub(b, a), weight))


def scales_per_dim(scales, spatial: int) -> list:
    scales = list(scales) if isinstance(scales, (list, tuple)) else [scales] * spatial
    return [float(s) if s is not None else None for s in scales] + [None] * (spatial - len(scales))


def _setup(x, spatial: int):
    dtype = out_dtype()
    check_dtype(x.dtype)
    if x.ndim < spatial:
        raise Unsupported(f"interpolation over {spatial} dims of a {x.ndim}-dim input")
    size = out_size()
    lead = x.ndim - spatial
    return dtype, size, lead, list(x.size[lead:]), list(size[lead:])


def nearest_source(o, i_n, o_n, scale_factor, exact: bool):
    """The int64 source position of output position `o` along one dim, or None where eager's kernel copies
    the dim straight (equal sizes)."""
    if sympy.sympify(i_n) == sympy.sympify(o_n):
        return None
    f32 = torch.float32
    scale = _scale(i_n, o_n, False, scale_factor, f32)
    position = ops.index_expr(o, f32)
    if exact:
        position = ops.add(position, ops.constant(0.5, f32))
    src = _floor_int(ops.mul(position, scale))
    return ops.minimum(src, ops.index_expr(i_n - 1, torch.int64))


def linear_taps(o, i_n, o_n, align_corners: bool, scale_factor, acc):
    """(i0, i1, lambda) of output position `o` along one dim: the int64 source positions and the weight of
    i1, or None where eager's kernel reads the same position with weight 0 (equal sizes, no align_corners)."""
    if not align_corners and sympy.sympify(i_n) == sympy.sympify(o_n):
        return None
    scale = _scale(i_n, o_n, align_corners, scale_factor, acc)
    src = _source(o, scale, align_corners, acc, cubic=False)
    i0 = ops.to_dtype(src, torch.int64)  # src >= 0: truncation is floor
    last = ops.index_expr(i_n - 1, torch.int64)
    i1 = ops.where(ops.lt(i0, last), ops.add(i0, ops.constant(1, torch.int64)), i0)
    weight = ops.sub(src, ops.to_dtype(i0, acc))
    return i0, i1, ops.minimum(ops.maximum(weight, ops.constant(0.0, acc)), ops.constant(1.0, acc))


def _nearest(x, scales, spatial: int, exact: bool):
    dtype, size, lead, in_sizes, out_sizes = _setup(x, spatial)
    scales = scales_per_dim(scales, spatial)

    def body(index):
        source = list(index[:lead])
        for d in range(spatial):
            src = nearest_source(index[lead + d], in_sizes[d], out_sizes[d], scales[d], exact)
            source.append(index[lead + d] if src is None else _position(src))
        return x.load(source)

    return pointwise_node(body, size=size, dtype=dtype, computed_in=x.dtype)


def _linear(x, align_corners: bool, scales, spatial: int):
    dtype, size, lead, in_sizes, out_sizes = _setup(x, spatial)
    if not dtype.is_floating_point:
        raise Unsupported(f"linear interpolation of {dtype}")
    scales = scales_per_dim(scales, spatial)
    acc = compute_dtype(dtype)

    def body(index):
        taps = []  # per dim: (i0, i1, lambda)
        for d in range(spatial):
            o = index[lead + d]
            tap = linear_taps(o, in_sizes[d], out_sizes[d], align_corners, scales[d], acc)
            if tap is None:
                taps.append((o, o, None))  # eager's kernel: the same position, weight 0
                continue
            i0, i1, weight = tap
            taps.append((_position(i0), _position(i1), weight))

        def corner(d, chosen):
            if d == spatial:
                value = x.load(list(index[:lead]) + chosen)
                return value if compute_dtype(x.dtype) == acc else ops.to_dtype(value, acc)
            i0, i1, weight = taps[d]
            if weight is None:
                return corner(d + 1, chosen + [i0])
            return _lerp(corner(d + 1, chosen + [i0]), corner(d + 1, chosen + [i1]), weight)

        return corner(0, [])

    return pointwise_node(body, size=size, dtype=dtype, computed_in=acc)


def _cubic_weights(t, acc):
    """The four cubic-convolution weights of fractional offset t (A = CUBIC_A)."""
    a = ops.constant(CUBIC_A, acc)

    def near(v):  # |v| <= 1: ((A + 2) v - (A + 3)) v^2 + 1
        return ops.add(ops.mul(ops.mul(ops.sub(ops.mul(ops.constant(CUBIC_A + 2, acc), v),
                                               ops.constant(CUBIC_A + 3, acc)), v), v), ops.constant(1.0, acc))

    def far(v):  # 1 < |v| < 2: ((A v - 5A) v + 8A) v - 4A
        inner = ops.sub(ops.mul(a, v), ops.constant(5 * CUBIC_A, acc))
        inner = ops.add(ops.mul(inner, v), ops.constant(8 * CUBIC_A, acc))
        return ops.sub(ops.mul(inner, v), ops.constant(4 * CUBIC_A, acc))

    one, two = ops.constant(1.0, acc), ops.constant(2.0, acc)
    return [far(ops.add(t, one)), near(t), near(ops.sub(one, t)), far(ops.sub(two, t))]


def _bicubic(x, align_corners: bool, scales):
    dtype, size, lead, in_sizes, out_sizes = _setup(x, 2)
    if not dtype.is_floating_point:
        raise Unsupported(f"bicubic interpolation of {dtype}")
    scales = scales_per_dim(scales, 2)
    acc = compute_dtype(dtype)

    def body(index):
        taps = []  # per dim: (4 positions, 4 weights)
        for d in range(2):
            i_n, o_n, o = in_sizes[d], out_sizes[d], index[lead + d]
            scale = _scale(i_n, o_n, align_corners, scales[d], acc)
            src = _source(o, scale, align_corners, acc, cubic=True)
            floor = ops.floor(src)
            t = ops.minimum(ops.maximum(ops.sub(src, floor), ops.constant(0.0, acc)), ops.constant(1.0, acc))
            start = ops.to_dtype(floor, torch.int64)
            low, high = ops.constant(0, torch.int64), ops.index_expr(i_n - 1, torch.int64)
            positions = [_position(_clamp_int(ops.add(start, ops.constant(k - 1, torch.int64)), low, high))
                         for k in range(4)]
            taps.append((positions, _cubic_weights(t, acc)))

        def read(h, w):
            value = x.load(list(index[:lead]) + [h, w])
            return value if compute_dtype(x.dtype) == acc else ops.to_dtype(value, acc)

        def combine(values, weights):
            total = ops.mul(values[0], weights[0])
            for v, w in zip(values[1:], weights[1:]):
                total = ops.add(total, ops.mul(v, w))
            return total

        (rows, row_w), (cols, col_w) = taps
        return combine([combine([read(h, w) for w in cols], col_w) for h in rows], row_w)

    return pointwise_node(body, size=size, dtype=dtype, computed_in=acc)


@register_lowering(aten.upsample_nearest1d.default)
def upsample_nearest1d(x, output_size, scales=None):
    return _nearest(x, [scales], 1, exact=False)


@register_lowering(aten.upsample_nearest2d.default)
def upsample_nearest2d(x, output_size, scales_h=None, scales_w=None):
    return _nearest(x, [scales_h, scales_w], 2, exact=False)


@register_lowering(aten.upsample_nearest3d.default)
def upsample_nearest3d(x, output_size, scales_d=None, scales_h=None, scales_w=None):
    return _nearest(x, [scales_d, scales_h, scales_w], 3, exact=False)


@register_lowering(aten._upsample_nearest_exact1d.default)
def upsample_nearest_exact1d(x, output_size, scales=None):
    return _nearest(x, [scales], 1, exact=True)


@register_lowering(aten._upsample_nearest_exact2d.default)
def upsample_nearest_exact2d(x, output_size, scales_h=None, scales_w=None):
    return _nearest(x, [scales_h, scales_w], 2, exact=True)


@register_lowering(aten._upsample_nearest_exact3d.default)
def upsample_nearest_exact3d(x, output_size, scales_d=None, scales_h=None, scales_w=None):
    return _nearest(x, [scales_d, scales_h, scales_w], 3, exact=True)


@register_lowering(aten.upsample_linear1d.default)
def upsample_linear1d(x, output_size, align_corners, scales=None):
    return _linear(x, align_corners, [scales], 1)


@register_lowering(aten.upsample_bilinear2d.default)
def upsample_bilinear2d(x, output_size, align_corners, scales_h=None, scales_w=None):
    return _linear(x, align_corners, [scales_h, scales_w], 2)


@register_lowering(aten.upsample_trilinear3d.default)
def upsample_trilinear3d(x, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None):
    return _linear(x, align_corners, [scales_d, scales_h, scales_w], 3)


@register_lowering(aten.upsample_bicubic2d.default)
def upsample_bicubic2d(x, output_size, align_corners, scales_h=None, scales_w=None):
    return _bicubic(x, align_corners, [scales_h, scales_w])

