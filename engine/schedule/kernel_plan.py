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

from dataclasses import dataclass, field
from typing import Any, Callable

import sympy

from engine.ir.indexing import Expr, loop_var, product, simplify_index, unflatten
from engine.ir.nodes import Buffer, Pointwise, Reduction


class NotFusable(Exception):
    pass


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
        if self.role(node) == "full":
            linear = self.x * self.red + self.r if self.is_reduction else self.x
            return [self.simplify(e) for e in unflatten(linear, node.size)]
        return [self.simplify(e) for e in unflatten(self.x, node.size)]

    def rindex(self, node: Reduction) -> list[Expr]:
        return [self.simplify(e) for e in unflatten(self.r, node.reduction_size)]

    def is_current_row(self, node: Reduction, index) -> bool:
        expected = self.index(node)
        return len(expected) == len(index) and all(
            _same(self.simplify(a), b) for a, b in zip(index, expected))


def _same(a, b) -> bool:
    return sympy.expand(a - b) == 0 or sympy.simplify(a - b) == 0


class Inliner:
    """The load rule of Note [Fused loop shape], for any handler that produces values.

    `external(name, index)` answers loads from memory, `accumulator(name)` the value of a reduction of this
    kernel in the current row. Results are memoized per (node, index) so that diamonds in the graph do not
    re-run loop bodies exponentially often."""

    def __init__(self, plan: KernelPlan, external: Callable, accumulator: Callable,
                 on_inline: Callable[[Buffer], Any] | None = None, compute: Callable | None = None):
        self.plan = plan
        self.external = external
        self.accumulator = accumulator
        self.on_inline = on_inline
        self.compute = compute or (lambda node, index: node.inner_fn(list(index)))
        self.memo: dict[tuple, Any] = {}

    def load(self, name: str, index: tuple):
        node = self.plan.by_name.get(name)
        if node is None:
            return self.external(name, index)
        index = tuple(self.plan.simplify(e) for e in index)
        if isinstance(node, Reduction):
            if not self.plan.is_current_row(node, index):
                raise NotFusable(f"{name} is read at another row ({_fmt(index)}), not the current one")
            return self.accumulator(name)
        key = (name, index)
        if key not in self.memo:
            restore = self.on_inline(node) if self.on_inline else None
            try:
                self.memo[key] = self.compute(node, index)
            finally:
                if restore is not None:
                    restore()
        return self.memo[key]


def _fmt(index) -> str:
    return ", ".join(str(i) for i in index)


def kernel_shape(node: Buffer) -> tuple[Expr, Expr] | None:
    """(rows, red) of the loop nest a node needs on its own; None for library and eager calls."""
    if isinstance(node, Reduction):
        return node.numel, node.reduction_numel
    if isinstance(node, Pointwise):
        return node.numel, sympy.Integer(1)
    return None


def group_shape(nodes: list[Buffer]) -> tuple[Expr, Expr]:
    reductions = [n for n in nodes if isinstance(n, Reduction)]
    if reductions:
        return reductions[0].numel, reductions[0].reduction_numel
    return nodes[-1].numel, sympy.Integer(1)  # the last node consumes the others


def describe_size(sizes) -> str:
    return "x".join(str(s) for s in sizes) if len(sizes) else "scalar"


__all__ = ["KernelPlan", "Inliner", "NotFusable", "kernel_shape", "group_shape", "describe_size", "product"]
