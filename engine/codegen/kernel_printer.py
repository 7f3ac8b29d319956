"""What every kernel printer shares: two scopes (the innermost loop and the code hoisted above it),
provenance tags per line, one temporary per distinct expression, index simplification, the structure ops'
bookkeeping (stores, a pass's reductions) and the inlining rule of Note [Fused loop shape]. A backend's
printer adds its spelling table and hooks: `new_var`, `declare`, `row_value`, the index text, loads, stores."""
from __future__ import annotations

import functools
from typing import Callable

import sympy
import torch

from engine.codegen.provenance import LineTag
from engine.ir.handlers import TextHandler, Var
from engine.ir.indexing import simplify_index
from engine.ir.nodes import Buffer
from engine.schedule.kernel_plan import Inliner, KernelPlan


# Arithmetic that C++ and Triton (Python) spell as the same infix operator; each printer's spelling table
# takes these and adds its own (Note [Spelling tables]).
INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
         "ge": ">=", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "left_shift": "<<",
         "right_shift": ">>"}


def infix(symbol: str):
    return lambda p, a, b: f"{a} {symbol} {b}"


def shared_unary(one: Callable, logical_not: Callable, float_signbit: Callable) -> dict:
    """The unary spellings C++ and Triton share, but for three small printers of a value `a`: the constant 1
    in its type, logical negation, and the sign bit of a float (an integer's is `a < 0` in both)."""
    return {
        "neg": lambda p, a: f"-{a}",
        "reciprocal": lambda p, a: f"{one(a)} / {a}",
        "square": lambda p, a: f"{a} * {a}",
        "logical_not": lambda p, a: logical_not(a),
        "bitwise_not": lambda p, a: logical_not(a) if a.dtype == torch.bool else f"~{a}",
        "isnan": lambda p, a: f"{a} != {a}",
        "signbit": lambda p, a: float_signbit(a) if a.dtype.is_floating_point else f"{a} < 0",
    }


class KernelPrinter(TextHandler):
    """Lines that vary along the innermost loop go to `lines`; the rest to `hoisted`, emitted above the loop
    (loop-invariant code motion). Loads of the kernel's own nodes go through `self.inliner`."""

    def __init__(self, plan: KernelPlan, buffers: dict, compute: Callable | None = None,
                 index_ranges: dict | None = None):
        super().__init__()
        self.plan = plan
        self.buffers = buffers
        self.hoisted: list[str] = []
        self.hoisted_tags: list = []
        self.accumulators: dict = {}
        self.substitution: dict = {}  # plan variable -> the kernel's own loop expression (C++'s loops)
        self.index_ranges = plan.ranges if index_ranges is None else index_ranges  # loop variable -> extent
        self.stores: list[tuple[str, object]] = []  # (line, tag) from ops.store / ops.store_reduction
        self.pass_reductions: list[tuple] = []  # ops.reduction calls of the pass being emitted
        # what the kernel's signature is made of (Note [Signature from the printer] in kernel_core.py)
        self.loaded: set[str] = set()  # buffers the body reads from memory (each backend's _load_memory adds)
        self.index_symbols: set = set()  # symbols of every index the body prints
        self._new_inliner = lambda: Inliner(plan, external=self._load_memory,
                                            accumulator=lambda name: self.accumulators[name],
                                            on_inline=self._enter_node, compute=compute)
        self.inliner = self._new_inliner()
        self.mask: Var | None = None  # the condition of the masked() body being printed (Note [Masked loads])
        self._inliners: dict = {None: self.inliner}  # one per mask (Note [Inlining under a mask])

    # -- hooks ----------------------------------------------------------------------------------------------
    def _load_memory(self, name, index):
        raise NotImplementedError

    def new_var(self, name: str, dtype, where) -> Var:
        """A value named `name`; `where` is the backend's description of what it varies along."""
        raise NotImplementedError

    def row_value(self, node: str, dtype, reduction_type: str) -> Var:
        """The value a reduction of the current pass has once its row is reduced."""
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------------------------
    def load(self, name, index):
        return self.inliner.load(name, index)

    # Note [Inlining under a mask]
    # A producer inlined into a masked() body computes under the mask (its loads are masked too), so its value
    # there is not the value at the same index outside the body: each mask gets its own Inliner, whose memo
    # holds the values computed under it. Its own stack also resolves the body's nested producers (Note
    # [Iterative inlining]) without leaving the body: a miss of the outer inliner would be computed outside
    # the mask.
    def masked(self, mask, body, other):
        if mask.name in ("True", "true"):
            return body()
        outer, outer_inliner = self.mask, self.inliner
        self.mask = mask if outer is None else self.logical_and(outer, mask)
        if self.mask not in self._inliners:
            self._inliners[self.mask] = self._new_inliner()
        self.inliner = self._inliners[self.mask]
        try:
            value = body()
        finally:
            self.mask, self.inliner = outer, outer_inliner
        return self.masked_value(mask, value, other)

    def masked_value(self, mask, value, other):
        """The body's value where `mask` holds, the value `other` elsewhere."""
        if value == other:  # a body that reads nothing and gives `other` (a scatter into zeros: its zeros)
            return value
        return self.where(mask, value, other)

    def emit(self, text, dtype, *where):
        """One temporary per distinct (text, dtype): an expression computed twice is read from the first."""
        key = (text, dtype)
        if key in self._cache:
            return self._cache[key]
        var = self.new_var(next(self._names), dtype, *where)
        self.add_line(self.declare(var, text), var.varying)
        self._cache[key] = var
        return var

    def simplified(self, expr) -> sympy.Expr:
        """An index over the kernel's loop variables, simplified for their ranges."""
        expr = _substituted(sympy.sympify(expr), tuple(self.substitution.items()))
        expr = simplify_index(expr, self.index_ranges)
        self.index_symbols |= expr.free_symbols
        return expr

    def store_reduction(self, name, index, value):
        self.store(name, index, value)

    def reduction(self, dtype, src_dtype, reduction_type, value):
        """Declares a reduction of the current pass; the backend emits its accumulator (run_pass's caller)."""
        node = self.tag.ir_node
        self.pass_reductions.append((node, dtype, src_dtype, reduction_type, value))
        return self.row_value(node, dtype, reduction_type)

    def add_line(self, line: str, varying: bool) -> None:
        (self.lines if varying else self.hoisted).append(line)
        (self.line_tags if varying else self.hoisted_tags).append(self.tag)

    def start_inner_loop(self) -> None:
        """Forget values computed inside the previous inner loop (they are out of scope now)."""
        self._cache = {k: v for k, v in self._cache.items() if not v.varying}
        self._indirect_cache = {k: v for k, v in self._indirect_cache.items() if not v[1]}
        for inliner in self._inliners.values():
            inliner.memo = {k: v for k, v in inliner.memo.items() if not getattr(v, "varying", True)}
        self.lines, self.line_tags = [], []

    def take_hoisted(self) -> tuple[list[str], list]:
        lines, tags = self.hoisted, self.hoisted_tags
        self.hoisted, self.hoisted_tags = [], []
        return lines, tags

    def _enter_node(self, node: Buffer):
        previous = self.tag
        self.tag = LineTag(node.name)
        return lambda: setattr(self, "tag", previous)


@functools.lru_cache(maxsize=65536)
def _substituted(expr: sympy.Expr, substitution: tuple) -> sympy.Expr:
    """A plan index in the kernel's own loop variables, expanded; cached by expression: every store and load
    of a kernel asks it again for the same index, and subs re-evaluates a clamped (Min/Max) index."""
    if substitution:
        expr = expr.subs(dict(substitution))
    return sympy.expand(expr)
