"""View ops: index remaps over the same node, never copies (Note [Views are index maps])."""
from __future__ import annotations

import sympy
import torch

from engine.ir import indexing
from engine.ir.indexing import FloorDiv, ModIndex, linearize, product, unflatten
from engine.ir.nodes import TensorValue
from engine.lowering.common import normalize_dim, out_size, realize, sympify_size
from engine.lowering.registry import Unsupported, current, register_lowering

aten = torch.ops.aten


@register_lowering(aten.permute)
def permute(x: TensorValue, dims):
    dims = [normalize_dim(d, x.ndim) for d in dims]
    inverse = [dims.index(d) for d in range(x.ndim)]
    return x.view([x.size[d] for d in dims], lambda idx: [idx[inverse[d]] for d in range(x.ndim)])


@register_lowering(aten.t, aten.numpy_T)
def t(x: TensorValue):
    return permute(x, list(reversed(range(x.ndim))))


@register_lowering(aten.transpose.int)
def transpose(x: TensorValue, dim0, dim1):
    dims = list(range(x.ndim))
    a, b = normalize_dim(dim0, x.ndim), normalize_dim(dim1, x.ndim)
    dims[a], dims[b] = dims[b], dims[a]
    return permute(x, dims)


@register_lowering(aten.expand)
def expand(x: TensorValue, size, *, implicit=False):
    size = out_size()
    lead = len(size) - x.ndim
    return x.view(size, lambda idx: [sympy.Integer(0) if x.size[d] == 1 and size[lead + d] != 1 else idx[lead + d]
                                     for d in range(x.ndim)])


@register_lowering(aten.view, aten._unsafe_view, aten.reshape, aten.view_copy)
def view(x: TensorValue, size):
    size = out_size()
    if tuple(size) == tuple(x.size):
        return x
    return x.view(size, lambda idx: unflatten(linearize(idx, size), x.size))


@register_lowering(aten.unsqueeze)
def unsqueeze(x: TensorValue, dim):
    dim = normalize_dim(dim, x.ndim + 1)
    size = list(x.size[:dim]) + [sympy.Integer(1)] + list(x.size[dim:])
    return x.view(size, lambda idx: idx[:dim] + idx[dim + 1:])


@register_lowering(aten.squeeze)
def squeeze(x: TensorValue, dim=None):
    size = out_size()
    if tuple(size) == tuple(x.size):
        return x
    if dim is None:
        dims = [d for d, s in enumerate(x.size) if s == 1]
    else:
        dims = [normalize_dim(d, x.ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
        dims = [d for d in dims if x.size[d] == 1]
    kept = [d for d in range(x.ndim) if d not in dims]

    def remap(idx):
        full = [sympy.Integer(0)] * x.ndim
        for d, i in zip(kept, idx):
            full[d] = i
        return full

    return x.view([x.size[d] for d in kept], remap)


# Note [Negative symbolic positions]
# ATen counts a negative slice start or select index from the end of the dim. A Python int shows its sign; a
# SymInt is an expression such as -(w + 1) (Longformer's x[:, :, -(w + 1):-1] under dynamic shapes), which was
# taken as the position itself, so the view read before its dim's start: wrong values, no error. Its sign is
# read from the size symbols' assumptions (positive integers): a negative one has the dim's length added, as a
# number would. A position whose sign the sizes do not decide is declined, and the op runs eagerly with its
# reason; so is one that floor-divides a number not proved nonnegative (-(n + 1) // 2), which C's `/` would
# round toward zero.


def symbolic_position(value, length):
    """A SymInt slice start or select index as a position in [0, length] (Note [Negative symbolic positions])."""
    from torch.utils._sympy import functions

    raw = indexing.sympify_size(value)  # a derived size's own expression: torch's functions, which it hides
    raw = raw.xreplace(current().derived_sizes) if isinstance(raw, sympy.Basic) else raw
    if any(not part.args[0].is_nonnegative for part in raw.atoms(FloorDiv, ModIndex, functions.FloorDiv)):
        # -(n + 1) // 2: C's `/` is exact only for a numerator >= 0, and a derived size claims a sign it lacks
        raise Unsupported(f"a position {raw} that divides a number the sizes do not prove nonnegative "
                          f"(Note [Negative symbolic positions])")
    position = sympify_size(value)
    if position.is_nonnegative:
        return position
    if position.is_negative:
        shifted = position + length
        return shifted if shifted.is_nonnegative else sympy.Max(0, shifted)
    raise Unsupported(f"a position {position} whose sign the sizes do not decide (Note [Negative symbolic "
                      f"positions])")


def normalized_start(start, length):
    """A slice's start as ATen takes it: None is 0, a negative one counts from the end, and a number is clamped
    into [0, length] (Note [Negative symbolic positions] for a SymInt)."""
    if start is None:
        return sympy.Integer(0)
    if isinstance(start, int):
        if start < 0:
            start = start + length
        return sympy.Max(0, sympy.Min(start, length)) if not length.is_Integer else \
            sympy.Integer(min(max(0, start), int(length)))
    return symbolic_position(start, length)


@register_lowering(aten.slice.Tensor)
def slice_(x: TensorValue, dim=0, start=None, end=None, step=1):
    dim = normalize_dim(dim, x.ndim)
    size = out_size()
    start = normalized_start(start, x.size[dim])
    return x.view(size, lambda idx: idx[:dim] + [start + idx[dim] * step] + idx[dim + 1:])


@register_lowering(aten.select.int)
def select(x: TensorValue, dim, index):
    dim = normalize_dim(dim, x.ndim)
    if isinstance(index, int) and index < 0:
        index = x.size[dim] + index
    index = symbolic_position(index, x.size[dim])
    return x.view(out_size(), lambda idx: idx[:dim] + [index] + idx[dim:])


@register_lowering(aten.alias, aten.detach, aten.lift_fresh)
def alias(x: TensorValue):
    return x


# Note [as_strided as a gather of its input]
# as_strided(x, size, stride, offset) reads x's storage at offset + sum(i * stride). Where eager's x (the
# graph's fake tensor) is contiguous, storage position p is x's element number p - x.storage_offset(), so
# when every position the view reads lies inside x's elements the view is a gather of x by logical
# position: unflatten(offset - x.storage_offset() + sum(i * stride), x.size). Nothing depends on how we
# store x or whether it is a view of something else (Longformer's overlapping chunks are as_strided of a
# view of a contiguous projection). A view reaching outside x's elements, negative strides, a
# non-contiguous x or bounds the sizes do not decide run eagerly, each with its reason.


@register_lowering(aten.as_strided)
def as_strided(x: TensorValue, size, stride, storage_offset=None):
    """Note [as_strided as a gather of its input]."""
    node = current().current_node
    meta = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if meta is None or not meta.is_contiguous():
        raise Unsupported("as_strided of a tensor eager holds non-contiguous reads storage our buffers do not "
                          "mirror: runs eagerly (Note [as_strided as a gather of its input])")
    stride = [sympify_size(s) for s in stride]
    out = out_size()
    own = sympify_size(meta.storage_offset())
    start = sympify_size(storage_offset) - own if storage_offset is not None else sympy.Integer(0)
    if any(sympy.Ge(s, 0) is not sympy.true for s in stride):
        raise Unsupported("as_strided with a negative or symbolic-sign stride runs eagerly")
    last = start + sum(((n - 1) * s for n, s in zip(out, stride)), sympy.Integer(0))
    numel = product(x.size) if x.ndim else sympy.Integer(1)
    if any(n == 0 for n in out):
        return x.view(out, lambda idx: [sympy.Integer(0)] * x.ndim)  # reads nothing
    if sympy.Ge(start, 0) is not sympy.true or sympy.Lt(last, numel) is not sympy.true:
        raise Unsupported("as_strided reaching outside its input's elements (or where the sizes do not decide "
                          "that it does not) runs eagerly (Note [as_strided as a gather of its input])")
    return x.view(out, lambda idx: unflatten(start + sum((i * s for i, s in zip(idx, stride)), sympy.Integer(0)),
                                             x.size))


@register_lowering(aten.split_with_sizes.default, aten.split.Tensor)
def split(x: TensorValue, sizes, dim=0):
    """Each piece is a slice view of x."""
    dim = normalize_dim(dim, x.ndim)
    metas = current().out_meta
    pieces, start = [], sympy.Integer(0)
    for meta in metas:
        length = sympify_size(meta.shape[dim])
        pieces.append(x.view([sympify_size(s) for s in meta.shape],
                             (lambda begin: lambda idx: idx[:dim] + [begin + idx[dim]] + idx[dim + 1:])(start)))
        start = start + length
    return tuple(pieces)


@register_lowering(aten.unbind.int)
def unbind(x: TensorValue, dim=0):
    dim = normalize_dim(dim, x.ndim)
    size = [s for d, s in enumerate(x.size) if d != dim]
    return tuple(x.view(size, (lambda i: lambda idx: idx[:dim] + [sympy.Integer(i)] + idx[dim:])(i))
                 for i in range(int(x.size[dim])))


def _diagonal_geometry(size, offset, dim1, dim2):
    """(kept dims, diagonal length, row offset, column offset) of diagonal(offset, dim1, dim2)."""
    ndim = len(size)
    dim1, dim2 = normalize_dim(dim1, ndim), normalize_dim(dim2, ndim)
    row, col = (sympy.Integer(-offset), sympy.Integer(0)) if offset < 0 else (sympy.Integer(0), sympy.Integer(offset))
    length = sympy.Max(0, sympy.Min(size[dim1] - row, size[dim2] - col))
    kept = [d for d in range(ndim) if d not in (dim1, dim2)]
    return dim1, dim2, kept, length, row, col


@register_lowering(aten.diagonal.default)
def diagonal(x: TensorValue, offset=0, dim1=0, dim2=1):
    dim1, dim2, kept, _, row, col = _diagonal_geometry(x.size, offset, dim1, dim2)

    def remap(idx):
        full = [None] * x.ndim
        for d, i in zip(kept, idx[:-1]):
            full[d] = i
        full[dim1], full[dim2] = idx[-1] + row, idx[-1] + col
        return full

    return x.view(out_size(), remap)


@register_lowering(torch.ops.prims.rev.default)
def rev(x: TensorValue, dims):
    """flip: position i along a flipped dim reads size - 1 - i. A copy, like eager's: as a view it would need
    negative strides, which no tensor handed back to torch may have."""
    flipped = {normalize_dim(d, x.ndim) for d in dims}
    return realize(x.view(x.size, lambda idx: [x.size[d] - 1 - i if d in flipped else i for d, i in enumerate(idx)]))


@register_lowering(aten.unfold.default)
def unfold(x: TensorValue, dimension, size, step):
    """Windows of `size` every `step` along `dimension`, as a new last dim: x[..., w*step + k, ...]."""
    if x.ndim == 0:
        return x.view(out_size(), lambda idx: [])
    dim = normalize_dim(dimension, x.ndim)
    return x.view(out_size(), lambda idx: idx[:dim] + [idx[dim] * step + idx[-1]] + idx[dim + 1:x.ndim])
