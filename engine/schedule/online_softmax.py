"""Online softmax: a row max and a sum of exp(value - max) in one pass instead of two.

Note [Online softmax]
softmax, log_softmax and cross-entropy reduce each row twice: m = max(v), then s = sum(exp(v - m)), and the
second pass needs the first one's result, so a looped kernel reads the row once per pass (plus once more to
write the output). The pair can run in ONE pass with a running max and a rescaled sum: for each element v,
    v > m:  s = s * exp(m - v) + 1,  m = v        otherwise:  s = s + exp(v - m)
(one exp per element), and at the end of the row the lanes' (m, s) pairs combine the same way. Afterwards m
and s are exactly the two reductions' values (up to rounding), so every later use of them is unchanged.

The pattern is recognized on the IR, not on names: the sum's loop body, with the kernel's own pointwise
producers inlined, must be exactly exp(sub(V, M)) where V is the max's loop body and M the max's row value.
Bodies are compared as hash-consed terms (`Terms`), so deep bodies compare without recursion. A later pass
whose reductions are all such sums disappears: its sums join the pass of their max. Backends that loop over
the row (Triton's looped form) use it; a backend that does not records why (engine/codegen/*).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch

from engine.ir.nodes import Reduction
from engine.ir.ops import ARITHMETIC, result_dtype, use_handler
from engine.schedule.kernel_plan import Inliner, KernelPlan

FLOATING = (torch.float32, torch.float64)  # the dtypes the pair accumulates in (half types compute in float32)


@dataclass(frozen=True)
class Term:
    """One value of a loop body: `id` names the operation and its operands (equal ids, equal values)."""
    id: int
    dtype: torch.dtype


class Terms:
    """A handler of the ops protocol that builds hash-consed terms: each distinct (op, operand ids, dtype)
    gets one id, so two bodies compute the same value exactly when their terms have the same id."""

    def __init__(self, plan: KernelPlan, dtypes: dict):
        self.ids: dict[tuple, int] = {}
        self._indirect: dict[tuple, sympy.Symbol] = {}
        self.inliner = Inliner(plan, external=lambda name, index: self.term(("load", name, index), dtypes[name]),
                               accumulator=lambda name: self.term(("row", name), plan.by_name[name].dtype))

    def term(self, key: tuple, dtype) -> Term:
        key = key + (dtype,)
        return Term(self.ids.setdefault(key, len(self.ids)), dtype)

    def load(self, name, index):
        return self.inliner.load(name, tuple(index))

    def constant(self, value, dtype):
        return self.term(("constant", repr(value)), dtype)

    def index_expr(self, expr, dtype):
        return self.term(("index", sympy.sympify(expr)), dtype)

    def to_dtype(self, x, dtype):
        return self.term(("to", x.id), dtype)

    def where(self, cond, a, b):
        return self.term(("where", cond.id, a.id, b.id), a.dtype)

    def masked(self, mask, body, other):
        value = body()
        return self.term(("masked", mask.id, value.id, other.id), value.dtype)

    def indirect(self, value, size):
        key = (value.id, sympy.sympify(size))
        return self._indirect.setdefault(key, sympy.Symbol(f"ind{len(self._indirect)}", integer=True))

    def reduction(self, dtype, src_dtype, reduction_type, value):
        return self.term(("reduction", reduction_type, value.id), dtype)

    def store(self, name, index, value):
        return None

    def store_reduction(self, name, index, value):
        return None

    def store_add(self, name, index, value, mask):
        return None

    def __getattr__(self, name):
        if name in ARITHMETIC:
            return lambda *args: self.term((name,) + tuple(a.id for a in args),
                                           result_dtype(name, [a.dtype for a in args]))
        raise AttributeError(name)


@dataclass(frozen=True)
class OnlinePasses:
    passes: list  # list[list[Reduction]]: the kernel's passes with every matched sum in its max's pass
    pairs: dict  # sum node name -> max node name

    def describe(self) -> str:
        pairs = ", ".join(f"max {m} + sum {s}" for s, m in self.pairs.items())
        return f"online softmax ({pairs}): the max and the sum of exp(x - max) in one pass (Note [Online softmax])"


def online_passes(plan: KernelPlan, passes: list[list[Reduction]], dtypes: dict) -> OnlinePasses:
    """The passes with each pass k+1 made only of sum(exp(V - max)) merged into pass k (Note [Online
    softmax]); `dtypes` maps buffer names to dtypes. Without a match: the passes unchanged, no pairs."""
    if len(passes) < 2 or not any(n.reduction_type == "max" for group in passes for n in group):
        return OnlinePasses(passes, {})
    terms = Terms(plan, dtypes)

    def body(node: Reduction) -> Term:
        with use_handler(terms):
            return node.inner_fn(plan.index(node), plan.rindex(node))

    merged, pairs = [list(passes[0])], {}
    for group in passes[1:]:
        maxima = [(body(n), n) for n in merged[-1] if _floating_max(n)]
        matched = {}
        for node in group:
            target = body(node) if node.reduction_type == "sum" and node.dtype in FLOATING else None
            for value, maximum in maxima:
                if target is not None and node.dtype == maximum.dtype and target == _exp_minus(terms, value, maximum):
                    matched[node.name] = maximum.name
        if matched and len(matched) == len(group):
            merged[-1].extend(group)
            pairs.update(matched)
        else:
            merged.append(list(group))
    return OnlinePasses(merged, pairs)


def _exp_minus(terms: Terms, value: Term, maximum: Reduction) -> Term:
    """exp(value - row value of `maximum`), typed as the ops protocol types it (the operand's dtype: a
    half-precision load minus a float32 row value is computed in float32 and typed as the load)."""
    row = terms.term(("row", maximum.name), maximum.dtype)
    difference = terms.term(("sub", value.id, row.id), result_dtype("sub", [value.dtype, row.dtype]))
    return terms.term(("exp", difference.id), result_dtype("exp", [difference.dtype]))


def _floating_max(node: Reduction) -> bool:
    return node.reduction_type == "max" and node.dtype in FLOATING
