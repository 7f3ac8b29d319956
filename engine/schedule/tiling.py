"""Tiling: how a kernel walks memory, chosen from the strides in its index expressions, with a reason.

Note [Tiling from strides]
A kernel's loads and stores are sympy offsets over its loop variables (x: the output position, r: the
reduction position; Note [Fused loop shape]). The stride of an access along a variable is probed: the offset
one step away minus the offset at the origin (exact for an affine offset, and the local stride for the
floor/mod of reshapes and permutes). Loads that do not move with the variable (broadcasts) do not count.

pointwise  "1d"      every access moves with stride 1 along the output's last dim: one axis of blocks.
           "2d"      a load is contiguous along another output dim d (a transpose, a permute, NCHW <-> NHWC)
                     while the output is written along its last: the output splits into Y = dims 0..d and
                     X = dims d+1.. (the flat index is y * X + x), and a [Y, X] tile reads the transposed
                     input coalesced along Y and writes the output coalesced along X.
reduction  "row"     the reduction runs along stride 1 (a softmax row): a program or a thread owns rows.
           "column"  a load is contiguous along the outputs and strided along the reduction (x.sum(0), a
                     mean over the batch, a norm over dim 1 of NCHW): a tile of many outputs times a few
                     reduction steps reads it coalesced, and walks the reduction in a loop.
           "split"   few outputs, a long reduction (a full sum, a column sum of a few columns): the reduction
                     is split so that all threads take part (Triton: two kernels, Note [Split reductions on
                     the GPU]; C++: one kernel over the threads, Note [Split reductions in C++]).
A backend that has no form for a choice records what it does instead, and why.

Note [Runs of an axis]
A flat loop variable over several dims (the outputs of x.sum(1) over NCHW are n*H*W + h*W + w) reaches memory
through divisions and remainders: 200704*(x / 3136) + 56*((x / 56) % 56) + x % 56. Inside a loop that
vectorizes along x, those stop the vectorizer (the C++ column kernel of that sum gathered every element and
ran 66x slower than Inductor's). Written x = a*E + i for E a product of the innermost dims (here E = H*W =
3136), the same offset is 200704*a + i: affine along i. `contiguous_run` finds the longest such E for every
access of a kernel; the loops then walk the axis as runs of E (a tile never crosses a run), with the divisions
of a done once per run. E is the whole axis when the offsets are affine already or when no shorter run helps.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from engine.ir.indexing import FloorDiv, ModIndex, contiguous_strides, expand, product, simplify_index
from engine.ir.nodes import Buffer, Reduction, Scan, Scatter
from engine.record import TileShape, TilingRecord
from engine.schedule.kernel_plan import KernelPlan
from engine.schedule.policy import wants_split
from engine.schedule.split import SplitCombine, SplitPartials
from engine.schedule.strides import Access, column_access, kernel_accesses, probe_stride

TILE_MIN = 16  # a side shorter than this does not pay for a second tile axis


@dataclass(frozen=True)
class Tiling:
    choice: str  # 1d | 2d | row | column | split
    reason: str
    y: sympy.Expr = sympy.Integer(1)  # 2d: the Y extent (dims 0..d of the output, flattened) ...
    x: sympy.Expr = sympy.Integer(1)  # ... and the X extent (dims d+1..)
    run: sympy.Expr | None = None  # 2d: along Y, column: along the outputs (Note [Runs of an axis]); None: whole
    columns: bool = False  # split: the stage reads along its outputs, walked as column tiles (Note [Column splits])

    def record(self) -> TilingRecord:
        return TilingRecord(choice=self.choice, reason=self.reason,
                            tile=TileShape(y=str(self.y), x=str(self.x)) if self.choice == "2d" else None,
                            run=str(self.run) if self.run is not None else None, columns=True if self.columns else None)


# Note [Affine offsets stay so]
# contiguous_run asks, for each candidate run, whether every offset is affine in i once variable = a*E + i. An
# offset already affine in the variable (no floor or remainder holds it) always is: the substitution leaves every
# floor and remainder as it was, and simplify_index only rewrites floors and remainders, so i stays outside them.
# Only the other offsets are substituted and simplified (and, for a 2D tile, written over y and x at all): on
# MaxViT-T that sympy work was a tenth of lower..codegen, most of it on contiguous loads that cannot fail.
def _affine_in(expr: sympy.Expr, variable: sympy.Symbol) -> bool:
    return not any(variable in atom.free_symbols for atom in expr.atoms(FloorDiv, ModIndex))


def contiguous_run(offsets: list[sympy.Expr], variable: sympy.Symbol, sizes, others: dict) -> sympy.Expr | None:
    """The longest run E (a product of the innermost of `sizes`, the dims `variable` walks flattened, outermost
    first) such that every offset is affine in i when variable = a*E + i (Note [Runs of an axis]); None when
    the offsets are affine in `variable` already, or when no run of at least TILE_MIN elements makes them so.
    `others`: the ranges of the offsets' other loop variables."""
    offsets = [offset for offset in offsets if not _affine_in(offset, variable)]  # Note [Affine offsets stay so]
    if not offsets:
        return None
    sizes = [sympy.sympify(s) for s in sizes if _static(s) != 1]
    total = product(sizes)
    run_index = sympy.Symbol("run_index", integer=True, nonnegative=True)
    within = sympy.Symbol("within_run", integer=True, nonnegative=True)
    for k in range(1, len(sizes)):
        run = product(sizes[k:])
        if _static(run) is not None and _static(run) < TILE_MIN:
            break
        ranges = {**others, run_index: sympy.cancel(total / run), within: run}
        # (xreplace: Note [Substituting a symbol] in strides.py)
        moved = [simplify_index(expand(offset.xreplace({variable: run_index * run + within})), ranges)
                 for offset in offsets]
        if all(_affine_in(offset, within) for offset in moved):
            return run
    return None


def _run_note(run: sympy.Expr | None, axis: str) -> str:
    if run is None:
        return ""
    return (f"; {axis} form runs of {run} inside which every index is affine (Note [Runs of an axis]); the C++ "
            f"loops walk the runs, with no division or remainder in the inner loop")


def _static(expr) -> int | None:
    expr = sympy.sympify(expr)
    return int(expr) if expr.is_Integer else None


def choose_tiling(kind: str, nodes: list[Buffer], rows, red, buffers: dict, stored: list[str]) -> Tiling:
    scatters = [n.name for n in nodes if isinstance(n, Scatter)]
    if scatters:  # Note [Accumulating stores]: its stores go where its data says, with no stride to tile by
        return Tiling("1d", f"adds into {', '.join(scatters)} at data-dependent places (an atomic add): blocks "
                            f"along its source's elements")
    scans = [n.name for n in nodes if isinstance(n, Scan)]
    if scans:  # Note [Scan kernels] in policy.py
        return Tiling("scan", f"{', '.join(scans)} scan(s) each row of {red} elements in order: rows of it per "
                              f"program or thread, the epilogue stored as the walk reaches each element")
    plan = KernelPlan(nodes, rows, red)
    accesses = kernel_accesses(nodes, plan, buffers, stored)
    if kind == "reduction":
        return _split_stage(nodes, plan, accesses) or _reduction_tiling(plan, accesses)
    return _pointwise_tiling(plan, nodes, stored, accesses)


def _pointwise_tiling(plan: KernelPlan, nodes, stored, accesses: list[Access]) -> Tiling:
    outputs = [n for n in nodes if n.name in stored]
    size = max((n.size for n in outputs), key=len, default=())
    if len(size) < 2:
        return Tiling("1d", "one output dim: blocks along it")
    strides = contiguous_strides(size)
    last = len(size) - 1
    for access in accesses:
        along_last = probe_stride(access.offset, plan.x, 1, [plan.r])
        if along_last in (0, 1) or along_last is None:
            continue
        for d in range(last - 1, -1, -1):
            if _static(size[d]) == 1:
                continue
            if probe_stride(access.offset, plan.x, strides[d], [plan.r]) == 1:
                x_extent, y_extent = product(size[d + 1:]), product(size[:d + 1])
                small = [e for e in (x_extent, y_extent) if _static(e) is not None and _static(e) < TILE_MIN]
                if small:
                    return Tiling("1d", f"{access.name} is contiguous along dim {d}, not the last, but a tile side "
                                        f"would be {small[0]} (< {TILE_MIN}): blocks along the output")
                run = _tile_run(plan, accesses, size[:d + 1], x_extent)
                return Tiling("2d", f"{access.name} is contiguous along dim {d} of the output but strided "
                                    f"({along_last}) along the last dim, which the output is written along: the "
                                    f"output is walked as Y={y_extent} x X={x_extent} in 2D tiles, coalesced "
                                    f"along Y for the read and along X for the write" + _run_note(run, "the rows of Y"),
                              y_extent, x_extent, run)
    return Tiling("1d", "every access is contiguous (or broadcast) along the output's last dim")


def _tile_run(plan: KernelPlan, accesses: list[Access], y_sizes, x_extent) -> sympy.Expr | None:
    """The run along Y of a 2D tile whose flat index is y*X + x (Note [Runs of an axis])."""
    y = sympy.Symbol("tile_y", integer=True, nonnegative=True)
    x = sympy.Symbol("tile_x", integer=True, nonnegative=True)
    offsets = [expand(a.offset.xreplace({plan.x: y * x_extent + x}))  # (as in contiguous_run)
               for a in accesses if not _affine_in(a.offset, plan.x)]  # Note [Affine offsets stay so]
    return contiguous_run(offsets, y, y_sizes, {x: x_extent, plan.r: plan.red})


def _split_stage(nodes: list[Buffer], plan: KernelPlan, accesses: list[Access]) -> Tiling | None:
    """A stage of a split reduction (Note [Split reductions on the GPU], Note [Column splits]); None for any
    other kernel, before its accesses are probed (most reductions are not split stages)."""
    if not any(isinstance(node, (SplitPartials, SplitCombine)) for node in nodes):
        return None
    column = column_access(plan, accesses)
    walk = "" if column is None else (f"; {column[0].name} is contiguous along the stage's outputs and strided "
                                      f"({column[1]}) along its reduction: column tiles")
    for node in nodes:
        if isinstance(node, SplitPartials):
            return Tiling("split", f"stage 1 of 2 of {node.split_of}'s split reduction: {node.parts} partial results "
                                   f"per output, each reducing {node.chunk} elements, into the workspace "
                                   f"{node.name} (part-major), so that the GPU is filled" + walk,
                          columns=column is not None)
        if isinstance(node, SplitCombine):
            return Tiling("split", f"stage 2 of 2 of {node.split_of}'s split reduction: each output combines its "
                                   f"{node.parts} partial results, then the epilogue" + walk,
                          columns=column is not None)
    return None


def _reduction_tiling(plan: KernelPlan, accesses: list[Access]) -> Tiling:
    rows, red = _static(plan.rows), _static(plan.red)
    if wants_split(plan.rows, plan.red):
        return Tiling("split", f"{rows} output(s), each reducing {red} elements: a split reduction, so that "
                               f"every thread takes part")
    column = column_access(plan, accesses)
    if column is not None:
        (access, along_r), output_sizes = column, next(n.size for n in plan.nodes if isinstance(n, Reduction))
        run = contiguous_run([a.offset for a in accesses], plan.x, output_sizes, {plan.r: plan.red})
        return Tiling("column", f"{access.name} is contiguous along the outputs and strided ({along_r}) "
                                f"along the reduction: tiles of many outputs x a few reduction steps read "
                                f"it coalesced" + _run_note(run, "the outputs"), run=run)
    return Tiling("row", "the reduction runs along stride 1 (or its reads are broadcast): rows of it per "
                         "program or thread")
