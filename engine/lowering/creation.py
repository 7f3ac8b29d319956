"""Tensors made from nothing or from several inputs: full, arange, cat, padding."""
from __future__ import annotations

import functools

import sympy
import torch

from engine.ir.indexing import Bounded
from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import load_as, make_pointwise, normalize_dim, out_dtype, pointwise_node
from engine.lowering.registry import Unsupported, register_lowering

aten = torch.ops.aten


@register_lowering(aten.full.default, aten.scalar_tensor.default)
def full(size_or_value, fill_value=None, **kwargs):
    value = size_or_value if fill_value is None else fill_value
    dtype = compute_dtype(out_dtype())
    return make_pointwise(lambda: load_as(value, (), dtype))  # a number, or a size under dynamic shapes


@register_lowering(aten.full_like.default)
def full_like(x, fill_value, **kwargs):
    dtype = compute_dtype(out_dtype())
    return make_pointwise(lambda: load_as(fill_value, (), dtype))


@register_lowering(aten.empty.memory_format, aten.empty_strided.default, aten.empty_permuted.default,
                   aten.new_empty.default, aten.new_empty_strided.default, aten.zeros.default,
                   aten.new_zeros.default, aten.zeros_like.default, aten.empty_like.default)
def zeros(*args, **kwargs):
    # empty's contents are unspecified; zeros are a valid choice and keep results deterministic. empty_permuted
    # is what empty_like of a channels-last tensor decomposes to (the mask under a training dropout's
    # bernoulli_ in torchvision's MobileNetV3), new_empty_strided what autograd allocates in Falcon's backward:
    # their layout, like empty_strided's, is the buffer's, not the values'.
    dtype = compute_dtype(out_dtype())
    return make_pointwise(lambda: ops.constant(0, dtype))


@register_lowering(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def ones(*args, **kwargs):
    dtype = compute_dtype(out_dtype())
    return make_pointwise(lambda: ops.constant(1, dtype))


@register_lowering(aten.arange.start_step, aten.arange.start, aten.arange.default)
def arange(start, end=None, step=1, **kwargs):
    if end is None:
        start, end = 0, start
    result_dtype = out_dtype()
    compute = compute_dtype(result_dtype)

    def scalar(value):  # a size symbol (arange(past, past + T) of a dynamic cache length) is an index expression
        symbolic = isinstance(value, sympy.Expr) and not value.is_number
        return ops.index_expr(value, compute) if symbolic else ops.constant(value, compute)

    def inner_fn(index):
        value = ops.add(scalar(start), ops.mul(ops.index_expr(index[0], compute), scalar(step)))
        return value

    return pointwise_node(inner_fn)


@functools.lru_cache(maxsize=65536)
def clamp_index(expr, size):
    """Keep a masked-off read in bounds: the value is discarded, the address must still be valid. Cached by
    expression: sympy's Min/Max constructors compare their arguments (a window's or a scatter's body reruns at
    the same index for every fusion candidate and every kernel that inlines it; Swin: 168 calls, 1.2 s). cat and
    constant_pad_nd need no clamp: their reads are masked (Note [Cat and pad read one input])."""
    return sympy.Max(0, sympy.Min(expr, size - 1))


# Note [Cat and pad read one input]
# Each output element of a cat reads the one input it comes from and each element of a pad reads its input
# only inside: the source is picked by masked() bodies (Note [Masked loads]), one per input, so a masked-off
# input is not read at all (a where() over unmasked loads read every input at every element: a 3-way cat of
# bf16 gradients read 3x its bytes, 62 us against Inductor's 23 us on an H200). The position in the input
# is Bounded (Note [Bounded positions]): no clamp in the address, whose divisions simplify as over a loop
# variable of the input's extent.
@register_lowering(aten.cat.default)
def cat(tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and t.size[0] == 0)]
    dim = normalize_dim(dim, tensors[0].ndim)
    compute = compute_dtype(out_dtype())
    parts, running = [], sympy.Integer(0)  # (input, its first position along dim); inputs of extent 0 add none
    for t in tensors:
        if t.size[dim] != 0:
            parts.append((t, running))
        running = running + t.size[dim]
    if len(parts) <= 1:  # one input (or none: every input is empty along dim, so is the output)
        source = parts[0][0] if parts else tensors[0]
        return pointwise_node(lambda index: load_as(source, index, compute))

    def inner_fn(index):
        position = ops.index_expr(index[dim], torch.int64)
        result = None
        for k, (t, start) in reversed(list(enumerate(parts))):
            tests = ([ops.ge(position, ops.index_expr(start, torch.int64))] if k > 0 else []) + \
                ([ops.lt(position, ops.index_expr(start + t.size[dim], torch.int64))] if k < len(parts) - 1 else [])
            inside = tests[0] if len(tests) == 1 else ops.logical_and(*tests)
            shifted = list(index)
            shifted[dim] = Bounded(index[dim] - start, t.size[dim])
            read = lambda t=t, shifted=shifted: load_as(t, shifted, compute)
            result = ops.masked(inside, read, ops.constant(0, compute) if result is None else result)
        return result

    return pointwise_node(inner_fn)


# Note [Symbolic pads]
# Under dynamic shapes a pad is an expression of the size symbols: Swin pads its feature map up to a multiple
# of the window, (w - W % w) % w, which is 0 at some sizes and positive at others. Whether such a pad is
# positive is then unknown, and Python's `pad > 0` on it raises. A bound is dropped only when the pad is
# provably <= 0 (sympy decides it from the symbols' positivity); otherwise the test stays: it is exact at
# every size, merely redundant where the pad happens to be 0.
def _never_positive(pad) -> bool:
    return sympy.Le(pad, 0) is sympy.true


@register_lowering(aten.constant_pad_nd.default)
def constant_pad_nd(x, pad, value=0):
    """Padding, or cropping where a pad is negative (RWKV's time shift, ConvBERT's backward): output position i
    along a dim reads input position i - before. A negative `before` can never put it below 0 and a negative
    `after` never past the end, so only pads that may be positive test a bound (and mask the read): Note
    [Symbolic pads]."""
    compute = compute_dtype(out_dtype())
    pairs = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]  # last dim first

    def inner_fn(index):
        shifted, inside = list(index), None
        for i, (before, after) in enumerate(pairs):
            d = x.ndim - 1 - i
            if before == 0 and after == 0:
                continue  # an unpadded dim needs no test
            position = ops.index_expr(index[d] - before, torch.int64)
            tests = ([] if _never_positive(before) else [ops.ge(position, ops.constant(0, torch.int64))]) + \
                ([] if _never_positive(after) else [ops.lt(position, ops.index_expr(x.size[d], torch.int64))])
            for test in tests:
                inside = test if inside is None else ops.logical_and(inside, test)
            shifted[d] = Bounded(index[d] - before, x.size[d]) if tests else index[d] - before
        if inside is None:
            return load_as(x, shifted, compute)
        return ops.masked(inside, lambda: load_as(x, shifted, compute), ops.constant(value, compute))

    return pointwise_node(inner_fn)


@register_lowering(aten.copy.default)
def copy(dst, src, non_blocking=False):
    return make_pointwise(lambda v: v, src)
