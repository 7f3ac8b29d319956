"""Loop IR nodes. Each node names one buffer: the tensor it produces.

Pointwise and Reduction carry loop bodies (`inner_fn`) written in the ops protocol; Extern and Fallback
call a library or eager ATen op; InputBuffer and Constant are graph inputs and captured tensors.
Views are not nodes: a TensorValue reads a node through an index remap (see Note [Views are index maps]).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import sympy
import torch

from engine.ir.indexing import Expr, contiguous_strides, loop_var, offset, product, simplify_index
from engine.ir.ops import compute_dtype, ops

Index = list[Expr]


@dataclass(eq=False)
class Buffer:
    name: str
    size: tuple[Expr, ...]
    dtype: torch.dtype
    device: str
    origins: tuple[str, ...] = ()  # names of the ATen nodes this node computes

    kind = "buffer"

    @property
    def numel(self) -> Expr:
        return product(self.size)

    @property
    def stride(self) -> tuple[Expr, ...]:
        """Storage strides. Nodes we compute are written contiguous."""
        return tuple(contiguous_strides(self.size))

    def storage_offset(self, index: Sequence[Expr]) -> Expr:
        return offset(index, self.stride)


@dataclass(eq=False)
class InputBuffer(Buffer):
    position: int = 0
    input_stride: tuple[Expr, ...] = ()
    input_device: str = ""  # where the caller's tensor lives (the wrapper moves it if a kernel elsewhere reads it)
    kind = "input"

    @property
    def stride(self):
        return self.input_stride


@dataclass(eq=False)
class Constant(Buffer):
    """A tensor the graph captured (a get_attr): passed to kernels like an input."""
    value: torch.Tensor | None = None
    kind = "constant"

    @property
    def stride(self):
        return tuple(sympy.Integer(s) for s in self.value.stride())


@dataclass(eq=False)
class Pointwise(Buffer):
    inner_fn: Callable[[Index], Any] = None
    kind = "pointwise"

    @property
    def ranges(self) -> tuple[Expr, ...]:
        return self.size


@dataclass(eq=False)
class Reduction(Buffer):
    """out[index] = reduce(inner_fn(index, rindex) for rindex in reduction_size)."""
    reduction_size: tuple[Expr, ...] = ()
    reduction_type: str = "sum"
    src_dtype: torch.dtype = torch.float32
    inner_fn: Callable[[Index, Index], Any] = None
    kind = "reduction"

    @property
    def ranges(self) -> tuple[Expr, ...]:
        return self.size

    @property
    def reduction_numel(self) -> Expr:
        return product(self.reduction_size)


# Note [Scans]
# cumsum, cumprod, logcumsumexp, cummax and cummin are Scan nodes: out[..., i] = combine(out[..., i - 1],
# value[..., i]) along the LAST dim of the node's own size, from the scan's identity. A scan over another dim
# of a tensor is a Scan over a permuted view of it (the dim moved last), read back through the inverse
# permutation: every Scan walks its own buffer's rows, which are contiguous, so one loop shape serves all
# (Note [Scan kernels] in schedule/policy.py). Why a node kind of its own and not a Reduction: a reduction's
# value is one per row, readable once its row is done; a scan's is one per element, readable at its own
# element while the row is walked (so elementwise consumers fuse after it) and nowhere else. It was a
# Reduction over the whole scanned dim masked to the prefix, quadratic in the length and capped at 1024.
# `inner_fn(index)` is the value at each element, in `acc_dtype`; `scan_type` is one of SCAN_TYPES; an
# argmax/argmin scan's value is the index (int64) of cummax's/cummin's running best, as eager picks it.
SCAN_TYPES = ("sum", "prod", "logsumexp", "max", "min", "argmax", "argmin")


@dataclass(eq=False)
class Scan(Buffer):
    """out[..., i] = scan_type over value[..., :i + 1] along the last dim (Note [Scans])."""
    inner_fn: Callable[[Index], Any] = None
    scan_type: str = "sum"
    acc_dtype: torch.dtype = torch.float32  # what the values are and combine in (backends may widen: cpp/scan.py)
    kind = "scan"

    @property
    def ranges(self) -> tuple[Expr, ...]:
        return self.size

    @property
    def length(self) -> Expr:
        return self.size[-1] if self.size else sympy.Integer(1)


# Note [Accumulating stores]
# A Pointwise or Reduction node loops over its own elements: each is computed once, where it is stored. A
# scatter-add (an embedding's weight gradient, index_put with accumulate=True, scatter_add) writes to places
# its data picks, several sources into one place; looping over the output, every element would have to search
# the sources for those that land on it (Note [Scatter as a search] in lowering/scatters.py). A Scatter node
# loops over its *source* instead: `inner_fn(index)` yields (the place in this buffer, the value, a bool
# value saying whether to add at all, or None for always) for each source element, and the kernel adds the
# value there (ops.store_add: an atomic add in Triton, a `+=` in a one-thread loop in C++, Note [Scatter
# kernels in C++] in codegen/cpp/module.py, an ordered index_add_ in the evaluator). The condition keeps out entries
# that add nothing (an embedding's padding_idx) or point outside the buffer: those are ignored, as the search
# ignores them (an address is formed for them, never used). So:
# - the buffer starts at zero: the wrapper zeroes it before the kernel runs (what a lowering adds to, `self`
#   of a scatter_add, is a pointwise node after it);
# - it is in the compute dtype (float32 for half types: accumulating in bf16 would round at every add); a
#   pointwise node after it rounds to the result's dtype;
# - its value is complete only when its kernel ends: no reader of it shares that kernel, nor any sibling, and
#   no kernel is moved before it (the scheduler's accumulating_store rule, policy.py); elementwise producers of
#   its values are computed inside it, as in any pointwise kernel.
@dataclass(eq=False)
class Scatter(Buffer):
    """out = 0; out[target(i)] += value(i) where keep(i), for every i in `ranges` (Note [Accumulating stores])."""
    ranges: tuple[Expr, ...] = ()  # the source's elements: what the kernel loops over
    inner_fn: Callable[[Index], tuple[Index, Any, Any]] = None  # index -> (index into this buffer, value, keep)
    kind = "scatter"


def loop_size(node: Buffer) -> tuple[Expr, ...]:
    """The elements a loop node's kernel walks for it: its own, or a Scatter's source (Note [Accumulating
    stores])."""
    return tuple(node.ranges) if isinstance(node, Scatter) else tuple(node.size)


@dataclass(frozen=True)
class TensorArg:
    """Placeholder for a tensor argument of an Extern/Fallback call: a strided view of a node's buffer."""
    name: str
    size: tuple[Expr, ...]
    stride: tuple[Expr, ...]
    offset: Expr


@dataclass(eq=False)
class Extern(Buffer):
    """A library call (matmul, convolution, attention) on realized buffers."""
    target: Any = None  # the ATen OpOverload
    args: tuple = ()  # pytree with TensorArg leaves
    kwargs: dict = field(default_factory=dict)
    out_stride: tuple[Expr, ...] = ()
    kind = "extern"

    @property
    def stride(self):
        return self.out_stride

    @property
    def inputs(self) -> list[str]:
        leaves = torch.utils._pytree.tree_leaves((self.args, self.kwargs))
        return [leaf.name for leaf in leaves if isinstance(leaf, TensorArg)]


@dataclass(eq=False)
class Fallback(Extern):
    """An ATen op we do not lower: run eagerly, shown as such. Its result may be a tuple (see MultiOutput)."""
    reason: str = ""
    kind = "fallback"


@dataclass(eq=False)
class Template(Extern):
    """A library call the scheduler chose to generate as a kernel of its own (a tiled GEMM), so that its
    elementwise consumers run as the kernel's epilogue (engine/schedule/templates.py). `spec` describes
    the operation in the template's terms (schedule/templates.GemmSpec); `reason` says why it was chosen."""
    spec: Any = None
    reason: str = ""
    kind = "template"


@dataclass(eq=False)
class MultiOutput(Buffer):
    """Element `index` of a Fallback/Extern node that returns several tensors."""
    parent: str = ""
    index: int = 0
    out_stride: tuple[Expr, ...] = ()
    kind = "multi_output"

    @property
    def stride(self):
        return self.out_stride


# Note [Reads of empty tensors]
# A loop over a non-empty output can still name an input with no elements: cat skips one ([3, 0] in
# block_diag), constant_pad_nd pads one. Lowerings select such a value away (where) or clamp the index
# (creation.clamp_index), but no address of an empty tensor is valid, not even a clamped one: its data
# pointer may be null, and the load faults on a GPU and in the Triton interpreter. Any value read from it is
# discarded, so the read is a constant instead of a load: the kernel never touches the empty buffer.


def _has_no_elements(size) -> bool:
    return any(sympy.sympify(s) == 0 for s in size)


# Note [Views are index maps]
# permute, expand, slice, select, unsqueeze, reshape, ... never copy. A TensorValue is a node plus a function
# from the value's index tuple to the node's index tuple; loads go through it. Strided views of a buffer in
# memory can also be handed to library calls: `strided_layout` recovers (stride, offset) when the map is affine.


@dataclass(frozen=True, eq=False)
class TensorValue:
    node: Buffer
    size: tuple[Expr, ...]
    index_map: Callable[[Index], Index] | None = None

    @property
    def dtype(self) -> torch.dtype:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.size)

    def node_index(self, index: Index) -> Index:
        return list(index) if self.index_map is None else list(self.index_map(list(index)))

    def load(self, index: Index):
        if _has_no_elements(self.size) or _has_no_elements(self.node.size):  # Note [Reads of empty tensors]
            return ops.constant(0, compute_dtype(self.dtype))
        return ops.load(self.node.name, tuple(self.node_index(index)))

    def view(self, size: Sequence[Expr], remap: Callable[[Index], Index]) -> "TensorValue":
        inner = self.node_index
        return TensorValue(self.node, tuple(size), lambda idx: inner(remap(idx)))

    def strided_layout(self) -> tuple[tuple[Expr, ...], Expr] | None:
        """(stride, offset) of this view in the node's storage, or None if the view is not strided."""
        symbols = [loop_var("v", d) for d in range(self.ndim)]
        ranges = dict(zip(symbols, self.size))
        flat = simplify_index(self.node.storage_offset(self.node_index(symbols)), ranges)
        # the offset is expanded: strided means every term is a constant or (constant * one loop variable).
        # Read off term by term: differentiating per variable cost more than the rest of lowering together.
        strides = dict.fromkeys(symbols, sympy.Integer(0))
        base = sympy.Integer(0)
        for term in sympy.Add.make_args(flat):
            if not term.free_symbols & strides.keys():
                base += term
                continue
            coefficient, variable = term.as_independent(*symbols, as_Add=False)
            if variable in strides:
                strides[variable] += coefficient
            else:
                return None  # floor/mod of a loop variable, or a product of two: not a strided view
        return tuple(sympy.Integer(0) if self.size[d] == 1 else sympy.expand(strides[s])
                     for d, s in enumerate(symbols)), sympy.expand(base)

    def is_whole_node(self) -> bool:
        """The value is exactly its node's buffer, in the node's own layout."""
        if tuple(self.size) != tuple(self.node.size):
            return False
        layout = self.strided_layout()
        return layout is not None and layout[1] == 0 and all(
            a == b for a, b, n in zip(layout[0], self.node.stride, self.size) if n != 1)

