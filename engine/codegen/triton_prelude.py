"""Helpers that generated Triton kernels may call (the Triton counterpart of cpp_prelude.h).

This file is read as text, never imported by the engine: engine/codegen/triton.py copies the header and the
helpers a module uses (with the helpers they call) into each generated module.

Note [Math under the interpreter]
Triton's interpreter (TRITON_INTERPRET=1, how kernels run without a GPU) executes tl.* with numpy but does not
implement libdevice calls. Functions Triton has no tl.* primitive for (tanh, expm1, atan, pow, ...) therefore
have two bodies: compiled kernels call libdevice; the interpreter computes the same function from tl.*
primitives (numpy's exp/log/sqrt, which are accurate there). GB_INTERPRET is a compile-time constant, so a
compiled kernel contains only the libdevice branch. It is read once, when the generated module is imported:
the loader imports a module with TRITON_INTERPRET set exactly when its kernels should run interpreted.

Note [torch semantics in Triton]
Triton's integer // and % truncate toward zero (C), torch's floor; tl.max/tl.min and tl.maximum skip NaN,
torch propagates it; tl.argmax's treatment of NaN and ties is unspecified, torch takes the first index and
counts NaN as the largest value. The helpers below restore torch's meaning.
"""
# --- header: copied first into every generated module -------------------------------------------------------
import os

import triton
import triton.language as tl
from triton.language.extra import libdevice

GB_INTERPRET: tl.constexpr = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")
# --- end of header ------------------------------------------------------------------------------------------


@triton.jit
def gb_maximum(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def gb_minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)


@triton.jit
def gb_floordiv_int(a, b):
    quotient = a // b
    return tl.where((a % b != 0) & ((a < 0) != (b < 0)), quotient - 1, quotient)


@triton.jit
def gb_remainder(a, b):
    rest = a % b
    return tl.where((rest != 0) & ((rest < 0) != (b < 0)), rest + b, rest)


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
    step = tl.where(x > 0, 1, 0) - tl.where(x < 0, 1, 0)
    return tl.where(x != x, x, step.to(x.dtype))


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


@triton.jit
def gb_mul(a, b):
    return a * b


@triton.jit
def gb_max_row(tile):
    # tl.max skips NaN; torch.amax returns NaN for a row that has one
    has_nan = tl.max((tile != tile).to(tl.int32), 1) > 0
    return tl.where(has_nan, float("nan"), tl.max(tile, 1))[:, None]


@triton.jit
def gb_min_row(tile):
    has_nan = tl.max((tile != tile).to(tl.int32), 1) > 0
    return tl.where(has_nan, float("nan"), tl.min(tile, 1))[:, None]


@triton.jit
def gb_argmax_row(values, indices):
    # the first index of the largest value; a NaN is larger than everything (torch.argmax)
    first_nan = tl.min(tl.where(values != values, indices, 2147483647), 1)
    best = tl.max(values, 1)[:, None]
    first_best = tl.min(tl.where(values == best, indices, 2147483647), 1)
    return tl.where(first_nan < 2147483647, first_nan, first_best)[:, None].to(tl.int64)


@triton.jit
def gb_argmin_row(values, indices):
    first_nan = tl.min(tl.where(values != values, indices, 2147483647), 1)
    best = tl.min(values, 1)[:, None]
    first_best = tl.min(tl.where(values == best, indices, 2147483647), 1)
    return tl.where(first_nan < 2147483647, first_nan, first_best)[:, None].to(tl.int64)


@triton.jit
def gb_argmax_update(best, best_index, values, indices):
    take = (values > best) | ((values == best) & (indices < best_index)) | ((values != values) & (best == best))
    return tl.where(take, values, best), tl.where(take, indices, best_index)


@triton.jit
def gb_argmin_update(best, best_index, values, indices):
    take = (values < best) | ((values == best) & (indices < best_index)) | ((values != values) & (best == best))
    return tl.where(take, values, best), tl.where(take, indices, best_index)


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
        moderate = gb_log1p(size + size * size / (1.0 + tl.sqrt_rn(1.0 + size * size)))
        magnitude = tl.where(size > 1e10, tl.log(size) + 0.6931471805599453, moderate)
        result = tl.where(x < 0, -magnitude, magnitude)
    else:
        result = libdevice.asinh(x)
    return result


@triton.jit
def gb_acosh(x):
    if GB_INTERPRET:
        above = x - 1.0
        moderate = gb_log1p(above + tl.sqrt_rn(above * (x + 1.0)))
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
        result = gb_atan(x / tl.sqrt_rn((1.0 - x) * (1.0 + x)))
    else:
        result = libdevice.asin(x)
    return result


@triton.jit
def gb_acos(x):
    if GB_INTERPRET:
        result = 2.0 * gb_atan(tl.sqrt_rn((1.0 - x) / (1.0 + x)))
    else:
        result = libdevice.acos(x)
    return result


@triton.jit
def gb_atan2(y, x):
    if GB_INTERPRET:
        angle = gb_atan(y / x)
        angle = tl.where(x < 0, tl.where(gb_signbit(y), angle - 3.141592653589793, angle + 3.141592653589793), angle)
        both_zero = (x == 0) & (y == 0)
        on_axis = tl.where(gb_signbit(x), 3.141592653589793, 0.0)
        on_axis = tl.where(gb_signbit(y), -on_axis, on_axis)
        result = tl.where(both_zero, on_axis, angle)
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
        finite = tl.where(large == 0.0, 0.0, large * tl.sqrt_rn(1.0 + ratio * ratio))
        result = tl.where((x == float("inf")) | (y == float("inf")), float("inf"), finite)
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
        t = 4.330746750799873 + 0.5 * w
        guess = tl.sqrt_rn(tl.sqrt_rn(t * t - w / 0.147) - t)
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
        result = tl.where(wide == float("inf"), float("inf"), value).to(x.dtype)
    else:
        result = libdevice.lgamma(x)
    return result


@triton.jit
def gb_pow(a, b):
    if GB_INTERPRET:
        base = a.to(tl.float64)
        exponent = b.to(tl.float64)
        magnitude = tl.exp2(exponent * tl.log2(tl.abs(base)))
        integral = exponent == tl.floor(exponent)
        odd = integral & (tl.abs(exponent % 2.0) == 1.0)
        signed = tl.where(base < 0, tl.where(integral, tl.where(odd, -magnitude, magnitude), float("nan")), magnitude)
        result = tl.where((exponent == 0.0) | (base == 1.0), 1.0, signed).to(a.dtype)
    else:
        result = libdevice.pow(a, b)
    return result


@triton.jit
def gb_pow_int(a, b):
    return gb_round(gb_pow(a.to(tl.float64), b.to(tl.float64))).to(a.dtype)
