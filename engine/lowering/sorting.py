"""A stable sort as ranks: sort(stable=True) and argsort(stable=True) over rows of at most MAX_RANKED_ROW.

Note [Stable sort as ranks]
In a stable sort, the element at position i of a row goes to position rank(i): the number of elements
that sort before it, plus the number of equal ones at a smaller position. Each rank is a Reduction over
the row (compares only), the output position j takes the i whose rank is j (a second Reduction over the
row: exactly one i matches, so the sum of where(rank == j, i, 0) is it), and the values are a gather at
those indices: three ordinary nodes, no sorting network. The order is torch's: ascending puts NaN last,
descending first (NaN sorts as the greatest value), equal values (-0.0 and 0.0 among them) keep their
positions' order, which is what stable means, so the indices are eager's exactly. The work is the row's
length squared, so only rows of at most MAX_RANKED_ROW are generated (a mixture-of-experts layer sorts its
tokens' expert ids, one per routed token); a longer row runs ATen's sort.
An unstable sort and topk leave the order of ties to their algorithm (introsort, partial sort): eager's
CPU order differed from the positions' order in 388 of 400 tie-heavy rows measured, so ranks would give
other, equally valid indices than eager's, and a checked model could not be told apart from a wrong one.
Those run eagerly (Note [Sorting runs eagerly] in declined.py).
"""
from __future__ import annotations

import sympy
import torch

from engine.ir.ops import compute_dtype, ops
from engine.lowering.common import check_dtype, load_as, normalize_dim, pointwise_node, reduction_node
from engine.lowering.registry import Unsupported, current, register_lowering

aten = torch.ops.aten
MAX_RANKED_ROW = 1024


def _at(index, dim: int, position):
    return [position if d == dim else i for d, i in enumerate(index)]


@register_lowering(aten.sort.stable)
def sort_stable(x, *, stable=None, dim=-1, descending=False):
    if not stable:
        raise Unsupported("an unstable sort runs eagerly: eager's algorithm orders ties its own way, which "
                          "generated ranks cannot reproduce (Note [Stable sort as ranks] in "
                          "engine/lowering/sorting.py)")
    check_dtype(x.dtype)
    if x.dtype == torch.bool:
        raise Unsupported("a sort of bool runs eagerly (ranks are generated for numbers)")
    dim = normalize_dim(dim, x.ndim)
    size = list(x.size)
    if not size:
        raise Unsupported("a sort of a 0-dim tensor runs eagerly")
    row = size[dim]
    if not isinstance(row, sympy.Integer) or int(row) > MAX_RANKED_ROW:
        raise Unsupported(f"a stable sort over rows of {row} runs eagerly: ranks cost the row's length squared, "
                          f"generated up to {MAX_RANKED_ROW} (Note [Stable sort as ranks] in "
                          "engine/lowering/sorting.py)")
    acc = compute_dtype(x.dtype)
    floating = x.dtype.is_floating_point
    values_meta, _ = current().out_meta

    def before(a, b):
        """a sorts strictly before b."""
        if not floating:
            return ops.gt(a, b) if descending else ops.lt(a, b)
        if descending:
            return ops.logical_or(ops.gt(a, b), ops.logical_and(ops.isnan(a), ops.logical_not(ops.isnan(b))))
        return ops.logical_or(ops.lt(a, b), ops.logical_and(ops.logical_not(ops.isnan(a)), ops.isnan(b)))

    def same(a, b):
        equal = ops.eq(a, b)
        return ops.logical_or(equal, ops.logical_and(ops.isnan(a), ops.isnan(b))) if floating else equal

    def precedes(index, rindex):
        m, i = rindex[0], index[dim]
        other, mine = load_as(x, _at(index, dim, m), acc), load_as(x, index, acc)
        earlier = ops.lt(ops.index_expr(m, torch.int64), ops.index_expr(i, torch.int64))
        counted = ops.logical_or(before(other, mine), ops.logical_and(same(other, mine), earlier))
        return ops.where(counted, ops.constant(1, torch.int64), ops.constant(0, torch.int64))

    rank = reduction_node(precedes, size=size, reduction_size=[row], reduction_type="sum", dtype=torch.int64)

    def taker(index, rindex):
        i = rindex[0]
        mine = ops.eq(rank.load(_at(index, dim, i)), ops.index_expr(index[dim], torch.int64))
        return ops.where(mine, ops.index_expr(i, torch.int64), ops.constant(0, torch.int64))

    indices = reduction_node(taker, size=size, reduction_size=[row], reduction_type="sum", dtype=torch.int64)

    def value(index):
        source = ops.indirect(indices.load(index), None)  # a rank's position: inside the row by construction
        return x.load(_at(index, dim, source))

    values = pointwise_node(value, size=size, dtype=values_meta.dtype, computed_in=x.dtype)
    return values, indices
