"""Data-dependent reads: embedding, index_select, gather, advanced indexing. See ops.indirect."""
from __future__ import annotations

import torch

from engine.ir.ops import ops
from engine.lowering.common import broadcast_index, normalize_dim, out_dtype, pointwise_node
from engine.lowering.registry import Unsupported, register_lowering

aten = torch.ops.aten


def _read_index(indices, index, size):
    return ops.indirect(indices.load(broadcast_index(indices.size, index)), size)


@register_lowering(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    k = indices.ndim

    def inner_fn(index):
        row = _read_index(indices, index[:k], weight.size[0])
        return weight.load([row] + list(index[k:]))

    return pointwise_node(inner_fn, computed_in=out_dtype())


@register_lowering(aten.index_select.default)
def index_select(x, dim, index_tensor):
    if x.ndim == 0:  # the only valid index is 0: the scalar itself
        return pointwise_node(lambda index: x.load([]), computed_in=out_dtype())
    dim = normalize_dim(dim, x.ndim)

    def inner_fn(index):
        position = _read_index(index_tensor, [index[dim]], x.size[dim])
        return x.load(list(index[:dim]) + [position] + list(index[dim + 1:]))

    return pointwise_node(inner_fn, computed_in=out_dtype())


@register_lowering(aten.gather.default)
def gather(x, dim, index_tensor, *, sparse_grad=False):
    dim = normalize_dim(dim, x.ndim)

    def inner_fn(index):
        position = ops.indirect(index_tensor.load(list(index)), x.size[dim])
        return x.load(list(index[:dim]) + [position] + list(index[dim + 1:]))

    return pointwise_node(inner_fn, computed_in=out_dtype())


@register_lowering(aten.index.Tensor)
def index_tensor(x, indices):
    # Advanced indexing with index tensors on leading, adjacent dims: out = x[i0[b], i1[b], ..., rest]
    present = [i for i, t in enumerate(indices) if t is not None]
    if not present or present != list(range(present[0], present[-1] + 1)):
        raise Unsupported("advanced indexing with non-adjacent index tensors runs eagerly")
    first, tensors = present[0], [indices[i] for i in present]
    if any(t.dtype == torch.bool for t in tensors):
        raise Unsupported("boolean mask indexing has a data-dependent shape")
    batch_ndim = max(t.ndim for t in tensors)

    def inner_fn(index):
        batch = index[first:first + batch_ndim]
        positions = [_read_index(t, batch, x.size[first + j]) for j, t in enumerate(tensors)]
        rest = index[first + batch_ndim:]
        return x.load(list(index[:first]) + positions + list(rest))

    return pointwise_node(inner_fn, computed_in=out_dtype())
