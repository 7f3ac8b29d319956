"""Elementwise ops. Most are one line: an ATen op and the ops-protocol function it computes."""
from __future__ import annotations

import math

import torch

from engine.ir.ops import ops
from engine.lowering.common import make_pointwise, out_dtype, predicate, promoted_dtype
from engine.lowering.registry import Unsupported, register_lowering

aten = torch.ops.aten


def register_unary(target, fn):
    @register_lowering(target)
    def lower(x, *args, **kwargs):
        if args or kwargs:
            raise Unsupported(f"{target} with extra arguments {args} {kwargs}")
        return make_pointwise(fn, x)

    return lower


def register_binary(target, fn):
    @register_lowering(target)
    def lower(a, b, *, alpha=None):
        if alpha is not None and alpha != 1:
            return make_pointwise(lambda x, y: fn(x, ops.mul(y, ops.constant(alpha, _dt(y)))), a, b)
        return make_pointwise(fn, a, b, compute=promoted_dtype(a, b) if out_dtype() == torch.bool else None)

    return lower


def register_compare(target, fn):
    @register_lowering(target)
    def lower(a, b):
        return make_pointwise(predicate(fn), a, b, compute=promoted_dtype(a, b))

    return lower


def _dt(value):
    """The dtype of an ops value: every handler's values expose .dtype."""
    return value.dtype


UNARY_ONE_LINERS = {
    aten.neg: "neg", aten.abs: "abs", aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1",
    aten.log: "log", aten.log2: "log2", aten.log10: "log10", aten.log1p: "log1p", aten.sqrt: "sqrt",
    aten.rsqrt: "rsqrt", aten.sin: "sin", aten.cos: "cos", aten.tan: "tan", aten.asin: "asin",
    aten.acos: "acos", aten.atan: "atan", aten.sinh: "sinh", aten.cosh: "cosh", aten.tanh: "tanh",
    aten.asinh: "asinh", aten.acosh: "acosh", aten.atanh: "atanh", aten.erf: "erf", aten.erfc: "erfc",
    aten.erfinv: "erfinv", aten.lgamma: "lgamma", aten.sigmoid: "sigmoid", aten.relu: "relu",
    aten.floor: "floor", aten.ceil: "ceil", aten.trunc: "trunc", aten.sign: "sign",
    aten.reciprocal: "reciprocal", aten.bitwise_not: "bitwise_not", aten.square: "square",
    aten.round.default: "round",
}
for _target, _name in UNARY_ONE_LINERS.items():
    register_unary(_target, (lambda name: lambda x: getattr(ops, name)(x))(_name))

BINARY_ONE_LINERS = {
    aten.add: "add", aten.sub: "sub", aten.mul: "mul", aten.maximum: "maximum", aten.minimum: "minimum",
    aten.atan2: "atan2", aten.hypot: "hypot", aten.copysign: "copysign", aten.fmod: "fmod",
    aten.remainder: "remainder", aten.bitwise_and: "bitwise_and", aten.bitwise_or: "bitwise_or",
    aten.bitwise_xor: "bitwise_xor", aten.bitwise_left_shift: "left_shift",
    aten.bitwise_right_shift: "right_shift", aten.pow: "pow",
}
for _target, _name in BINARY_ONE_LINERS.items():
    register_binary(_target, (lambda name: lambda a, b: getattr(ops, name)(a, b))(_name))

COMPARE_ONE_LINERS = {
    aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
    aten.logical_and: "logical_and", aten.logical_or: "logical_or", aten.logical_xor: "logical_xor",
}
for _target, _name in COMPARE_ONE_LINERS.items():
    register_compare(_target, (lambda name: lambda a, b: getattr(ops, name)(a, b))(_name))


@register_lowering(aten.round.decimals)
def _round_decimals(x, *, decimals=0):
    """torch's CPU kernel: nearbyint(x * 10^d) / 10^d, or nearbyint(x / 10^-d) * 10^-d for negative d."""
    if not out_dtype().is_floating_point:
        return make_pointwise(lambda v: v, x)
    scale = 10.0 ** abs(decimals)

    def fn(v):
        c = ops.constant(scale, v.dtype)
        if decimals < 0:
            return ops.mul(ops.round(ops.truediv(v, c)), c)
        return ops.truediv(ops.round(ops.mul(v, c)), c)

    return make_pointwise(fn, x)


@register_lowering(aten.fmax, aten.fmin)
def _fmax_fmin(a, b):
    """Like maximum/minimum, except that a NaN loses: fmax(NaN, 1) == 1 (NaN only when both are NaN)."""
    from engine.lowering.registry import current
    pick = ops.maximum if current().current_node.target.overloadpacket is aten.fmax else ops.minimum

    def fn(x, y):
        if not x.dtype.is_floating_point:
            return pick(x, y)
        return ops.where(ops.isnan(x), y, ops.where(ops.isnan(y), x, pick(x, y)))

    return make_pointwise(fn, a, b)


@register_lowering(aten.logical_not, aten.isnan, aten.isinf, aten.signbit)
def _unary_predicate(x):
    from engine.lowering.registry import current
    name = current().current_node.target.__name__.split(".")[0]
    fn = {"logical_not": ops.logical_not, "isnan": ops.isnan, "isinf": ops.isinf, "signbit": ops.signbit}[name]
    return make_pointwise(predicate(lambda v: fn(v)), x, compute=x.dtype if x.dtype.is_floating_point
                          or x.dtype == torch.bool else x.dtype)


@register_lowering(aten.isfinite)
def _isfinite(x):
    if not x.dtype.is_floating_point:
        return make_pointwise(predicate(lambda v: ops.constant(True, torch.bool)), x, compute=x.dtype)
    return make_pointwise(predicate(lambda v: ops.logical_not(ops.logical_or(ops.isnan(v), ops.isinf(v)))), x,
                          compute=x.dtype)


@register_lowering(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor, aten.true_divide.Scalar)
def _true_div(a, b):  # true_divide: what a float scale computed from sizes becomes under dynamic shapes
    return make_pointwise(ops.truediv, a, b)


@register_lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(a, b, *, rounding_mode=None):
    dtype = out_dtype()
    if rounding_mode is None:
        return make_pointwise(ops.truediv, a, b)
    if dtype.is_floating_point:
        rounder = ops.floor if rounding_mode == "floor" else ops.trunc
        return make_pointwise(lambda x, y: rounder(ops.truediv(x, y)), a, b)
    return make_pointwise(ops.floordiv if rounding_mode == "floor" else ops.truncdiv, a, b)


@register_lowering(aten.floor_divide)
def _floor_divide(a, b):
    if out_dtype().is_floating_point:
        return make_pointwise(lambda x, y: ops.floor(ops.truediv(x, y)), a, b)
    return make_pointwise(ops.floordiv, a, b)


@register_lowering(aten.rsub)
def _rsub(a, b, *, alpha=1):
    return make_pointwise(lambda x, y: ops.sub(y, ops.mul(x, ops.constant(alpha, _dt(x)))) if alpha != 1
                          else ops.sub(y, x), a, b)


@register_lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(cond, a, b):
    # the condition is read as bool; both branches in the result's compute dtype
    return make_pointwise(ops.where, cond, a, b, input_dtypes=(torch.bool, None, None))


@register_lowering(aten.clamp, aten.clamp_min, aten.clamp_max)
def _clamp(x, min=None, max=None):
    from engine.lowering.registry import current
    target = current().current_node.target
    if target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        min, max = None, min

    def fn(v, lo, hi):
        # NaN in x propagates: compare so that a NaN operand is kept
        if lo is not None:
            v = ops.where(ops.lt(v, lo), lo, v)
        if hi is not None:
            v = ops.where(ops.gt(v, hi), hi, v)
        return v

    return make_pointwise(fn, x, min, max)


@register_lowering(aten.gelu)
def _gelu(x, approximate="none"):
    dtype = out_dtype()
    if approximate == "tanh":
        def fn(v):
            c = ops.constant(math.sqrt(2.0 / math.pi), v.dtype)
            inner = ops.mul(c, ops.add(v, ops.mul(ops.constant(0.044715, v.dtype), ops.mul(v, ops.mul(v, v)))))
            return ops.mul(ops.mul(ops.constant(0.5, v.dtype), v), ops.add(ops.constant(1.0, v.dtype), ops.tanh(inner)))
    else:
        def fn(v):
            scaled = ops.mul(v, ops.constant(1.0 / math.sqrt(2.0), v.dtype))
            return ops.mul(ops.mul(ops.constant(0.5, v.dtype), v), ops.add(ops.constant(1.0, v.dtype), ops.erf(scaled)))
    return make_pointwise(fn, x)


@register_lowering(aten.silu)
def _silu(x):
    return make_pointwise(lambda v: ops.mul(v, ops.sigmoid(v)), x)


@register_lowering(aten.hardtanh)
def _hardtanh(x, min_val=-1.0, max_val=1.0):
    return _clamp(x, min_val, max_val)


@register_lowering(aten.leaky_relu)
def _leaky_relu(x, negative_slope=0.01):
    return make_pointwise(lambda v: ops.where(ops.gt(v, ops.constant(0, v.dtype)), v,
                                              ops.mul(v, ops.constant(negative_slope, v.dtype))), x)


@register_lowering(aten._to_copy, aten.clone, aten.lift_fresh_copy)
def _copy(x, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if device is not None and torch.device(device).type != torch.device(x.node.device).type:
        raise Unsupported(f"copy to another device ({device}) runs eagerly")
    return make_pointwise(lambda v: v, x)


@register_lowering(torch.ops.prims.convert_element_type)
def _convert_element_type(x, dtype):
    """A cast: what _to_copy(x, dtype=...) becomes in the graphs AOTAutograd traces under dynamic shapes."""
    return make_pointwise(lambda v: v, x)


@register_lowering(aten.nan_to_num)
def _nan_to_num(x, nan=None, posinf=None, neginf=None):
    info = torch.finfo(out_dtype())
    nan = 0.0 if nan is None else nan
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf

    def fn(v):
        dt = v.dtype
        v = ops.where(ops.isnan(v), ops.constant(nan, dt), v)
        v = ops.where(ops.logical_and(ops.isinf(v), ops.gt(v, ops.constant(0, dt))), ops.constant(posinf, dt), v)
        return ops.where(ops.logical_and(ops.isinf(v), ops.lt(v, ops.constant(0, dt))), ops.constant(neginf, dt), v)

    return make_pointwise(fn, x)
