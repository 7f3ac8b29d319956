"""Pooling: average pooling as a Reduction over the kernel window, then a division by the window's size, and
its gradient as a gather over the windows covering each input position; max pooling (2d and 3d, with its
indices) as an elementwise max over the unrolled window, and its gradient as the same gather on a GPU and
as eager's scatter on the CPU.

Note [Average pooling window]
For output position o along a spatial dim of input size H (kernel k, stride s, padding p), torch's CPU kernel
takes the window [o*s - p, min(o*s - p + k, H + p)); positions outside [0, H) read as zero. The divisor is
the window's size with the padding counted (count_include_pad) or without it, unless divisor_override is set.
Both are index expressions (Min/Max of loop variables), so one kernel serves every window, edges included.
A clamp that no window reaches (the last window ends at or before H + p, or H) is left out where the sizes
decide it, so the common pools divide by a constant (a 2x2 stride-2 pool by 4).
"""
from __future__ import annotations

import functools
import itertools

import sympy
import torch

from engine.ir.indexing import Bounded, FloorDiv, product
from engine.ir.nodes import TensorValue
from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import (check_dtype, load_as, out_dtype, out_size, pointwise_node, reduction_node,
                                    sympify_size)
from engine.lowering.layout import channels_last_strides
from engine.lowering.registry import Unsupported, current, register_lowering
from engine.lowering.scatters import scatter_node

aten = torch.ops.aten


def _per_dim(value, n, default=None):
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        value = default
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return value * n if len(value) == 1 else value


def _window(kernel_size, stride, padding, spatial: int) -> tuple[list[int], list[int], list[int]]:
    """A pool's kernel, stride (default: the kernel) and padding (default 0), one int per spatial dim."""
    kernel = [int(k) for k in _per_dim(kernel_size, spatial)]
    return kernel, [int(s) for s in _per_dim(stride, spatial, kernel)], [int(p) for p in _per_dim(padding, spatial, [0])]


def _avg_divisor(outputs, kernel, stride, padding, in_sizes, out_sizes, count_include_pad, divisor_override):
    """The divisor of the window of output position `outputs` (one per spatial dim), Note [Average pooling
    window]."""
    if divisor_override:
        return sympy.Integer(int(divisor_override))
    sizes = []
    for d, o in enumerate(outputs):
        k, s, p, size = kernel[d], stride[d], padding[d], in_sizes[d]
        start = o * s - p
        last_end = (out_sizes[d] - 1) * s - p + k  # the last window's end before any clamp
        end = start + k if sympy.Le(last_end, size + p) is sympy.true else sympy.Min(start + k, size + p)
        if not count_include_pad:
            start = sympy.Max(start, 0) if p else start
            end = end if sympy.Le(last_end, size) is sympy.true else sympy.Min(end, size)
        sizes.append(end - start)
    return product(sizes)


# Note [Window bounds the sizes decide]
# A window position o*s - p + k*dilation (output o, offset k) needs a test against the input's start only
# where padding can put it before 0 (k*dilation < p), and against its end only where the last output's
# window can reach past it ((out - 1)*s - p + k*dilation >= in: padding on the right, ceil mode). Where the
# sizes decide a test, it is left out, and a position no test guards is read as is (not Bounded, no mask):
# Inception's 3x3 stride-2 max pools and ResNet's 2x2 average pools test nothing, and a 3x3 stride-1 pool
# with padding 1 tests only its first and last offsets. Symbolic sizes keep the tests sympy cannot decide.


def _inside_test(position, offset, out_extent, stride: int, pad: int, size):
    """The bool test that `position` (offset `offset` of its window) lies inside [0, size), or None where the
    sizes decide it always does (Note [Window bounds the sizes decide])."""
    tests = []
    if sympy.Ge(offset - pad, 0) is not sympy.true:
        tests.append(ops.ge(ops.index_expr(position, torch.int64), ops.constant(0, torch.int64)))
    if sympy.Lt((out_extent - 1) * stride - pad + offset, size) is not sympy.true:
        tests.append(ops.lt(ops.index_expr(position, torch.int64), ops.index_expr(size, torch.int64)))
    if not tests:
        return None
    return tests[0] if len(tests) == 1 else ops.logical_and(tests[0], tests[1])


def _window_read(x, lead: int, index, positions, tests, dtype):
    """x at the window position `positions` (one per spatial dim), each with its inside test or None: a plain
    load where no test is left, else a masked load at Bounded positions that reads `other` outside."""
    live = [t for t in tests if t is not None]
    if not live:
        return None, load_as(x, list(index[:lead]) + list(positions), dtype)
    inside = live[0]
    for t in live[1:]:
        inside = ops.logical_and(inside, t)
    source = list(index[:lead]) + [q if t is None else Bounded(q, n)
                                   for q, t, n in zip(positions, tests, x.size[lead:])]
    return inside, ops.masked(inside, lambda: load_as(x, source, dtype), ops.constant(0, dtype))


def _avg_pool(x: TensorValue, spatial: int, kernel_size, stride, padding, count_include_pad, divisor_override):
    kernel, stride, padding = _window(kernel_size, stride, padding, spatial)
    size = out_size()
    result_dtype = out_dtype()
    check_dtype(x.dtype)
    check_dtype(result_dtype)
    # integers: an int64 sum divided by the window size, truncating like eager's C++ kernel
    acc = compute_dtype(result_dtype) if result_dtype.is_floating_point else torch.int64
    lead = x.ndim - spatial
    in_sizes, out_sizes = x.size[lead:], size[lead:]

    def read(index, offsets):
        positions = [index[lead + d] * stride[d] - padding[d] + offsets[d] for d in range(spatial)]
        tests = [_inside_test(positions[d], offsets[d], out_sizes[d], stride[d], padding[d], in_sizes[d])
                 for d in range(spatial)]
        return _window_read(x, lead, index, positions, tests, acc)[1]  # padding: not read, adds 0

    def divide(index, summed):
        divisor = _avg_divisor(index[lead:], kernel, stride, padding, in_sizes, out_sizes, count_include_pad,
                               divisor_override)
        return (ops.truediv if acc.is_floating_point else ops.truncdiv)(summed, ops.index_expr(divisor, acc))

    if product(kernel) <= MAX_UNROLLED_WINDOW:  # Note [Average pooling unrolled]
        def unrolled(index):
            total = None
            for offsets in itertools.product(*[range(k) for k in kernel]):
                term = read(index, offsets)
                total = term if total is None else ops.add(total, term)
            return divide(index, total)
        return pointwise_node(unrolled, computed_in=acc)

    summed = reduction_node(lambda index, rindex: read(index, rindex), size=size,
                            reduction_size=[sympy.Integer(k) for k in kernel], reduction_type="sum", dtype=acc)
    return pointwise_node(lambda index: divide(index, summed.load(index)), computed_in=acc)


# Note [Average pooling unrolled]
# A window of at most MAX_UNROLLED_WINDOW positions is summed as a chain of loads in one elementwise node, as
# max pooling's is, not as a Reduction over the window: a Reduction's row is the window, so its kernel walks
# the outputs in the order of its rows (NCHW) and, on a channels-last input, each row's 9 loads sit C
# elements apart from the next row's: no load coalesced, where an elementwise node is stored in the graph's
# layout and its neighbours along the channels read neighbouring addresses. On the H200, Inception-v3's 3x3
# stride-1 pools (fp16, batch 16 at 299, channels-last) were such reductions, kernels of 0.3-1.9 ms in a model
# whose convolutions take 0.9 ms in all. An elementwise node also fuses: the ReLU or cat after it, the batch
# norm before it (Note [Window reads] decides whether that producer is recomputed at 9 positions). Longer
# windows (a global average pool written as avg_pool2d) stay a Reduction over the window. A 3x3x3 window (27
# positions) is unrolled too: on 2 CPU cores, avg_pool3d over fp32 2x16x32x64x64 took 130 ms as a Reduction
# and 17 ms unrolled at stride 2 (eager: 24 ms), 1224 ms and 102 ms at stride 1 (eager: 173 ms), and its
# stride-1 gradient (27 windows per element) 1002 ms and 123 ms (eager: 220 ms).


@register_lowering(aten.avg_pool2d.default)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, 2, kernel_size, stride, padding, count_include_pad, divisor_override)


@register_lowering(aten.avg_pool3d.default)
def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(x, 3, kernel_size, stride, padding, count_include_pad, divisor_override)


# Note [Average pooling backward as a gather]
# An average pool's gradient sends each output gradient back over its window, divided by the window's divisor.
# Eager's kernels scatter it (a loop over windows adding into the input gradient); as a scatter, overlapping
# windows would add into the same element. Turned around, each input-gradient element is the sum, over the
# windows that cover it, of their output gradient / divisor: a function of its own position, an ordinary node.
# Along one spatial dim the windows covering input position h are a run of consecutive outputs o:
# - avg_pool (kernel k, stride s, padding p): window o starts at o*s - p and covers h iff
#   o*s - p <= h < o*s - p + k, that is ceil((h + p - k + 1) / s) <= o <= floor((h + p) / s), clipped to
#   [0, OH). The run starts at floor(max(h + p + s - k, 0) / s) (ceil(a / s) is floor((a + s - 1) / s), and
#   the max keeps FloorDiv's operand non-negative where the run would start before 0) and holds at most
#   ceil(k / s) outputs. Clamping a window's end at H + p (ceil mode's last window) only cuts positions past
#   the input, which no gradient element sits at; it matters for the divisor alone.
# - adaptive pooling (input H, output OH): window o is [floor(o*H/OH), ceil((o+1)*H/OH)); it covers h iff
#   floor(h*OH/H) <= o < ceil((h+1)*OH/H). The longest run is counted over h at lowering time (sizes are
#   static there; a symbolic size runs eagerly), 2 for a downsampling pool, more when OH > H.
# The node visits the run's first `count` outputs per dim, the ones past the run's end masked off (they
# read nothing: the gradient of a position no window covers, stride > kernel or the input's ragged end,
# is 0), each its output gradient divided by its own window's divisor (Note [Average pooling window];
# the adaptive divisor is the window's size). Per dim the outputs are visited in increasing order, and
# combinations with the first spatial dim outermost. Up to MAX_UNROLLED_WINDOW visits the sum is unrolled
# into an elementwise node, as max pooling's window is (DenseNet's 2x2 stride-2 transition: one load and a
# multiply by 1/4 per element); a longer run (a stride-1 pool with a wide kernel, an adaptive pool that
# upsamples) is a Reduction over the visits, so no window size falls back to eager.


def gather_windows(grad: TensorValue, lead: int, runs, share):
    """The input gradient as a gather over the covering windows (Note [Average pooling backward as a
    gather]): along spatial dim d, `runs[d]` is (count, cover) where cover(h) is the first output covering
    input position h and the end of their run; `share(index, source, outputs, acc)` is what the window at
    output `outputs` (its full load index `source`) gives input position `index`."""
    check_dtype(grad.dtype)
    result_dtype = out_dtype()
    check_dtype(result_dtype)
    acc = compute_dtype(result_dtype)
    spatial = len(runs)
    out_sizes = grad.size[lead:]

    def visit(index, offsets):
        outputs, inside = [], None
        for d in range(spatial):
            first, end = runs[d][1](index[lead + d])
            o = first + offsets[d]
            outputs.append(o)
            if _always_less(o, end):  # the run's first output, where the sizes show it always exists
                continue
            ok = ops.lt(ops.index_expr(o, torch.int64), ops.index_expr(end, torch.int64))
            inside = ok if inside is None else ops.logical_and(inside, ok)
        source = list(index[:lead]) + [Bounded(o, out_sizes[d]) for d, o in enumerate(outputs)]

        def term():
            return share(index, source, outputs, acc)
        return term() if inside is None else ops.masked(inside, term, ops.constant(0, acc))

    counts = [count for count, _ in runs]
    if product(counts) <= MAX_UNROLLED_WINDOW:
        def unrolled(index):
            total = None
            for offsets in itertools.product(*[range(c) for c in counts]):
                term = visit(index, offsets)
                total = term if total is None else ops.add(total, term)
            return total
        return pointwise_node(unrolled, computed_in=acc)
    size = out_size()
    summed = reduction_node(visit, size=size, reduction_size=[sympy.Integer(c) for c in counts],
                            reduction_type="sum", dtype=acc)
    return pointwise_node(summed.load, size=size, computed_in=acc)


@functools.lru_cache(maxsize=65536, typed=True)  # by expression, like _cover
def _always_less(a, b) -> bool:
    return sympy.Lt(a, b) is sympy.true


def _covering_run(k: int, s: int, p: int, dilation: int, size, windows):
    """(count, cover) of the outputs whose windows (kernel k, stride s, padding p) cover an input position
    along one dim of input `size` and `windows` outputs (Note [Average pooling backward as a gather]); a
    dilated window spans (k - 1)*dilation + 1 positions, of which it covers every dilation-th."""
    k = (k - 1) * dilation + 1
    # the run of the last input position ends within the outputs unless ceil mode or a ragged end cut it
    clipped = sympy.Le(FloorDiv(size - 1 + p, s) + 1, windows) is not sympy.true
    return -(-k // s), lambda h: _cover(h, k, s, p, windows, clipped)


@functools.lru_cache(maxsize=65536, typed=True)
def _cover(h, k: int, s: int, p: int, windows, clipped: bool):
    """(first output, end of the run) of the windows covering input position `h` (_covering_run). Cached by
    expression, as the window helpers below are: a body reruns at the same index for every handler and fusion
    candidate, and sympy's Min/Max constructors compare their arguments each time."""
    return (FloorDiv(sympy.Max(h + p + s - k, 0), s),
            sympy.Min(FloorDiv(h + p, s) + 1, windows) if clipped else FloorDiv(h + p, s) + 1)


def _avg_pool_backward(grad, x, spatial: int, kernel_size, stride, padding, count_include_pad, divisor_override):
    kernel, stride, padding = _window(kernel_size, stride, padding, spatial)
    lead = x.ndim - spatial
    in_sizes = x.size[lead:]

    def share(index, source, outputs, acc):
        divisor = _avg_divisor(outputs, kernel, stride, padding, in_sizes, grad.size[lead:], count_include_pad,
                               divisor_override)
        return ops.truediv(load_as(grad, source, acc), ops.index_expr(divisor, acc))

    return gather_windows(grad, lead, [_covering_run(kernel[d], stride[d], padding[d], 1, in_sizes[d],
                                                      grad.size[lead + d]) for d in range(spatial)], share)


@register_lowering(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override=None):
    # ceil_mode only decides how many windows there are: grad_output's size says it
    return _avg_pool_backward(grad_output, x, 2, kernel_size, stride, padding, count_include_pad, divisor_override)


@register_lowering(aten.avg_pool3d_backward.default)
def avg_pool3d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override=None):
    return _avg_pool_backward(grad_output, x, 3, kernel_size, stride, padding, count_include_pad, divisor_override)


def _adaptive_start(o, size: int, out: int):
    return FloorDiv(o * size, out)


def _adaptive_end(o, size: int, out: int):
    return FloorDiv((o + 1) * size + out - 1, out)


def _adaptive_avg_pool_backward(grad_output, x, spatial: int):
    lead = x.ndim - spatial
    in_sizes, out_sizes = x.size[lead:], grad_output.size[lead:]
    if not all(isinstance(s, sympy.Integer) for s in [*in_sizes, *out_sizes]):
        raise Unsupported("an adaptive pool's gradient over symbolic sizes runs eagerly (its windows are counted "
                          "at lowering time: Note [Average pooling backward as a gather])")
    sizes = [(int(h), int(o)) for h, o in zip(in_sizes, out_sizes)]

    def run(size: int, out: int):
        # the outputs covering h are [floor(h*out/size), ceil((h+1)*out/size)): a window's bounds, roles swapped
        count = max(-(-(h + 1) * out // size) - h * out // size for h in range(size))
        return count, lambda h: (_adaptive_start(h, out, size), _adaptive_end(h, out, size))

    def share(index, source, outputs, acc):
        divisor = product([_adaptive_end(o, size, out) - _adaptive_start(o, size, out)
                           for o, (size, out) in zip(outputs, sizes)])
        return ops.truediv(load_as(grad_output, source, acc), ops.index_expr(divisor, acc))

    return gather_windows(grad_output, lead, [run(size, out) for size, out in sizes], share)


@register_lowering(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad_output, x):
    return _adaptive_avg_pool_backward(grad_output, x, 2)


@register_lowering(aten._adaptive_avg_pool3d_backward.default)
def adaptive_avg_pool3d_backward(grad_output, x):
    # the forward (_adaptive_avg_pool3d) has no lowering and runs eagerly; its gradient is the same gather
    return _adaptive_avg_pool_backward(grad_output, x, 3)


# Note [Max pooling as our kernel]
# max_pool2d_with_indices and max_pool3d_with_indices are lowered whole, not through torch's decomposition (a
# gather of every window, then a max over a flattened axis, and only in recent torch: older ones run the op
# eagerly): each output is the max over its window unrolled into a chain of loads and compares, an
# elementwise node like any other, so the batch norm and ReLU that feed it are recomputed inside it instead
# of stored, and it is stored in the graph's layout (channels-last between convolutions: Note [Channels-last
# convolutions]), where an eager call returned whatever layout the library chose and the convolutions after
# it converted it back. The indices are a second node over the same window; nobody reads them in inference,
# so no kernel computes them there (Note [Unused nodes]). Both follow eager's CUDA and CPU kernels exactly:
# the window visits positions in order (the first spatial dim outermost), a position replaces the best when
# its value is greater or NaN (so of several NaNs the last wins), the best starts at -inf on the first
# in-bounds position (so an all -inf window names that position), and an index is the flat position in the
# input's plane (d*H*W + h*W + w in 3d). Padding is no -inf: a position outside the input is skipped (or read
# clamped onto one the window holds: Note [Max pooling reads clamped positions]). Windows of more than
# MAX_UNROLLED_WINDOW positions (a global max pool) run eagerly: an unrolled chain that long is no kernel to
# read. 27 is a 3x3x3 window, the common 3d pool (a 5x5 one is 25).
MAX_UNROLLED_WINDOW = 27


def _flat(positions, sizes):
    """The flat position of `positions` (one per spatial dim) in a plane of `sizes`, row-major."""
    flat = positions[0]
    for position, size in zip(positions[1:], sizes[1:]):
        flat = flat * size + position
    return flat


@functools.lru_cache(maxsize=65536, typed=True)  # by expression, like _cover
def _first_inside(start, step: int):
    """The first window position at or after `start`, by `step`s, that is not in the left padding."""
    if step == 1:
        return sympy.Max(start, 0)
    return start + step * FloorDiv(sympy.Max(0, -start) + step - 1, step)


# Note [Max pooling reads clamped positions]
# A window position outside the input (in the padding, or past the end in ceil mode) is skipped by eager. Along
# a dim without dilation the window's positions inside the input are a run that the position outside borders,
# so clamped into [0, size) it lands on one of them: read there, it adds a value the window already holds, at
# the index it holds it (an earlier or later visit of that same position), which changes neither the max nor
# its index: a value replaces the best only when greater or NaN, and a NaN read again names the same position.
# Every window holds a position inside (eager's shape check limits padding to half the kernel, and ceil mode
# drops a window that would start in the padding), so no window reads only clamped positions. A clamped read
# is a plain load, where a masked one is a load and a select on a bool of the outer loop: in a C++ kernel gcc
# 12 vectorizes no inner loop with more than four such selects inside an OpenMP loop ("relevant stmt not
# supported" for the select), so a padded pool's kernel ran scalar even where its loads are contiguous along
# the channels. Measured on 2 shared cores, k=3 s=2 p=1, fp32, masked and then clamped: max_pool2d over
# 2x16x256x256 took 13.6 ms and 1.9 ms (eager 17 ms, Inductor 4.1 ms); max_pool3d over a channels-last-3d
# 2x64x16x32x64, 27 ms and 2.4 ms (eager 3.1 ms, Inductor 2.3 ms). Dilated dims keep the masks: there the
# clamped position may fall between the window's positions.


@functools.lru_cache(maxsize=65536, typed=True)  # by expression, like _cover
def _clamped(position, offset, out_extent, stride: int, pad: int, size):
    """`position` clamped into [0, size), each side only where the sizes do not decide it lies inside (Note
    [Window bounds the sizes decide])."""
    if sympy.Ge(offset - pad, 0) is not sympy.true:
        position = sympy.Max(position, 0)
    if sympy.Lt((out_extent - 1) * stride - pad + offset, size) is not sympy.true:
        position = sympy.Min(position, size - 1)
    return position


def _max_over_window(x, index, lead: int, kernel, stride, padding, dilation, out_sizes, acc):
    """(max value, flat input position of its first occurrence) of the window of output `index` (Note [Max
    pooling as our kernel]); positions clamped (Note [Max pooling reads clamped positions]), or tested along a
    dilated dim, only where the sizes do not decide they lie inside (Note [Window bounds the sizes decide])."""
    in_sizes = x.size[lead:]
    spatial = len(kernel)
    starts = [index[lead + d] * stride[d] - padding[d] for d in range(spatial)]
    best = ops.constant(float("-inf"), acc)
    where = ops.index_expr(_flat([_first_inside(s, dilation[d]) for d, s in enumerate(starts)], in_sizes),
                           torch.int64)
    for taps in itertools.product(*[range(k) for k in kernel]):
        offsets = [t * dilation[d] for d, t in enumerate(taps)]
        position, tests = [], []
        for d in range(spatial):
            bounds = (starts[d] + offsets[d], offsets[d], out_sizes[d], stride[d], padding[d], in_sizes[d])
            clamps = dilation[d] == 1  # Note [Max pooling reads clamped positions]
            position.append(_clamped(*bounds) if clamps else bounds[0])
            tests.append(None if clamps else _inside_test(*bounds))
        inside, value = _window_read(x, lead, index, position, tests, acc)
        better = ops.logical_or(ops.gt(value, best), ops.isnan(value))
        better = better if inside is None else ops.logical_and(inside, better)
        best = ops.where(better, value, best)
        where = ops.where(better, ops.index_expr(_flat(position, in_sizes), torch.int64), where)
    return best, where


def _max_window(kernel_size, stride, padding, dilation, spatial: int):
    """A max pool's kernel, stride, padding and dilation (default 1), one int per spatial dim."""
    return (*_window(kernel_size, stride, padding, spatial), [int(d) for d in _per_dim(dilation, spatial, [1])])


def _max_pool(x, spatial: int, kernel_size, stride, padding, dilation):
    kernel, stride, padding, dilation = _max_window(kernel_size, stride, padding, dilation, spatial)
    if not x.dtype.is_floating_point:
        raise Unsupported(f"max pooling of {x.dtype} runs eagerly (generated only for floating types)")
    if product(kernel) > MAX_UNROLLED_WINDOW:
        raise Unsupported(f"a max pool window of {'x'.join(map(str, kernel))} positions runs eagerly (more than "
                          f"{MAX_UNROLLED_WINDOW} to unroll: Note [Max pooling as our kernel])")
    check_dtype(x.dtype)
    values_meta, _ = current().out_meta
    size = tuple(sympify_size(s) for s in values_meta.shape)  # ceil mode's dropped windows: eager's shape
    acc = compute_dtype(x.dtype)
    lead = x.ndim - spatial

    def window(index):
        return _max_over_window(x, index, lead, kernel, stride, padding, dilation, size[lead:], acc)

    values = pointwise_node(lambda index: window(index)[0], size=size, dtype=values_meta.dtype, computed_in=acc)
    indices = pointwise_node(lambda index: window(index)[1], size=size, dtype=torch.int64)
    return values, indices


@register_lowering(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, 2, kernel_size, stride, padding, dilation)


@register_lowering(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(x, 3, kernel_size, stride, padding, dilation)


# Note [Max pooling backward as a gather]
# torch decomposes max_pool2d_with_indices_backward into a scatter_add of each output gradient at its
# window's argmax (and has no decomposition of max_pool3d_with_indices_backward): overlapping windows (3x3
# stride 1 or 2) add into one element, atomics on a GPU. Lowered whole, on a GPU each input-gradient element
# visits the windows that cover it, the same run of outputs as an average pool's gradient (Note [Average
# pooling backward as a gather]; a dilated window spans (k - 1)*dilation + 1 positions), and adds the output
# gradient of each whose saved index names it: its flat position in its plane, as the forward wrote it (Note
# [Max pooling as our kernel]). The visits go in increasing output order, the order in which eager's kernels
# add into an element, so a float32 gradient is eager's to the bit. A dilated window covers only every
# dilation-th position of its span: the index test drops the others. No atomics, and the gradient is an
# elementwise node that fuses with the ReLU's mask before it.
#
# Note [Max pooling backward on the CPU]
# On the CPU the gather costs more than the adds it replaces: every input element loads an index and a
# gradient for each window that may cover it (2^3 = 8 for a 3x3x3 stride-2 pool, 27 for stride 1) and
# compares, where eager adds each output's gradient once, at its argmax (there are 8 times fewer outputs than
# inputs at stride 2). The loads along the innermost dim are at w/2, gathers that gcc vectorizes slowly or not
# at all. So on the CPU the gradient is eager's own algorithm: a Scatter node (Note [Accumulating stores])
# that adds each output gradient at the position its index names, in the source's order, which within a plane
# is increasing output order, as eager's loop adds: the same float32 sums to the bit. Measured on 2 shared
# cores (k=3 s=2 p=1, fp32, medians of 15 interleaved calls): over 2x16x32x64x64 the gather took 58 ms, the
# Scatter 7.0 ms, eager's kernel 13 ms; over 2x16x512x512 (2d) 221 ms, 52 ms and 48 ms. It runs on one
# thread, as every Scatter kernel in C++ does (Note [Scatter kernels in C++]; the adds of one plane stay in
# it, so the planes could go to threads, which the kernel does not do yet: on many cores eager's kernel, which
# spreads them, will pull ahead), and the ReLU's mask after it is a kernel of its own. `gathers_on` decides;
# the tests switch it to try the GPU's gather under both backends on the CPU.


def gathers_on(device: str) -> bool:
    """Whether a max pool's gradient is a gather on `device` (a GPU) rather than a Scatter (the CPU: Note [Max
    pooling backward on the CPU])."""
    return torch.device(device).type != "cpu"


def _eager_returns_channels_last() -> bool:
    """Whether eager's gradient is channels-last (that of a channels-last input), at static sizes."""
    meta = current().out_meta
    return meta.dim() in (4, 5) and all(isinstance(s, int) for s in (*meta.shape, *meta.stride())) and \
        tuple(meta.stride()) == channels_last_strides(meta.shape)


def _added_at_argmax(grad_output, indices, size, lead: int) -> TensorValue:
    """Each output gradient added at the flat position its index names in its plane (Note [Max pooling
    backward on the CPU]), as a Scatter into the planes flattened, seen in the input's shape: (N, C, D*H*W),
    or (N, D*H*W, C) where eager returns the gradient channels-last, so that it comes back in eager's layout."""
    result_dtype = out_dtype()
    check_dtype(grad_output.dtype)
    check_dtype(result_dtype)
    acc = compute_dtype(result_dtype)
    plane = product(size[lead:])
    last = lead == 2 and _eager_returns_channels_last()

    def body(index):
        at = ops.indirect(indices.load(index), plane)
        return [index[0], at, index[1]] if last else [*index[:lead], at], load_as(grad_output, index, acc), None

    added = scatter_node((size[0], plane, size[1]) if last else (*size[:lead], plane), acc, grad_output.size, body)
    whole = TensorValue(added.node, tuple(size), (lambda index: [index[0], _flat(index[2:], size[2:]), index[1]])
                        if last else (lambda index: [*index[:lead], _flat(index[lead:], size[lead:])]))
    return whole if acc == result_dtype else pointwise_node(whole.load)  # rounded to a half gradient's dtype


def _max_pool_backward(grad_output, x, spatial: int, kernel_size, stride, padding, dilation, indices):
    lead = x.ndim - spatial
    if not gathers_on(current().device):
        return _added_at_argmax(grad_output, indices, x.size, lead)
    kernel, stride, padding, dilation = _max_window(kernel_size, stride, padding, dilation, spatial)
    in_sizes = x.size[lead:]
    runs = [_covering_run(kernel[d], stride[d], padding[d], dilation[d], in_sizes[d], grad_output.size[lead + d])
            for d in range(spatial)]

    def share(index, source, outputs, acc):
        chosen = ops.eq(indices.load(source), ops.index_expr(_flat(index[lead:], in_sizes), torch.int64))
        return ops.where(chosen, load_as(grad_output, source, acc), ops.constant(0, acc))

    return gather_windows(grad_output, lead, runs, share)


@register_lowering(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad_output, x, 2, kernel_size, stride, padding, dilation, indices)


@register_lowering(aten.max_pool3d_with_indices_backward.default)
def max_pool3d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_pool_backward(grad_output, x, 3, kernel_size, stride, padding, dilation, indices)
