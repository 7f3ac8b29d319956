"""How a group of fused IR nodes runs as one loop nest; shared by the scheduler (is this fusion valid?)
and the code generators (what to emit).

Note [Fused loop shape]
A kernel loops over `rows` (variable x) and, when it reduces, over `red` (variable r) inside each row.
Every node of the group has a role:
  reduction  ranges numel == rows, reduced over red: index = unflatten(x, ranges), rindex = unflatten(r, ...)
  full       a pointwise node with rows*red elements: index = unflatten(x*red + r, size)
  row        a pointwise node with rows elements, computed once per row: index = unflatten(x, size)
A load of a pointwise node of the same group is inlined (its inner_fn runs at the load's index, so any
index is valid). A load of a reduction of the same group is only valid at the current row: its value is
the row's accumulator. That one rule decides whether an epilogue can join a reduction's kernel.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy

from engine.ir.indexing import Expr, loop_var, product, simplify_index, unflatten
from engine.ir.nodes import Buffer, Reduction, Scan, Scatter, loop_size
from engine.ir.ops import ops


class NotFusable(Exception):
    pass


# A reduction row of at most this many elements (a static count) is held whole in one block: Triton's
# persistent form keeps it in registers (Note [Triton kernel shapes] in codegen/triton/kernel.py), and a C++ thread's
# row stays in its L1/L2 cache between passes. The scheduler lets such rows take any number of passes (Note
# [Persistent chains] in policy.py).
PERSISTENT_ROW = 8192


@dataclass
class KernelPlan:
    nodes: list[Buffer]
    rows: Expr
    red: Expr
    x: sympy.Symbol = field(default_factory=lambda: loop_var("x", 0))
    r: sympy.Symbol = field(default_factory=lambda: loop_var("r", 0))

    def __post_init__(self):
        self.by_name = {n.name: n for n in self.nodes}

    @property
    def is_reduction(self) -> bool:
        return any(isinstance(n, Reduction) for n in self.nodes)

    @property
    def ranges(self) -> dict:
        return {self.x: self.rows, self.r: self.red}

    def role(self, node: Buffer) -> str:
        if isinstance(node, Reduction):
            return "reduction"
        if not self.is_reduction or _same(node.numel, self.rows * self.red) and not _same(self.red, 1):
            return "full"
        return "row"

    def simplify(self, expr: Expr) -> Expr:
        return simplify_index(expr, self.ranges)

    def index(self, node: Buffer) -> list[Expr]:
        """Where `node` is computed when the kernel stores it."""
        size = loop_size(node)  # a Scatter is computed at its source's elements (Note [Accumulating stores])
        if self.role(node) == "full":
            linear = self.x if _same(self.red, 1) else self.x * self.red + self.r
            return [self.simplify(e) for e in unflatten(linear, size)]
        return [self.simplify(e) for e in unflatten(self.x, size)]

    def rindex(self, node: Reduction) -> list[Expr]:
        return [self.simplify(e) for e in unflatten(self.r, node.reduction_size)]

    def is_current_row(self, node: Buffer, index) -> bool:
        expected = self.index(node)
        return len(expected) == len(index) and all(
            _same(self.simplify(a), b) for a, b in zip(index, expected))


# Note [Kernel body]
# A kernel's body is written in the ops protocol from three steps, which every backend runs in the order its
# loop structure needs (Note [Kernel structure ops]):
#   reduce_node     in a reduction pass: the node's loop body at (row, r), then ops.reduction -> the row's value
#   store_node      a pointwise node computed at the kernel's index for it, then ops.store
#   store_row_value a reduction's row value (or a per-row pointwise node), stored once per row
# `reduction_passes` groups a kernel's reductions once: pass k needs the results of pass k-1.


def reduce_node(plan: KernelPlan, node: Reduction):
    value = node.inner_fn(plan.index(node), plan.rindex(node))
    return ops.reduction(node.dtype, node.src_dtype, node.reduction_type, value)


def store_node(plan: KernelPlan, node: Buffer) -> None:
    index = plan.index(node)
    if isinstance(node, Scan):  # its running value at this element (Note [Scan kernels] in policy.py)
        ops.store(node.name, index, ops.load(node.name, tuple(index)))
        return
    if isinstance(node, Scatter):  # its value goes where its body says, added (Note [Accumulating stores])
        target, value, keep = node.inner_fn(index)
        ops.store_add(node.name, target, value, keep)
        return
    ops.store(node.name, index, node.inner_fn(index))


def store_row_value(plan: KernelPlan, node: Buffer, accumulators: dict) -> None:
    if isinstance(node, Reduction):
        ops.store_reduction(node.name, plan.index(node), accumulators[node.name])
    else:
        store_node(plan, node)


def reduction_passes(nodes: list[Buffer], reads: Callable[[Buffer], list[str]]) -> list[list[Reduction]]:
    """The reductions of a kernel grouped by how many reductions feed them (`reads(node)`: buffer names)."""
    names = {n.name for n in nodes}
    depth: dict[str, int] = {}
    for node in nodes:
        inputs = [depth.get(r, 0) for r in reads(node) if r in names]
        depth[node.name] = max(inputs, default=0) + (1 if isinstance(node, Reduction) else 0)
    passes: dict[int, list[Reduction]] = {}
    for node in nodes:
        if isinstance(node, Reduction):
            passes.setdefault(depth[node.name], []).append(node)
    return [passes[k] for k in sorted(passes)]


@functools.lru_cache(maxsize=65536)
def _same(a, b) -> bool:
    """Cached by expression: every fusion candidate of a kernel asks again whether its reads are the current
    row, and simplify on a clamped (Min/Max) index costs ~0.2 s (Swin: 4934 calls, 16 distinct reach it)."""
    difference = sympy.expand(a - b)
    if difference == 0:
        return True
    if _nonzero_somewhere(difference):
        return False  # simplify cannot make it 0: it returns an equal expression (and ~0.04 s saved a call)
    return sympy.simplify(difference) == 0


def _nonzero_somewhere(difference) -> bool:
    """Whether the difference is a nonzero integer at one point that every symbol's assumptions allow (each
    symbol an integer of unknown or nonnegative sign, set to a distinct large value)."""
    symbols = sorted(difference.free_symbols, key=lambda s: s.name)
    if not all(s.is_integer and s.is_nonpositive is not True and s.is_zero is not True for s in symbols):
        return False
    try:
        value = difference.subs({s: 1009 + 101 * k for k, s in enumerate(symbols)})
    except (TypeError, ValueError, ZeroDivisionError):
        return False
    return bool(value.is_Integer and value != 0)


# Note [Iterative inlining]
# A kernel inlines its own pointwise nodes: a load of one runs that node's loop body at the load's index, whose
# loads run their producers' bodies, and so on. Done by plain recursion, a chain of n fused ops nests about
# 8n Python frames (a 150-op chain exceeded Python's recursion limit). Instead the Inliner computes a producer
# with an explicit stack: inside a producer's body, a load of another not-yet-computed producer raises
# `_Needs(key)`, which unwinds only that body; the stack computes the needed producer first, then runs the
# interrupted body again. The handler's common-subexpression cache makes the rerun emit nothing twice (the
# ops it already issued return the same values), so each body runs at most once per producer it waits for,
# and the Python stack stays flat however long the chain.


class _Needs(BaseException):  # BaseException: no `except Exception` in a loop body may swallow it
    def __init__(self, key):
        self.key = key


class Inliner:
    """The load rule of Note [Fused loop shape], for any handler that produces values.

    `external(name, index)` answers loads from memory, `accumulator(name)` the value of a reduction of this
    kernel in the current row. Results are memoized per (node, index) so that diamonds in the graph do not
    re-run loop bodies exponentially often; producers are computed iteratively (Note [Iterative inlining])."""

    def __init__(self, plan: KernelPlan, external: Callable, accumulator: Callable,
                 on_inline: Callable[[Buffer], Any] | None = None, compute: Callable | None = None):
        self.plan = plan
        self.external = external
        self.accumulator = accumulator
        self.on_inline = on_inline
        self.compute = compute or (lambda node, index: node.inner_fn(list(index)))
        self.memo: dict[tuple, Any] = {}
        self._computing = False  # inside a producer's body (a nested miss raises _Needs)

    def load(self, name: str, index: tuple):
        node = self.plan.by_name.get(name)
        if node is None:
            return self.external(name, index)
        index = tuple(self.plan.simplify(e) for e in index)
        if isinstance(node, Reduction):
            if not self.plan.is_current_row(node, index):
                raise NotFusable(f"{name} is read at another row ({_fmt(index)}), not the current one")
            return self.accumulator(name)
        if isinstance(node, Scan):  # its running value exists at the element being walked only
            if not self.plan.is_current_row(node, index):
                raise NotFusable(f"{name} is a scan read at another element ({_fmt(index)}), not the one "
                                 f"being walked")
            return self.accumulator(name)
        key = (name, index)
        if key not in self.memo:
            if self._computing:
                raise _Needs(key)
            self._compute_from(key)
        return self.memo[key]

    def _compute_from(self, first: tuple) -> None:
        stack = [first]
        while stack:
            key = stack[-1]
            if key in self.memo:
                stack.pop()
                continue
            node = self.plan.by_name[key[0]]
            restore = self.on_inline(node) if self.on_inline else None
            self._computing = True
            try:
                self.memo[key] = self.compute(node, key[1])
                stack.pop()
            except _Needs as needs:
                if needs.key in stack:
                    raise RuntimeError(f"{needs.key[0]} reads itself through the kernel's nodes") from None
                stack.append(needs.key)
            finally:
                self._computing = False
                if restore is not None:
                    restore()


def _fmt(index) -> str:
    return ", ".join(str(i) for i in index)


def group_shape(nodes: list[Buffer]) -> tuple[Expr, Expr]:
    reductions = [n for n in nodes if isinstance(n, Reduction)]
    if reductions:
        return reductions[0].numel, reductions[0].reduction_numel
    return product(loop_size(nodes[-1])), sympy.Integer(1)  # the last node consumes the others


def describe_size(sizes) -> str:
    return "x".join(str(s) for s in sizes) if len(sizes) else "scalar"


__all__ = ["KernelPlan", "Inliner", "NotFusable", "group_shape", "describe_size", "product",
           "reduce_node", "store_node", "store_row_value", "reduction_passes"]
