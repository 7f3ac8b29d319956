"""Helpers that generated Triton kernels may call (the Triton counterpart of cpp/prelude.h).

This file is read as text, never imported by the engine: engine/codegen/triton/module.py copies the header and the
helpers a module uses (with the helpers they call) into each generated module.

Note [Math under the interpreter]
Triton's interpreter (TRITON_INTERPRET=1, how kernels run without a GPU) executes tl.* with numpy but does not
implement libdevice calls. Functions Triton has no tl.* primitive for (tanh, expm1, atan, pow, ...) therefore
have two bodies: compiled kernels call libdevice; the interpreter computes the same function from tl.*
primitives (numpy's exp/log/sqrt, which are accurate there). GB_INTERPRET is a compile-time constant, so a
compiled kernel contains only the libdevice branch. It is read once, when the generated module is imported:
the loader imports a module with TRITON_INTERPRET set exactly when its kernels should run interpreted.

Note [torch semantics in Triton]
Triton's integer // and % truncate toward zero (C), torch's floor; tl.maximum (and the reductions built on it)
skip NaN, torch propagates it; torch.argmax takes the first index of ties and counts NaN as the largest value.
The helpers below keep torch's meaning.
"""
# --- header: copied first into every generated module -------------------------------------------------------
import os

import triton
import triton.language as tl
from triton.language.extra import libdevice

GB_INTERPRET: tl.constexpr = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")
# --- end of header ------------------------------------------------------------------------------------------


# Note [No & and | on conditions]: under the interpreter a comparison of a 0-d tensor carries the dtype of its
# operands, so combining it with a block through & or | fails; conditions are combined with tl.where instead.


@triton.jit
def gb_maximum(a, b):
    return tl.where(a != a, a, tl.where(a > b, a, b))


@triton.jit
def gb_minimum(a, b):
    return tl.where(a != a, a, tl.where(a < b, a, b))


@triton.jit
def gb_floordiv_int(a, b):
    quotient = a // b
    signs_differ = (a < 0) != (b < 0)
    return tl.where(a % b != 0, tl.where(signs_differ, quotient - 1, quotient), quotient)


@triton.jit
def gb_floordiv_float(a, b):
    # torch's floor division of floats (c10::div_floor_floating): from fmod, so that inf // 2 is NaN like eager
    rest = a % b
    quotient = (a - rest) / b
    quotient = tl.where(rest != 0, tl.where((b < 0) != (rest < 0), quotient - 1.0, quotient), quotient)
    rounded = tl.floor(quotient)
    rounded = tl.where(quotient - rounded > 0.5, rounded + 1.0, rounded)
    rounded = tl.where(quotient != 0, rounded, gb_copysign(0.0 * a, a / b))
    return tl.where(b == 0, a / b, rounded)


@triton.jit
def gb_remainder(a, b):
    rest = a % b
    signs_differ = (rest < 0) != (b < 0)
    return tl.where(rest != 0, tl.where(signs_differ, rest + b, rest), rest)


@triton.jit
def gb_trunc(x):
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def gb_round(x):
    # half to even, like torch.round
    low = tl.floor(x)
    part = x - low
    even = low % 2.0 == 0.0
    return tl.where(part > 0.5, low + 1.0, tl.where(part < 0.5, low, tl.where(even, low, low + 1.0)))


@triton.jit
def gb_sign(x):
    # torch.sign(NaN) is 0
    return (tl.where(x > 0, 1, 0) - tl.where(x < 0, 1, 0)).to(x.dtype)


@triton.jit
def gb_signbit(x):
    if x.dtype == tl.float64:
        bits = x.to(tl.int64, bitcast=True)
    else:
        bits = x.to(tl.int32, bitcast=True)
    return bits < 0


@triton.jit
def gb_copysign(a, b):
    return tl.where(gb_signbit(b), -tl.abs(a), tl.abs(a))


# Note [Reductions without Triton's standard library]
# tl.sum, tl.max, tl.zeros, tl.sigmoid, ... are themselves @triton.jit functions, decorated once when triton is
# first imported: in a process that imported triton without TRITON_INTERPRET they cannot run under the
# interpreter, and with it they cannot be compiled. Generated code therefore calls only Triton builtins and the
# helpers here (decorated when each generated module is imported, in the right flavour). A row reduction is
# tl.reduce with our combine function when compiled; under the interpreter, tl.reduce with a custom combine
# function calls it once per element in Python, so there we halve the row with reshape/split instead: log2(RBLOCK)
# numpy steps.


@triton.jit
def gb_add(a, b):
    return a + b


@triton.jit
def gb_mul(a, b):
    return a * b


@triton.jit
def gb_argmax_combine(value_a, index_a, value_b, index_b):
    # the larger value, the smaller index on ties; a NaN beats everything but an earlier NaN (torch.argmax)
    nan_a = value_a != value_a
    nan_b = value_b != value_b
    first = index_a < index_b
    take_a = (nan_a & (~nan_b | first)) | (~nan_a & ~nan_b & ((value_a > value_b) | ((value_a == value_b) & first)))
    return tl.where(take_a, value_a, value_b), tl.where(take_a, index_a, index_b)


@triton.jit
def gb_argmin_combine(value_a, index_a, value_b, index_b):
    nan_a = value_a != value_a
    nan_b = value_b != value_b
    first = index_a < index_b
    take_a = (nan_a & (~nan_b | first)) | (~nan_a & ~nan_b & ((value_a < value_b) | ((value_a == value_b) & first)))
    return tl.where(take_a, value_a, value_b), tl.where(take_a, index_a, index_b)


@triton.jit
def gb_interpreter_reduce(tile, kind, rows, width):
    # interpreter only: combine column pairs until one column is left. The combine is written out here, not
    # called, because every call of a jit function costs the interpreter milliseconds; and widths are
    # computed in place, never assigned, because the interpreter turns every assigned value into a tensor.
    for level in range(width.bit_length() - 1):
        left, right = tl.split(tl.reshape(tile, [rows, width >> (level + 1), 2]))
        if kind == "sum":
            tile = left + right
        elif kind == "prod":
            tile = left * right
        elif kind == "max":
            tile = tl.where(left != left, left, tl.where(left > right, left, right))
        else:
            tile = tl.where(left != left, left, tl.where(left < right, left, right))
    return tl.reshape(tile, [rows])


@triton.jit
def gb_interpreter_reduce_pair(values, indices, combine, rows, width):
    for level in range(width.bit_length() - 1):
        values_left, values_right = tl.split(tl.reshape(values, [rows, width >> (level + 1), 2]))
        indices_left, indices_right = tl.split(tl.reshape(indices, [rows, width >> (level + 1), 2]))
        values, indices = combine(values_left, indices_left, values_right, indices_right)
    return tl.reshape(values, [rows]), tl.reshape(indices, [rows])


# One row reduction, `kind` a compile-time constant: a compiled kernel keeps only its own tl.reduce.
@triton.jit
def gb_reduce_row(tile, kind: tl.constexpr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    if GB_INTERPRET:
        result = gb_interpreter_reduce(tile, kind, XBLOCK, RBLOCK)
    elif kind == "sum":
        result = tl.reduce(tile, 1, gb_add)
    elif kind == "prod":
        result = tl.reduce(tile, 1, gb_mul)
    elif kind == "max":
        result = tl.reduce(tile, 1, gb_maximum)
    else:
        result = tl.reduce(tile, 1, gb_minimum)
    return result[:, None]


@triton.jit
def gb_argmax_row(values, indices, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    if GB_INTERPRET:
        best, index = gb_interpreter_reduce_pair(values, indices, gb_argmax_combine, XBLOCK, RBLOCK)
    else:
        best, index = tl.reduce((values, indices), 1, gb_argmax_combine)
    return index[:, None].to(tl.int64)


@triton.jit
def gb_argmin_row(values, indices, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    if GB_INTERPRET:
        best, index = gb_interpreter_reduce_pair(values, indices, gb_argmin_combine, XBLOCK, RBLOCK)
    else:
        best, index = tl.reduce((values, indices), 1, gb_argmin_combine)
    return index[:, None].to(tl.int64)


# Online softmax (Note [Online softmax] in engine/schedule/online_softmax.py): a running max m and a sum s of
# exp(v - m), rescaled when the max grows. Masked-off lanes hold -inf (the max's identity) and leave s alone;
# NaN propagates into both as in the two-pass form. A new max v adds exp(v - v): 1, except for v = +inf, where
# the two-pass form adds exp(inf - inf) = NaN and eager's row becomes NaN; so does this one.
@triton.jit
def gb_online_softmax_combine(m, s, v):
    bigger = v > m
    scale = tl.exp(tl.where(bigger, m - v, v - m))
    grown = tl.where(bigger, s * scale + tl.where(v == float("inf"), float("nan"), 1.0), s + scale)
    return gb_maximum(m, v), tl.where(v == float("-inf"), s, grown)


@triton.jit
def gb_online_softmax_row(m, s, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    row_max = gb_reduce_row(m, "max", XBLOCK, RBLOCK)
    scaled = tl.where(m == row_max, s, s * tl.exp(m - row_max))
    return row_max, gb_reduce_row(scaled, "sum", XBLOCK, RBLOCK)


# --- libdevice functions, with interpreter bodies (Note [Math under the interpreter]) ------------------------


@triton.jit
def gb_expm1(x):
    if GB_INTERPRET:
        grown = tl.exp(x)
        less_one = grown - 1.0
        # Kahan: (e^x - 1) * x / log(e^x) cancels the rounding error of e^x near 0
        near_zero = tl.where(less_one == 0.0, x, less_one * x / tl.log(grown))
        result = tl.where(tl.abs(x) < 0.5, near_zero, less_one)
    else:
        result = libdevice.expm1(x)
    return result


@triton.jit
def gb_log1p(x):
    if GB_INTERPRET:
        shifted = 1.0 + x
        back = shifted - 1.0
        near_zero = tl.where(back == 0.0, x, tl.log(shifted) * x / back)
        result = tl.where(tl.abs(x) < 0.5, near_zero, tl.log(shifted))
    else:
        result = libdevice.log1p(x)
    return result


@triton.jit
def gb_tanh(x):
    if GB_INTERPRET:
        grown = gb_expm1(-2.0 * tl.abs(x))
        magnitude = -grown / (2.0 + grown)
        result = tl.where(x < 0, -magnitude, magnitude)
    else:
        result = libdevice.tanh(x)
    return result


@triton.jit
def gb_sinh(x):
    if GB_INTERPRET:
        size = tl.abs(x)
        grown = gb_expm1(size)
        magnitude = tl.where(size > 20.0, 0.5 * tl.exp(size), 0.5 * (grown + grown / (grown + 1.0)))
        result = tl.where(x < 0, -magnitude, magnitude)
    else:
        result = libdevice.sinh(x)
    return result


@triton.jit
def gb_cosh(x):
    if GB_INTERPRET:
        result = 0.5 * (tl.exp(x) + tl.exp(-x))
    else:
        result = libdevice.cosh(x)
    return result


@triton.jit
def gb_asinh(x):
    if GB_INTERPRET:
        size = tl.abs(x)
        moderate = gb_log1p(size + size * size / (1.0 + tl.sqrt(1.0 + size * size)))
        magnitude = tl.where(size > 1e10, tl.log(size) + 0.6931471805599453, moderate)
        result = tl.where(x < 0, -magnitude, magnitude)
    else:
        result = libdevice.asinh(x)
    return result


@triton.jit
def gb_acosh(x):
    if GB_INTERPRET:
        above = x - 1.0
        moderate = gb_log1p(above + tl.sqrt(above * (x + 1.0)))
        result = tl.where(x > 1e10, tl.log(x) + 0.6931471805599453, moderate)
    else:
        result = libdevice.acosh(x)
    return result


@triton.jit
def gb_atanh(x):
    if GB_INTERPRET:
        size = tl.abs(x)
        magnitude = 0.5 * gb_log1p(2.0 * size / (1.0 - size))
        result = tl.where(x < 0, -magnitude, magnitude)
    else:
        result = libdevice.atanh(x)
    return result


@triton.jit
def gb_tan(x):
    if GB_INTERPRET:
        result = tl.sin(x) / tl.cos(x)
    else:
        result = libdevice.tan(x)
    return result


@triton.jit
def gb_atan(x):
    if GB_INTERPRET:
        # Cephes' atanf: reduce to |z| <= tan(pi/8), then an odd polynomial
        size = tl.abs(x)
        large = size > 2.414213562373095
        medium = size > 0.4142135623730950
        z = tl.where(large, -1.0 / size, tl.where(medium, (size - 1.0) / (size + 1.0), size))
        base = tl.where(large, 1.5707963267948966, tl.where(medium, 0.7853981633974483, 0.0))
        z2 = z * z
        poly = (((8.05374449538e-2 * z2 - 1.38776856032e-1) * z2 + 1.99777106478e-1) * z2
                - 3.33329491539e-1) * z2 * z + z
        magnitude = base + poly
        result = tl.where(x < 0, -magnitude, magnitude)
    else:
        result = libdevice.atan(x)
    return result


@triton.jit
def gb_asin(x):
    if GB_INTERPRET:
        result = gb_atan(x / tl.sqrt((1.0 - x) * (1.0 + x)))
    else:
        result = libdevice.asin(x)
    return result


@triton.jit
def gb_acos(x):
    if GB_INTERPRET:
        result = 2.0 * gb_atan(tl.sqrt((1.0 - x) / (1.0 + x)))
    else:
        result = libdevice.acos(x)
    return result


@triton.jit
def gb_atan2(y, x):
    if GB_INTERPRET:
        angle = gb_atan(y / x)
        angle = tl.where(gb_signbit(x), tl.where(gb_signbit(y), angle - 3.141592653589793, angle + 3.141592653589793),
                         angle)
        on_axis = tl.where(gb_signbit(x), 3.141592653589793, 0.0)
        on_axis = tl.where(gb_signbit(y), -on_axis, on_axis)
        result = tl.where(x == 0, tl.where(y == 0, on_axis, angle), angle)
    else:
        result = libdevice.atan2(y, x)
    return result


@triton.jit
def gb_hypot(a, b):
    if GB_INTERPRET:
        x = tl.abs(a)
        y = tl.abs(b)
        large = tl.where(x > y, x, y)
        small = tl.where(x > y, y, x)
        ratio = small / large
        finite = tl.where(large == 0.0, 0.0, large * tl.sqrt(1.0 + ratio * ratio))
        result = tl.where(x == float("inf"), float("inf"), tl.where(y == float("inf"), float("inf"), finite))
    else:
        result = libdevice.hypot(a, b)
    return result


@triton.jit
def gb_erfc(x):
    if GB_INTERPRET:
        result = 1.0 - tl.erf(x)
    else:
        result = libdevice.erfc(x)
    return result


@triton.jit
def gb_log10(x):
    if GB_INTERPRET:
        result = tl.log(x) * 0.4342944819032518
    else:
        result = libdevice.log10(x)
    return result


@triton.jit
def gb_erfinv(y):
    if GB_INTERPRET:
        wide = y.to(tl.float64)
        # Winitzki's closed form as the first guess, then Newton steps on erf(x) - y
        w = -tl.log((1.0 - wide) * (1.0 + wide))
        t = 4.330746750799873 - 0.5 * w
        guess = tl.sqrt(tl.sqrt(t * t + w / 0.147) - t)
        x = tl.where(wide < 0, -guess, guess)
        x = x - (tl.erf(x) - wide) / (1.1283791670955126 * tl.exp(-x * x))
        x = x - (tl.erf(x) - wide) / (1.1283791670955126 * tl.exp(-x * x))
        x = x - (tl.erf(x) - wide) / (1.1283791670955126 * tl.exp(-x * x))
        x = tl.where(wide == 1.0, float("inf"), tl.where(wide == -1.0, float("-inf"), x))
        result = x.to(y.dtype)
    else:
        result = libdevice.erfinv(y)
    return result


@triton.jit
def gb_lgamma_positive(z):
    # z >= 0.5: shift to z + 6, where Stirling's series is accurate, and divide the shift back out
    w = z + 6.0
    series = (w - 0.5) * tl.log(w) - w + 0.9189385332046727 + 1.0 / (12.0 * w) - 1.0 / (360.0 * w * w * w) \
        + 1.0 / (1260.0 * w * w * w * w * w)
    shift = z * (z + 1.0) * (z + 2.0) * (z + 3.0) * (z + 4.0) * (z + 5.0)
    direct = (z - 0.5) * tl.log(z) - z + 0.9189385332046727 + 1.0 / (12.0 * z)
    return tl.where(z > 1e6, direct, series - tl.log(shift))


@triton.jit
def gb_lgamma(x):
    if GB_INTERPRET:
        wide = x.to(tl.float64)
        reflected = tl.log(3.141592653589793 / tl.abs(tl.sin(3.141592653589793 * wide))) \
            - gb_lgamma_positive(1.0 - wide)
        value = tl.where(wide < 0.5, reflected, gb_lgamma_positive(wide))
        pole = tl.where(wide == tl.floor(wide), wide <= 0, False)  # 0, -1, -2, ...: sin(pi x) is not exactly 0
        result = tl.where(pole, float("inf"), tl.where(wide == float("inf"), float("inf"), value)).to(x.dtype)
    else:
        result = libdevice.lgamma(x)
    return result


@triton.jit
def gb_pow(a, b):
    if GB_INTERPRET:
        base = a.to(tl.float64)
        exponent = b.to(tl.float64)
        magnitude = tl.exp2(exponent * tl.log2(tl.abs(base)))
        odd_power = tl.where(tl.abs(exponent % 2.0) == 1.0, -magnitude, magnitude)
        negative_base = tl.where(exponent == tl.floor(exponent), odd_power, float("nan"))
        negative_base = tl.where(base == float("-inf"), tl.where(exponent > 0, float("inf"), 0.0), negative_base)
        negative_base = tl.where(base == -1.0, tl.where(tl.abs(exponent) == float("inf"), 1.0, negative_base),
                                 negative_base)
        signed = tl.where(base < 0, negative_base, magnitude)
        result = tl.where(exponent == 0.0, 1.0, tl.where(base == 1.0, 1.0, signed)).to(a.dtype)
    else:
        result = libdevice.pow(a, b)
    return result


@triton.jit
def gb_pow_int(a, b):
    return gb_round(gb_pow(a.to(tl.float64), b.to(tl.float64))).to(a.dtype)


# Scans (Note [Scans] in engine/ir/nodes.py): the combine functions of tl.associative_scan, `a` the earlier
# prefix and `b` the later one, with eager's meaning: cummax/cummin keep a NaN once seen and move to the later
# of equal values (ATen compares with >= and <=, and a new NaN wins); logcumsumexp is ATen's log-add-exp, which
# keeps the later value where both are the same infinity. A sum or a product scans with gb_add or gb_mul.
@triton.jit
def gb_scan_logsumexp(a, b):
    low = tl.where(a != a, a, tl.where(b != b, b, tl.where(b < a, b, a)))
    high = tl.where(a != a, a, tl.where(b != b, b, tl.where(b > a, b, a)))
    finite = tl.abs(low) < float("inf")
    return tl.where((low != high) | finite, gb_log1p(tl.exp(low - high)) + high, b)


@triton.jit
def gb_scan_max(a, b):
    return tl.where((b != b) | ((a == a) & (b >= a)), b, a)


@triton.jit
def gb_scan_min(a, b):
    return tl.where((b != b) | ((a == a) & (b <= a)), b, a)


@triton.jit
def gb_scan_argmax(value_a, index_a, value_b, index_b):
    take_b = (value_b != value_b) | ((value_a == value_a) & (value_b >= value_a))
    return tl.where(take_b, value_b, value_a), tl.where(take_b, index_b, index_a)


@triton.jit
def gb_scan_argmin(value_a, index_a, value_b, index_b):
    take_b = (value_b != value_b) | ((value_a == value_a) & (value_b <= value_a))
    return tl.where(take_b, value_b, value_a), tl.where(take_b, index_b, index_a)
