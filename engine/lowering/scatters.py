"""Functional scatters into a region: slice_scatter, select_scatter, diagonal_scatter, as_strided_scatter.

out = self everywhere except a region that a view of `self` would see, which reads `src` instead. That is a
pointwise `masked(inside region, src[position in src], self)`: the inverse of the view's index map, with the
region test written in int64 index arithmetic (so it also holds for size symbols).
"""
from __future__ import annotations

import sympy
import torch

from engine.ir.indexing import Bounded, FloorDiv, linearize, product, unflatten
from engine.ir.nodes import Scatter, TensorValue
from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import load_as, normalize_dim, out_dtype, pointwise_node, reduction_node
from engine.lowering.creation import clamp_index
from engine.lowering.registry import Unsupported, current, register_lowering
from engine.lowering.views import _diagonal_geometry, normalized_start, symbolic_position

aten = torch.ops.aten


def _scatter_node(x, src, region_and_position):
    """region_and_position(index) -> (inside: bool value, index into src, Bounded where it leaves src).

    Each element reads one of the two (Note [Masked loads]): src inside the region, self outside it, so the
    region is not read from self nor the rest from src (the backward of a slice scatters into zeros: one read)."""
    result_dtype = out_dtype()
    compute = compute_dtype(result_dtype)

    def inner_fn(index):
        inside, src_index = region_and_position(index)
        outside = ops.masked(ops.logical_not(inside), lambda: load_as(x, index, compute), ops.constant(0, compute))
        return ops.masked(inside, lambda: load_as(src, src_index, compute), outside)

    return pointwise_node(inner_fn)


def _index(expr):
    return ops.index_expr(expr, torch.int64)


def _in_range(expr, low, high):
    return ops.logical_and(ops.ge(_index(expr), _index(low)), ops.lt(_index(expr), _index(high)))


@register_lowering(aten.slice_scatter.default)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    dim = normalize_dim(dim, x.ndim)
    start = normalized_start(start, x.size[dim])
    count = src.size[dim]
    if step == 1 and start == 0 and sympy.expand(count - x.size[dim]) == 0:
        # the region is the whole tensor (x[:] = src, as a decomposed copy into a full slice writes it): src,
        # with no region test and no read of x. Under symbolic sizes the test would not fold away, and a chain
        # of such writes, each reading the one before as src and as x under complementary masks, doubled the
        # code per write (an RNN's per-timestep writes: 2^T masked bodies)
        compute = compute_dtype(out_dtype())
        return pointwise_node(lambda index: load_as(src, index, compute))

    def region(index):
        relative = index[dim] - start
        inside = _in_range(relative, 0, count * step)
        if step != 1:
            offset = ops.remainder(_index(relative), ops.constant(step, torch.int64))
            inside = ops.logical_and(inside, ops.eq(offset, ops.constant(0, torch.int64)))
        position = Bounded(FloorDiv(relative, step) if step != 1 else relative, count)
        return inside, index[:dim] + [position] + index[dim + 1:]

    return _scatter_node(x, src, region)


@register_lowering(aten.select_scatter.default)
def select_scatter(x, src, dim, index_value):
    dim = normalize_dim(dim, x.ndim)
    if isinstance(index_value, int) and index_value < 0:
        index_value = x.size[dim] + index_value
    target = symbolic_position(index_value, x.size[dim])

    def region(index):
        inside = ops.eq(_index(index[dim]), _index(target))
        return inside, index[:dim] + index[dim + 1:]

    return _scatter_node(x, src, region)


@register_lowering(aten.diagonal_scatter.default)
def diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    dim1, dim2, kept, length, row, col = _diagonal_geometry(x.size, offset, dim1, dim2)

    def region(index):
        k = index[dim1] - row
        inside = ops.logical_and(ops.eq(_index(k), _index(index[dim2] - col)), _in_range(k, 0, length))
        return inside, [index[d] for d in kept] + [Bounded(k, length)]

    return _scatter_node(x, src, region)


# Note [Inverting a strided view]
# as_strided_scatter(self, src, size, stride, offset) is self with the elements that self's storage shows
# through as_strided(size, stride, offset) replaced by src: AOTAutograd writes the gradient of an as_strided
# view this way (torchvision ConvNeXt's avgpool + flatten in training: zeros, as_strided_scatter, as_strided).
# Each output element at storage position p must find the view index k with offset + sum(k_i * stride_i) = p,
# if any. Where the view's dims nest (sorted by stride, each stride exceeds the farthest position the smaller
# dims reach, sum(stride_j * (size_j - 1)) over them), that k is unique and found greedily from the largest
# stride down: k_i = r // stride_i, r -= k_i * stride_i; p is in the view iff p >= offset, every k_i < size_i
# and r ends at 0. Overlapping views (two indexes at one place: which write wins is ATen's loop order),
# symbolic strides and non-contiguous self (its storage order is not its index order) run eagerly.


def _nested_dims(size, stride):
    """The view's dims of more than one element, largest stride first, if they nest (Note [Inverting a
    strided view]); None if they do not."""
    dims = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: stride[d])
    reach = 0  # the farthest position the dims so far reach
    for d in dims:
        if stride[d] <= reach:
            return None
        reach += stride[d] * (size[d] - 1)
    return dims[::-1]


@register_lowering(aten.as_strided_scatter.default)
def as_strided_scatter(x, src, size, stride, storage_offset=None):
    if not all(isinstance(v, int) for v in (*size, *stride, storage_offset or 0)):
        raise Unsupported("as_strided_scatter with symbolic sizes or strides runs eagerly")
    if not current().out_meta.is_contiguous():
        raise Unsupported("as_strided_scatter into a non-contiguous tensor runs eagerly")
    if 0 in size:
        raise Unsupported("as_strided_scatter of an empty view runs eagerly")
    dims = _nested_dims(size, stride)
    if dims is None:
        raise Unsupported(f"as_strided_scatter through an overlapping view (size {list(size)}, stride "
                          f"{list(stride)}) runs eagerly: which write wins is ATen's loop order")
    offset = storage_offset or 0

    def region(index):
        rest = ops.sub(_index(linearize(index, x.size)), ops.constant(offset, torch.int64))
        inside = ops.ge(rest, ops.constant(0, torch.int64))
        position = [sympy.Integer(0)] * len(size)
        for d in dims:
            step = ops.constant(stride[d], torch.int64)
            k = ops.floordiv(rest, step)
            rest = ops.sub(rest, ops.mul(k, step))
            inside = ops.logical_and(inside, ops.lt(k, ops.constant(size[d], torch.int64)))
            position[d] = ops.indirect(k, sympy.Integer(size[d]))
        return ops.logical_and(inside, ops.eq(rest, ops.constant(0, torch.int64))), position

    return _scatter_node(x, src, region)


# Note [Scatter as a search]
# scatter writes to data-dependent places, which a loop over the output cannot do directly. Instead each output
# element searches the index tensor for the entries that point at it: a Reduction over the scattered dim of
# `index` (over the whole batch of index tensors for index_put). Adding scatters sum the matching sources;
# replacing scatters take the last matching entry (torch's CPU loop writes in order, so the last write wins):
# a max-reduction over the matching positions finds it, and an indirect load reads the source there.
# The search is quadratic in the index length: fine for small scatters, and generated; larger adding scatters
# loop over their sources and add atomically instead (Note [Search or atomic add]).
MAX_SCATTER_SEARCH = 1 << 16

# Note [Search or atomic add]
# An adding scatter (scatter_add, scatter_reduce "sum" with self included, index_put with accumulate=True, an
# embedding's weight gradient) has two forms:
#   search      a Reduction per output element over the index entries (Note [Scatter as a search]): one
#               kernel, deterministic, and a pointwise node its readers fuse with; elements x entries work
#   atomic add  a Scatter node over the entries (Note [Accumulating stores] in ir/nodes.py): the wrapper zeroes
#               a buffer, one kernel adds each entry's value at its place, and a pointwise node adds `self`
#               (and rounds to half types); entries work, but two launches more and float sums in no fixed
#               order
# use_atomic_add picks the atomic add when the search would test more than SEARCH_WORK_LIMIT (element, entry)
# pairs or cannot be generated at all (more than MAX_SCATTER_SEARCH entries, or symbolic), and the accumulator
# is a type both backends add atomically (float32/float64/int32/int64: half types accumulate in float32;
# 8/16-bit integers and bools keep the search). An index_put of 3 entries into 24 elements (72 tests) stays a
# search, fused into its reader; a scatter_add of 4096 entries into 16384 elements (67M tests) is the atomic
# add. Under torch.use_deterministic_algorithms(True) the search is kept where it can be generated, and the
# rest runs eagerly (ATen's deterministic kernels). Entries outside the output are ignored in both forms (the
# search matches no element for them; the atomic add masks them off); eager raises for them on the CPU.
SEARCH_WORK_LIMIT = 1 << 20
ATOMIC_ADD_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)


def use_atomic_add(accumulator: torch.dtype, elements, entries) -> bool:
    """Note [Search or atomic add]: True for the atomic add; False for the search (which raises Unsupported
    itself when it cannot be generated)."""
    entries, work = sympy.sympify(entries), sympy.sympify(elements * entries)
    searchable = entries.is_Integer and int(entries) <= MAX_SCATTER_SEARCH
    if torch.are_deterministic_algorithms_enabled():
        if searchable:
            return False
        raise Unsupported("deterministic algorithms: a scatter this large runs eagerly (ATen's kernel)")
    if accumulator not in ATOMIC_ADD_DTYPES:
        return False
    return not searchable or not work.is_Integer or int(work) > SEARCH_WORK_LIMIT


def scatter_node(size, dtype: torch.dtype, ranges, body) -> TensorValue:
    """A Scatter node (Note [Accumulating stores]): zeros of `size`, plus body(index) = (target index, value,
    keep) for each index of `ranges`."""
    graph = current()
    node = Scatter(name=graph.new_name(), size=tuple(size), dtype=dtype, device=graph.device,
                   origins=graph.origins(), ranges=tuple(ranges), inner_fn=body)
    graph.register(node)
    return TensorValue(node, tuple(size))


def checked_position(value, size, wrap: bool):
    """(the data-dependent position `value` names along a dim of `size`, whether it lies inside): negative
    values count from the end where `wrap` (index_put), and point outside otherwise (scatter, embedding)."""
    value = value if value.dtype == torch.int64 else ops.to_dtype(value, torch.int64)
    extent = ops.index_expr(size, torch.int64)
    if wrap:
        value = ops.where(ops.lt(value, ops.constant(0, torch.int64)), ops.add(value, extent), value)
    inside = ops.logical_and(ops.ge(value, ops.constant(0, torch.int64)), ops.lt(value, extent))
    return ops.indirect(value, size), inside


def _plus_self(x, added: TensorValue, acc: torch.dtype) -> TensorValue:
    """self + the atomic add's sums, rounded to the result's dtype (Note [Search or atomic add])."""
    return pointwise_node(lambda idx: ops.add(load_as(x, idx, acc), added.load(idx)))


def _scatter_add_atomic(x, dim, index, src, acc) -> TensorValue:
    """scatter_add as an atomic add over `index`'s entries: out[..., index[i], ...] += src[i]."""
    def body(idx):
        position, inside = checked_position(index.load(list(idx)), x.size[dim], wrap=False)
        target = list(idx[:dim]) + [position] + list(idx[dim + 1:])
        value = load_as(src, idx, acc) if isinstance(src, TensorValue) else ops.constant(src, acc)
        return target, value, inside

    return _plus_self(x, scatter_node(x.size, acc, index.size, body), acc)


def _reduction(size, reduction_size, reduction_type, dtype, inner_fn):
    return reduction_node(inner_fn, size=size, reduction_size=reduction_size, reduction_type=reduction_type,
                          dtype=dtype)


def _check_search(length):
    if not length.is_Integer or int(length) > MAX_SCATTER_SEARCH:
        raise Unsupported(f"scatter search over {length} index entries (generated up to {MAX_SCATTER_SEARCH})")


def _dim_matcher(x, dim, index):
    """(match(idx, r) -> bool value, position(idx, r) -> index into `index`/`src`) for scatter along dim."""
    def position(idx, r):
        return [r if d == dim else clamp_index(idx[d], index.size[d]) if index.size[d] != x.size[d] else idx[d]
                for d in range(x.ndim)]

    def match(idx, r):
        ok = ops.eq(index.load(position(idx, r)), ops.index_expr(idx[dim], torch.int64))
        for d in range(x.ndim):
            if d != dim and index.size[d] != x.size[d]:
                ok = ops.logical_and(ok, ops.lt(ops.index_expr(idx[d], torch.int64),
                                                ops.index_expr(index.size[d], torch.int64)))
        return ok

    return match, position


def _scatter_common(x, dim, index):
    if x.ndim == 0 or index.ndim == 0:
        raise Unsupported("scatter on a 0-dim tensor runs eagerly")
    dim = normalize_dim(dim, x.ndim)
    _check_search(index.size[dim])
    return dim


def _combine(kind, a, b):
    return {"sum": ops.add, "prod": ops.mul, "amax": ops.maximum, "amin": ops.minimum, "or": ops.logical_or,
            "and": ops.logical_and}[kind](a, b)


def _scatter_reduce(x, dim, index, src, kind, include_self=True):
    """scatter_add / scatter_reduce: self combined with the matching sources (see Note [Scatter as a search])."""
    result_dtype = out_dtype()
    acc = compute_dtype(result_dtype)
    if kind == "sum" and include_self and x.ndim and index.ndim and \
            use_atomic_add(acc, product(x.size), index.size[normalize_dim(dim, x.ndim)]):
        return _scatter_add_atomic(x, normalize_dim(dim, x.ndim), index, src, acc)
    dim = _scatter_common(x, dim, index)
    match, position = _dim_matcher(x, dim, index)
    reduction_type = {"sum": "sum", "mean": "sum", "prod": "prod", "amax": "max", "amin": "min"}[kind]
    if acc == torch.bool and kind != "mean":  # bools combine logically (a 1-bit add would wrap around)
        kind = "or" if kind in ("sum", "amax") else "and"
        reduction_type = "any" if kind == "or" else "all"
    from engine.ir.ops import reduction_identity
    identity = reduction_identity(reduction_type, acc)

    def values(idx, rindex):
        loaded = load_as(src, position(idx, rindex[0]), acc) if isinstance(src, TensorValue) else \
            ops.constant(src, acc)
        return ops.where(match(idx, rindex[0]), loaded, ops.constant(identity, acc))

    combined = _reduction(x.size, (index.size[dim],), reduction_type, acc, values)
    count = None
    if kind in ("mean", "amax", "amin") or not include_self:
        count = _reduction(x.size, (index.size[dim],), "sum", torch.int64,
                           lambda idx, rindex: ops.where(match(idx, rindex[0]), ops.constant(1, torch.int64),
                                                         ops.constant(0, torch.int64)))

    def inner_fn(idx):
        own = load_as(x, idx, acc)
        found = combined.load(idx)
        if kind == "mean":
            n = count.load(idx)
            total = ops.add(own, found) if include_self else found
            n = ops.add(n, ops.constant(1, torch.int64)) if include_self else n
            # no match and no self: the value is discarded below, but an integer division by 0 would trap
            divisor = ops.to_dtype(ops.maximum(n, ops.constant(1, torch.int64)), acc)
            # integers: eager divides with rounding_mode="floor"
            value = ops.truediv(total, divisor) if acc.is_floating_point else ops.floordiv(total, divisor)
        else:
            value = _combine(kind, own, found) if include_self else found
        if count is not None:  # no entry points here: the element keeps self's value
            value = ops.where(ops.gt(count.load(idx), ops.constant(0, torch.int64)), value, own)
        return value

    return pointwise_node(inner_fn)


def _scatter_replace(x, dim, index, src):
    """scatter.src / scatter.value: the last matching entry wins (Note [Scatter as a search])."""
    dim = _scatter_common(x, dim, index)
    result_dtype = out_dtype()
    acc = compute_dtype(result_dtype)
    match, position = _dim_matcher(x, dim, index)
    last = _reduction(x.size, (index.size[dim],), "max", torch.int64,
                      lambda idx, rindex: ops.where(match(idx, rindex[0]),
                                                    ops.index_expr(rindex[0], torch.int64),
                                                    ops.constant(-1, torch.int64)))

    def inner_fn(idx):
        j = last.load(idx)
        if isinstance(src, TensorValue):
            source = load_as(src, position(idx, ops.indirect(j, index.size[dim])), acc)
        else:
            source = ops.constant(src, acc)
        value = ops.where(ops.ge(j, ops.constant(0, torch.int64)), source, load_as(x, idx, acc))
        return value

    return pointwise_node(inner_fn)


@register_lowering(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    return _scatter_reduce(x, dim, index, src, "sum")


@register_lowering(aten.scatter.src, aten.scatter.value)
def scatter(x, dim, index, src):
    return _scatter_replace(x, dim, index, src)


@register_lowering(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_with_reduce(x, dim, index, src, *, reduce):
    return _scatter_reduce(x, dim, index, src, {"add": "sum", "multiply": "prod"}[reduce])


@register_lowering(aten.scatter_reduce.two)
def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    return _scatter_reduce(x, dim, index, src, reduce, include_self)


def _index_put_atomic(x, tensors, values, first: int, batch: list, acc) -> TensorValue:
    """index_put(accumulate=True) as an atomic add over the entries: a loop over x's dims before the indexed
    ones, the index batch, and the dims after, each adding values[...] at x[..., i0[b], i1[b], ..., rest]."""
    k, batch_ndim = len(tensors), len(batch)
    ranges = list(x.size[:first]) + list(batch) + list(x.size[first + k:])

    def body(idx):
        before, b, rest = idx[:first], idx[first:first + batch_ndim], idx[first + batch_ndim:]
        positions, keep = [], None
        for t, dim in zip(tensors, range(first, first + k)):
            value = t.load([sympy.Integer(0) if s == 1 else b[batch_ndim - t.ndim + d] for d, s in enumerate(t.size)])
            position, inside = checked_position(value, x.size[dim], wrap=True)
            positions.append(position)
            keep = inside if keep is None else ops.logical_and(keep, inside)
        value = load_as(values, list(before) + list(b) + list(rest), acc)
        return list(before) + positions + list(rest), value, keep

    return _plus_self(x, scatter_node(x.size, acc, ranges, body), acc)


# Note [Boolean-mask index_put as a select]
# x[mask] = values (index_put with one bool tensor over dims first .. first + mask.ndim) writes values' rows,
# broadcast to (number of true elements, *the dims after the mask), into the true positions in order. When
# values has no row dim of its own (a scalar, a tensor over the trailing dims, or a leading dim of 1: Longformer
# masking its attention scores with -inf), every true position gets the same value, and the op is
# where(mask, values, x) elementwise (x + where(mask, values, 0) when it accumulates). Values with one row per
# true element need each element's rank among the true ones (a prefix sum over the mask) before the row can be
# read: that runs eagerly, as do several masks or a mask beside index tensors.


def _index_put_mask(x, tensors, first: int, values, accumulate: bool):
    """Note [Boolean-mask index_put as a select]."""
    if len(tensors) != 1:
        raise Unsupported("index_put with a boolean mask beside other index tensors runs eagerly")
    mask = tensors[0]
    rest = x.ndim - first - mask.ndim
    rows = values.size if isinstance(values, TensorValue) else ()
    if len(rows) > rest and not (len(rows) == rest + 1 and rows[0] == 1):
        raise Unsupported("index_put of one value row per true element of a boolean mask needs each element's "
                          "rank among the true ones (a prefix sum): runs eagerly (Note [Boolean-mask index_put "
                          "as a select])")
    acc = compute_dtype(out_dtype())

    def body(idx):
        keep = mask.load(list(idx[first:first + mask.ndim]))
        tail = list(idx[first + mask.ndim:])
        value = load_as(values, ([sympy.Integer(0)] if len(rows) == rest + 1 else []) + tail, acc)
        old = load_as(x, list(idx), acc)
        if accumulate:
            return ops.add(old, ops.where(keep, value, ops.constant(0, acc)))
        return ops.where(keep, value, old)

    return pointwise_node(body, computed_in=acc)


@register_lowering(aten.index_put.default)
def index_put(x, indices, values, accumulate=False):
    """x[i0, i1, ...] = values (or +=) with index tensors on adjacent dims: a search over the index batch for
    the entries that point at each element (Note [Scatter as a search])."""
    present = [i for i, t in enumerate(indices) if t is not None]
    if not present or present != list(range(present[0], present[-1] + 1)):
        raise Unsupported("index_put with non-adjacent index tensors runs eagerly")
    tensors = [indices[i] for i in present]
    if any(t.dtype == torch.bool for t in tensors):
        return _index_put_mask(x, tensors, present[0], values, accumulate)
    first, k = present[0], len(tensors)
    batch_ndim = max(t.ndim for t in tensors)
    batch = [sympy.Integer(1)] * batch_ndim
    for t in tensors:  # broadcast shape of the index tensors
        for d, s in enumerate(t.size):
            position = batch_ndim - t.ndim + d
            batch[position] = s if batch[position] == 1 else batch[position]
    result_dtype = out_dtype()
    acc = compute_dtype(result_dtype)
    entries = product(batch) if batch else sympy.Integer(1)
    if accumulate and use_atomic_add(acc, product(x.size), entries):
        return _index_put_atomic(x, tensors, values, first, batch, acc)
    _check_search(entries)

    def split(idx):
        return list(idx[:first]), list(idx[first:first + k]), list(idx[first + k:])

    def match(idx, b):
        _, selected, _ = split(idx)
        ok = None
        for t, target, dim in zip(tensors, selected, range(first, first + k)):
            value = t.load([sympy.Integer(0) if s == 1 else b[batch_ndim - t.ndim + d] for d, s in enumerate(t.size)])
            value = ops.to_dtype(value, torch.int64) if t.dtype != torch.int64 else value
            size = ops.index_expr(x.size[dim], torch.int64)
            wrapped = ops.where(ops.lt(value, ops.constant(0, torch.int64)), ops.add(value, size), value)
            this = ops.eq(wrapped, ops.index_expr(target, torch.int64))
            ok = this if ok is None else ops.logical_and(ok, this)
        return ok

    def values_at(idx, b):
        before, _, rest = split(idx)
        return load_as(values, before + list(b) + rest, acc)

    if accumulate:
        logical = acc == torch.bool  # bools accumulate as "or" (a 1-bit add would wrap around)
        found = _reduction(x.size, batch, "any" if logical else "sum", acc,
                           lambda idx, b: ops.where(match(idx, b), values_at(idx, b), ops.constant(0, acc)))

        def inner_fn(idx):
            value = (ops.logical_or if logical else ops.add)(load_as(x, idx, acc), found.load(idx))
            return value

        return pointwise_node(inner_fn)

    last = _reduction(x.size, batch, "max", torch.int64,
                      lambda idx, b: ops.where(match(idx, b), ops.index_expr(linearize(b, batch), torch.int64),
                                               ops.constant(-1, torch.int64)))

    def inner_fn(idx):
        j = last.load(idx)
        b = unflatten(ops.indirect(j, product(batch)), batch)
        value = ops.where(ops.ge(j, ops.constant(0, torch.int64)), values_at(idx, b), load_as(x, idx, acc))
        return value

    return pointwise_node(inner_fn)
