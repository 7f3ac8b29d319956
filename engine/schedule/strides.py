"""A kernel's memory accesses as offsets over its loop variables, and their strides (Note [Tiling from strides]
in tiling.py): what the tiling and the split of reductions decide from.

Note [Strides under symbolic sizes]
A stride is read by putting numbers for the loop variables and taking the difference. Under dynamic shapes the
difference can keep a size symbol (a stride of s1*s2, the floors of a resize's source index); that is no
constant a tiling can use, so it reads as unknown (None) at once instead of asking sympy.simplify to prove it
constant: simplify's time on those floors and Mods has no useful bound (a Segformer decoder's kernels spent
minutes each there, and the model's dynamic compile ran past its time limit). The bounds that index
simplification proves (engine/ir/indexing.py, _provably_less) follow the same rule past SIMPLIFY_OPS: an
unproven bound only leaves an index unsimplified, never wrong.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import sympy

from engine.ir.handlers import AccessRecorder, Var
from engine.ir.indexing import expand
from engine.ir.nodes import Buffer, Reduction
from engine.ir.ops import use_handler
from engine.schedule.kernel_plan import Inliner, KernelPlan


@dataclass(frozen=True)
class Access:
    name: str
    offset: sympy.Expr


def kernel_accesses(nodes: list[Buffer], plan: KernelPlan, buffers: dict, stored: list[str]) -> list[Access]:
    """Every load from memory (in-kernel producers inlined) and every store, as offsets over x and r."""
    inliner = Inliner(plan, external=lambda name, index: Var("load", buffers[name].dtype),
                      accumulator=lambda name: Var("acc", buffers[name].dtype))
    recorder = AccessRecorder(buffers, on_load=inliner.load)
    with use_handler(recorder):
        for node in nodes:
            if isinstance(node, Reduction):
                node.inner_fn(plan.index(node), plan.rindex(node))
            elif node.name in stored:
                node.inner_fn(plan.index(node))
    loads = [(name, index) for name, index in recorder.loads if name not in plan.by_name]
    stores = [(node.name, tuple(plan.index(node))) for node in nodes if node.name in stored]
    result = []
    for name, index in loads + stores:
        try:
            result.append(Access(name, expand(buffers[name].storage_offset(index))))
        except (TypeError, ValueError):  # a data-dependent index (gather): no stride to read
            continue
    return result


# Note [Substituting a symbol]
# The passes that probe offsets (strides here, the runs of tiling.py) put numbers or expressions in for loop
# variables with xreplace, not subs. subs treats what it replaces as a pattern: at every node it first asks
# whether the node matches it (an Add or Mul inside a bigger one, a power's base), then rebuilds; xreplace
# swaps the symbol and rebuilds each node the same way, so for a symbol the two give the same expression
# (checked on every probe of MaxViT-T: 330 distinct, none differs), and xreplace took 0.06 s where subs took
# 0.47 s.
def probe_stride(offset: sympy.Expr, variable: sympy.Symbol, step, others) -> int | None:
    """offset(variable = step) - offset(variable = 0), the other loop variables at 0; None if not a number."""
    return _probe_stride(offset, variable, step, tuple(others))


@functools.lru_cache(maxsize=65536)
def _probe_stride(offset: sympy.Expr, variable: sympy.Symbol, step, others: tuple) -> int | None:
    """Cached by expression: the tiling and the split of reductions probe the same offsets of a kernel along
    the same variables, and substituting into a clamped (Min/Max) offset re-evaluates its comparisons."""
    origin = {v: sympy.Integer(0) for v in others}
    try:  # Note [Substituting a symbol]
        moved = offset.xreplace({**origin, variable: sympy.sympify(step)}) - offset.xreplace(
            {**origin, variable: sympy.Integer(0)})
    except (TypeError, ValueError):
        return None
    moved = expand(moved)
    if moved.free_symbols:
        return None  # Note [Strides under symbolic sizes]
    moved = sympy.simplify(moved)
    return int(moved) if moved.is_Integer else None


def column_access(plan: KernelPlan, accesses: list[Access]) -> tuple[Access, int] | None:
    """The first access contiguous along the outputs and strided along the reduction (a reduction over a
    non-innermost axis), with its stride along the reduction; None when there is none."""
    for access in accesses:
        along_r = probe_stride(access.offset, plan.r, 1, [plan.x])
        along_x = probe_stride(access.offset, plan.x, 1, [plan.r])
        if along_x == 1 and along_r not in (0, 1, None):
            return access, along_r
    return None


def narrowest_column_read(nodes: list[Buffer], plan: KernelPlan, buffers: dict, stored: list[str]) -> int | None:
    """The element size in bytes of the narrowest read of `nodes` along the outputs, strided along the
    reduction (Note [Column splits] in split.py); None when they read no columns."""
    accesses = kernel_accesses(nodes, plan, buffers, stored)
    return min((buffers[a.name].dtype.itemsize for a in accesses if column_access(plan, [a]) is not None),
               default=None)
