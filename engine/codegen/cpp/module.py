"""C++/OpenMP code generation: one `extern "C"` function per fused kernel.

Loop shapes (Note [Fused loop shape]; the tiling from engine/schedule/tiling.py):
  pointwise  for xo (OpenMP threads) { for xi (simd) { body; stores } }
  2d tiles   for (yo, xo) blocks (OpenMP threads) { for y { for x (simd) { body; stores } } }
  reduction  for x (OpenMP threads) { pass 1: for r (simd reduction) {...}; ...; last: for r { stores } }
             (engine/codegen/cpp/reduction.py: split accumulators, cascade sums, split reductions)
Values that do not depend on the innermost loop variable are hoisted out of it (loop-invariant code motion
in the printer), so a row's mean or a broadcast bias is computed once per row, not once per element.
"""
from __future__ import annotations

import contextlib
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import sympy

from engine.codegen.cpp.printer import CppKernel, CppPrinter, HalfRows, Staging, finish_kernel, parallel_clause
from engine.codegen.kernel_core import Source, assemble_module, emit_stores
from engine.codegen.cpp.reduction import reduction_kernel
from engine.codegen.cpp.scan import scan_kernel
from engine.ir.indexing import ModIndex, c_index, contiguous_strides, linearize, product, simplify_index, unflatten
from engine.ir.nodes import loop_size
from engine.ir.ops import use_handler
from engine.record import CatPiece, CatPieces
from engine.schedule.fusion import Kernel
from engine.schedule.kernel_plan import KernelPlan
from engine.schedule.tiling import Tiling, choose_tiling

PRELUDE = (Path(__file__).with_name("prelude.h")).read_text()


def generate_kernel(kernel: Kernel, buffers: dict, size_symbols: list[sympy.Symbol]) -> CppKernel:
    plan = kernel.plan
    tiling = choose_tiling(kernel.kind, kernel.nodes, kernel.rows, kernel.red, buffers, kernel.stored)
    if kernel.scans:  # Note [Scans] in ir/nodes.py
        return scan_kernel(kernel, plan, buffers, size_symbols, tiling)
    if kernel.kind == "reduction":
        return reduction_kernel(kernel, plan, buffers, size_symbols, tiling)
    if tiling.choice == "2d":
        return _tiled_kernel(kernel, plan, buffers, size_symbols, tiling)
    return _pointwise_kernel(kernel, plan, buffers, size_symbols, tiling)


def _inner_dims(sizes, most_dims: int | None = None) -> int:
    """How many of the last dims the inner loop walks: while its row is under 64 elements and the sizes are
    numbers, at most `most_dims` of them (Note [Inner loops without gathers]), and always one that is not a 1."""
    inner, dims = sympy.Integer(1), 0
    for size in reversed(sizes):
        if int(inner) >= 64 or not size.is_Integer or most_dims is not None and dims >= most_dims:
            return dims + 1 if inner == 1 else dims
        inner, dims = inner * size, dims + 1
    return dims


def _pointwise_split(sizes, total, most_dims: int | None = None) -> tuple[sympy.Expr, sympy.Expr]:
    """(outer, inner) trip counts of `total` elements over `sizes`: the inner loop walks the last dim(s) so
    that it vectorizes (_inner_dims)."""
    inner = product(sizes[len(sizes) - _inner_dims(sizes, most_dims):])
    outer = sympy.cancel(total / inner)
    if outer.is_Integer and inner.is_Integer and int(outer) < 16 and int(inner) % 1024 == 0 and int(inner) > 4096:
        outer, inner = outer * (inner // 1024), sympy.Integer(1024)  # give the threads work
    return outer, inner


# Note [Scatter kernels in C++]
# A kernel that adds into data-dependent places (Note [Accumulating stores] in ir/nodes.py) runs on one thread
# with a plain `+=`. Threads would need an atomic update for each add, and OpenMP's atomic update of a float
# is a compare-and-swap loop (gcc): the weight gradient of an embedding, 4096 tokens x 256 (1M adds), took
# 7.4 ms on 2 threads with `#pragma omp atomic` and 0.60 ms on one thread without (2 cores shared, load ~4).
# In one thread the adds happen in the source's order, as in the evaluator: the result is deterministic and
# the IR's. The inner loop carries no `omp simd` pragma, which would let two lanes add into one element when
# the index varies along it; where it does not (a row of the embedding), gcc proves the addresses distinct and
# vectorizes the row itself.


def _pointwise_kernel(kernel: Kernel, plan: KernelPlan, buffers, size_symbols, tiling: Tiling) -> CppKernel:
    sizes = _loop_sizes(kernel)
    scatter = kernel.accumulates  # Note [Scatter kernels in C++]: no threads, no simd pragma
    nodes = kernel.stored_nodes
    body, printer = _whole_loops(plan, buffers, nodes, sizes, scatter)
    if printer.inner_gathers and not scatter:  # Note [Inner loops without gathers]
        for most_dims in range(_inner_dims(sizes) - 1, 0, -1):
            if product(sizes[len(sizes) - most_dims:]) < MIN_UNMERGED_INNER:
                break
            fewer = _whole_loops(plan, buffers, nodes, sizes, scatter, most_dims)
            if not fewer[1].inner_gathers:
                body, printer = fewer
                break
    cuts = None if scatter else cat_cuts(printer.index_tests, plan, sizes)
    if cuts is None:
        return finish_kernel(kernel, buffers, body, printer, size_symbols, tiling)
    dim, bounds = cuts  # Note [Cat pieces]: one loop nest per piece, in one parallel region
    body = Source()
    region = parallel_clause(plan.rows, loop=False)
    with body.block(), body.block("", region) if region else contextlib.nullcontext():
        printers = [_pointwise_loops(body, plan, buffers, nodes, sizes, (dim, start, end),
                                     "#pragma omp for nowait" if region else "")
                    for start, end in zip(bounds, bounds[1:])]
    pieces = [CatPiece(range=[start, end], reads=sorted(p.loaded))
              for p, start, end in zip(printers, bounds, bounds[1:])]
    cpp = finish_kernel(kernel, buffers, body, _merged_signature(printers), size_symbols, tiling)
    cpp.pieces = CatPieces(dim=dim, pieces=pieces,
                           reason=f"the output is cut along dim {dim} at {', '.join(map(str, bounds[1:-1]))}, where "
                                  f"its index tests change (a cat's inputs, a pad's edges): one loop nest per piece, "
                                  f"each with those tests decided (Note [Cat pieces])")
    return cpp


# Note [Inner loops without gathers]
# The inner loop walks the output's last dims merged until a row is long (_pointwise_split), which is right
# when every read moves with it. A read that strides differently across the merged dims (a channels-last pool
# of 16 channels: the output walks (w, c) as one row of 16 * W, the input moves 2 * 16 along w) then needs a
# division and a remainder of the loop variable, and gcc turns it into a gather. So where some read divides
# the inner variable, fewer dims are merged, down to the first split where none does, as long as the inner
# loop keeps at least MIN_UNMERGED_INNER elements (two vectors). That max pool went 2.5x faster (issue 29).
MIN_UNMERGED_INNER = 16


def _whole_loops(plan: KernelPlan, buffers, nodes, sizes, scatter: bool, most_dims: int | None = None) -> tuple:
    body = Source()
    with body.block():
        printer = _pointwise_loops(body, plan, buffers, nodes, sizes, None,
                                   "" if scatter else parallel_clause(plan.rows), simd=not scatter,
                                   most_dims=most_dims)
    return body, printer


def _merged_dims(sizes, total) -> int:
    """How many of the last dims _pointwise_split merges into the inner loop."""
    inner = _pointwise_split(sizes, total)[1]
    merged, extent = 0, sympy.Integer(1)
    for size in reversed(sizes):
        if extent == inner or not (extent * size).is_Integer and merged:
            break
        extent, merged = extent * size, merged + 1
    return merged


# Note [Cat pieces]
# A cat (or a pad) is a pointwise node whose body picks its source with tests of one output index against
# constants: `position >= start && position < end` around each input's masked read (Note [Cat and pad read
# one input]). Over the whole output every element pays every test and the chain of selects, and the loads
# behind a test (a clamped address) do not vectorize. But the tests only change at a few cuts along one dim:
# cut there, the output is a few slabs, and in each slab every test has one value. So when the printed body
# compares an output index with constants (the printer keeps each comparison, Note [Folded index tests]) and
# that dim's extent and cuts are static, the kernel is printed again, once per slab: each slab its own loop
# nest (outer x simd inner over the slab, as a plain pointwise kernel) whose tests fold to constants, so the
# body is its one input's read (no clamp: the position is provably in range) and whatever is fused before or
# after it, a copy gcc vectorizes. The slabs share one parallel region with `omp for nowait` loops (their
# writes are disjoint; one fork for the kernel, not one per slab). The tests of the other dims stay (a 2-D
# pad is cut along the dim with the most cuts). Triton keeps the masked form: its masked loads are already
# predicated vector loads, with no branch per element.
# Where it pays: a cat along the dim the inner loop walks (the last), where every element ran the tests and
# read every input through a clamped address (a gather). Whole call, 2 threads, OMP_WAIT_POLICY=passive,
# 2 shared cores at load ~2.5, best median of 5 interleaved rounds: cat of 4 (16, 128, 128) fp32 along the
# last dim 4.47 -> 0.51 ms (eager 0.66, Inductor 0.58); cat([a*2, b+1, c.exp()], -1) of that size 4.81 ->
# 0.70 ms (eager 1.69, Inductor 0.78); 4 (64, 256, 256) along the last dim 171 -> 85 ms (eager 87, Inductor
# 80; DRAM bound). Along an outer dim (dim 1, DenseNet's channels) the tests were already hoisted out of the
# inner loop and the split changes nothing measurable (0.84-1.11x, within the noise).
MAX_PIECES = 32  # a cat of more inputs keeps one loop nest (code size grows with the pieces)


def cat_cuts(tests: list, plan: KernelPlan, sizes) -> tuple[int, list[int]] | None:
    """(dim, [0, cut, ..., extent]) where the kernel's index tests (each `difference >= 0`) change along one
    output dim of static extent; None when no test is such a cut (Note [Cat pieces])."""
    if not tests or sympy.expand(product(sizes) - plan.rows) != 0:  # the slabs must cover the kernel's rows
        return None
    index = [plan.simplify(e) for e in unflatten(plan.x, sizes)]
    strides = contiguous_strides(sizes)
    # also the position along dim d and the dims after it, as one number: a stack is a cat of a flat view
    # ((16, 3, 40) stacked along 1 tests position 40*i1 + i2 against 40 and 80)
    suffixes = [plan.simplify(ModIndex(plan.x, product(sizes[d:])) if d else plan.x) for d in range(len(sizes))]
    cuts: dict[int, set[int]] = {}
    for difference in tests:
        for d, (size, stride, suffix) in enumerate(zip(sizes, strides, suffixes)):
            if not (sympy.sympify(size).is_Integer and sympy.sympify(stride).is_Integer) or index[d].is_Integer:
                continue
            for sign, position in itertools.product((1, -1), {index[d], suffix}):
                rest = sympy.expand(difference - sign * position)
                cut = -sign * int(rest) if rest.is_Integer else None
                step = 1 if position == index[d] else int(stride)
                if cut is not None and cut % step == 0 and 0 < cut // step < int(size):
                    cuts.setdefault(d, set()).add(cut // step)
    if not cuts:
        return None
    dim = max(cuts, key=lambda d: (len(cuts[d]), -d))
    if len(cuts[dim]) + 1 > MAX_PIECES:
        return None
    return dim, [0, *sorted(cuts[dim]), int(sizes[dim])]


def _merged_signature(printers: list[CppPrinter]) -> SimpleNamespace:
    """What finish_kernel reads of a printer (Note [Signature from the printer]), over all the pieces."""
    return SimpleNamespace(loaded=set().union(*(p.loaded for p in printers)),
                           index_symbols=set().union(*(p.index_symbols for p in printers)),
                           # keyed by (loop variable, extent): the pieces share xo/xi, each with its own extent
                           index_ranges={(k, v): v for p in printers for k, v in p.index_ranges.items()})


_TEMPORARY = re.compile(r"const [\w:<>]+ (tmp\d+) = ")
_NAME = re.compile(r"\b(?:tmp|ind)\d+\b")


def _without_unused(hoisted, hoisted_tags, lines, tags, readers):
    """Both scopes of a piece without the temporaries nothing reads (its folded tests' index values): walked
    from the end back, a declaration is kept when a kept line or one of `readers` (the stores, the fp16
    rows' conversions) names it."""
    scoped = [(line, tag, 0) for line, tag in zip(hoisted, hoisted_tags)] + \
        [(line, tag, 1) for line, tag in zip(lines, tags)]
    used = {name for line in readers for name in _NAME.findall(line)}
    kept = []
    for line, tag, scope in reversed(scoped):
        declared = _TEMPORARY.match(line)
        if declared and declared.group(1) not in used:
            continue
        used.update(_NAME.findall(line))
        kept.append((line, tag, scope))
    kept.reverse()
    return ([l for l, _, s in kept if s == 0], [t for _, t, s in kept if s == 0],
            [l for l, _, s in kept if s == 1], [t for _, t, s in kept if s == 1])


def _loop_sizes(kernel: Kernel) -> tuple:
    return tuple(max((loop_size(n) for n in kernel.stored_nodes), key=len, default=()))


def _pointwise_loops(body: Source, plan: KernelPlan, buffers, nodes, sizes, piece, pragma: str,
                     simd: bool = True, most_dims: int | None = None) -> CppPrinter:
    """One loop nest over the output of `sizes` (all of it, or with `piece` = (dim, start, end) the slab
    start <= index[dim] < end of it, Note [Cat pieces]) into `body`: outer (threads) x inner (simd). Returns
    its printer (what the body loaded, for the signature)."""
    piece_sizes = list(sizes)
    if piece is not None:
        piece_sizes[piece[0]] = sympy.Integer(piece[2] - piece[1])
    outer, inner = _pointwise_split(piece_sizes, plan.rows if piece is None else product(piece_sizes), most_dims)
    xo, xi = sympy.Symbol("xo", integer=True, nonnegative=True), sympy.Symbol("xi", integer=True, nonnegative=True)
    xc = sympy.Symbol("xc", integer=True, nonnegative=True)
    ranges = {xo: outer, xi: inner, xc: inner}
    printer = CppPrinter(plan, buffers, xi, ranges)
    position = xo * inner + xi
    if piece is not None:  # the piece's flat position -> the output's: shifted along dim by the piece's start
        index = unflatten(position, piece_sizes)
        index[piece[0]] = index[piece[0]] + piece[1]
        position = simplify_index(linearize(index, sizes), ranges)
    printer.substitution = {plan.x: position}
    printer.half_rows = HalfRows(xi, xc, "xn", HALF_CHUNK)  # Note [Vector half conversions]
    with use_handler(printer):
        stores, store_tags = emit_stores(printer, plan, nodes)
    hoisted, hoisted_tags = printer.take_hoisted()
    rows = printer.half_rows
    if piece is not None:  # the tests that folded leave their operands unused
        readers = stores + [line for line, _ in rows.before + rows.after]
        hoisted, hoisted_tags, printer.lines, printer.line_tags = _without_unused(
            hoisted, hoisted_tags, printer.lines, printer.line_tags, readers)
    simd_pragma = "#pragma omp simd" if simd else ""
    with body.block(f"for (int64_t xo = 0; xo < {c_index(outer)}; ++xo)", pragma):
        body.extend(hoisted, hoisted_tags)
        if not rows.rows:
            with body.block(f"for (int64_t xi = 0; xi < {c_index(inner)}; ++xi)", simd_pragma):
                body.extend(printer.lines, printer.line_tags)
                body.extend(stores, store_tags)
        else:  # the row is walked in chunks that its converted fp16 rows fit
            with body.block(f"for (int64_t xc = 0; xc < {c_index(inner)}; xc += {HALF_CHUNK})"):
                body.add(f"const int64_t xn = std::min<int64_t>({HALF_CHUNK}, {c_index(inner)} - xc);")
                _with_half_rows(body, rows, "for (int64_t xi = xc; xi < xc + xn; ++xi)",
                                printer.lines + stores, printer.line_tags + store_tags, simd_pragma)
    return printer


HALF_CHUNK = 1024  # elements of a 1D kernel's inner loop per chunk when it converts fp16 rows (4 KiB a row)


def _with_half_rows(body: Source, rows: HalfRows, loop: str, lines: list, tags: list,
                    simd: str = "#pragma omp simd") -> None:
    """The inner loop between its fp16 rows' conversions (Note [Vector half conversions])."""
    body.extend([line for line, _ in rows.before], [tag for _, tag in rows.before])
    with body.block(loop, simd):
        body.extend(lines, tags)
    body.extend([line for line, _ in rows.after], [tag for _, tag in rows.after])


# Note [Blocked loops in C++]
# A 2D tiling (Note [Tiling from strides]) walks the output as Y x X in TILE x TILE blocks (tile_side): the threads take
# blocks, and inside a block the inner loop runs along X (the output's contiguous axis, vectorized) while the
# transposed read moves along Y from one inner loop to the next. A block's lines of both arrays stay in the
# L1 cache while it is walked, where whole rows would walk the transposed input a cache line per element.
#
# Note [Whole tiles]
# A tile that is whole (all of them when TILE divides both extents) is emitted on its own, with its ends as
# constants (ye = yo + TILE): gcc then knows every trip count, unrolls the inner loop into whole vectors and
# drops the peeled and masked remainders, which cost as much as the work on a 32-wide row. Partial tiles at
# the edges take the general copy. x.t() + y (1024x1024 fp32, one thread, the kernel alone): 1.0 -> 0.85 ms.
#
# A tile row is one cache line of the output: 16 elements of 4 bytes, 32 of 2 (the side is the same for Y).
# x.t() + y in fp32 took 0.92 ms in 32x32 tiles and 0.58 ms in 16x16 (rows 4 KiB apart: 32 of them overflow
# the 8-way L1 sets they all fall into); a permuted fp16 add took 0.38 ms in 32x32 and 0.41 ms in 16x16.
# Inductor's C++ tiles are the same: 16 floats, 32 halves.
CACHE_LINE = 64


def tile_side(kernel: Kernel) -> int:
    widest = max((n.dtype.itemsize for n in kernel.stored_nodes), default=4)
    return max(16, min(32, CACHE_LINE // widest))


def _tiled_kernel(kernel: Kernel, plan: KernelPlan, buffers, size_symbols, tiling: Tiling) -> CppKernel:
    y, x = sympy.Symbol("y", integer=True, nonnegative=True), sympy.Symbol("x", integer=True, nonnegative=True)
    ya = sympy.Symbol("ya", integer=True, nonnegative=True)
    run = tiling.y if tiling.run is None else tiling.run  # Y as runs, y = ya*run + y (Note [Runs of an axis])
    runs = sympy.cancel(tiling.y / run)
    printer = CppPrinter(plan, buffers, x, {ya: runs, y: run, x: tiling.x})
    printer.substitution = {plan.x: ((ya * run if tiling.run is not None else 0) + y) * tiling.x + x}
    printer.varying_symbols = {x}
    side = tile_side(kernel)
    printer.staging = Staging(y, x, side)  # Note [Staged reads]
    xo = sympy.Symbol("xo", integer=True, nonnegative=True)
    printer.half_rows = HalfRows(x, xo, "xe - xo", side)  # Note [Vector half conversions]
    with use_handler(printer):
        stores, store_tags = emit_stores(printer, plan, kernel.stored_nodes)
    hoisted, hoisted_tags = printer.take_hoisted()
    Y, X = c_index(run), c_index(tiling.x)
    pragma = parallel_clause(tiling.y * tiling.x)
    body = Source()
    with body.block():
        runs_loop = body.block(f"for (int64_t ya = 0; ya < {c_index(runs)}; ++ya)",
                               pragma and pragma + " collapse(3)") if tiling.run is not None else contextlib.nullcontext()
        with runs_loop, body.block(f"for (int64_t yo = 0; yo < {Y}; yo += {side})",
                                   "" if tiling.run is not None else pragma and pragma + " collapse(2)"):
            with body.block(f"for (int64_t xo = 0; xo < {X}; xo += {side})"):
                def tile(whole: bool) -> None:
                    if whole:  # Note [Whole tiles]: the same names, now constants
                        body.add(f"const int64_t ye = yo + {side}, xe = xo + {side};")
                    printer.staging.emit(body, whole=whole)
                    with body.block("for (int64_t y = yo; y < ye; ++y)"):
                        body.extend(hoisted, hoisted_tags)
                        _with_half_rows(body, printer.half_rows, "for (int64_t x = xo; x < xe; ++x)",
                                        printer.lines + stores, printer.line_tags + store_tags)

                if all(_static(extent) is not None and _static(extent) % side == 0 for extent in (run, tiling.x)):
                    tile(True)
                else:
                    body.add(f"const int64_t ye = std::min<int64_t>(yo + {side}, {Y}), "
                             f"xe = std::min<int64_t>(xo + {side}, {X});")
                    with body.block(f"if (ye - yo == {side} && xe - xo == {side})"):
                        tile(True)
                    with body.block("else"):
                        tile(False)
    return finish_kernel(kernel, buffers, body, printer, size_symbols, tiling)


def _static(expr) -> int | None:
    expr = sympy.sympify(expr)
    return int(expr) if expr.is_Integer else None


@dataclass
class CppModule:
    source: str
    kernels: list[CppKernel]
    line_kernel: list  # per source line: (kernel name, LineTag) or None
    autotune: bool = False  # mode="max-autotune": GEMM templates time their tile configs at the first launch
    prelude: str = PRELUDE  # the text the source starts with, precompiled once (Note [Precompiled prelude])
    language = "cpp"
    # once per call, before the kernels: torch's thread count for every parallel region (Note [Kernel threads])
    call_prologue = ("gb_threads()  # kernels run on torch.get_num_threads() threads (Note [Kernel threads])",)

    def launch_text(self, kernel: CppKernel) -> str:
        if hasattr(kernel, "template"):  # a GEMM template: called through gemm_launch.TemplateLaunch
            return kernel.launch_text()
        args = [f"{name}.data_ptr()" for name in kernel.args] + kernel.size_args
        return f"{kernel.name}({', '.join(args)})"


def generate_module(kernels: list[Kernel], buffers: dict, size_symbols: list,
                    mode: str = "default") -> CppModule:
    """All generated kernels of one graph in one translation unit (one g++ call per graph)."""
    from engine.codegen.cpp.gemm import generate_template

    generated = [generate_template(kernel, buffers) if kernel.kind == "template" else
                 generate_kernel(kernel, buffers, size_symbols) for kernel in kernels
                 if kernel.kind in ("pointwise", "reduction", "template")]
    source, line_kernel = assemble_module(PRELUDE.splitlines(), generated, gap=1)
    return CppModule(source, generated, line_kernel, autotune=mode == "max-autotune")
