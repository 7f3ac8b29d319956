"""C++/OpenMP code generation: one `extern "C"` function per fused kernel.

Loop shapes (Note [Fused loop shape]; the tiling from engine/schedule/tiling.py):
  pointwise  for xo (OpenMP threads) { for xi (simd) { body; stores } }
  2d tiles   for (yo, xo) blocks (OpenMP threads) { for y { for x (simd) { body; stores } } }
  reduction  for x (OpenMP threads) { pass 1: for r (simd reduction) {...}; ...; last: for r { stores } }
             (engine/codegen/cpp_reduction.py: split accumulators, cascade sums, split reductions)
Values that do not depend on the innermost loop variable are hoisted out of it (loop-invariant code motion
in the printer), so a row's mean or a broadcast bias is computed once per row, not once per element.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import sympy

from engine.codegen.cpp_printer import CppKernel, CppPrinter, HalfRows, Staging, finish_kernel, parallel_clause
from engine.codegen.kernel_core import Source, emit_stores
from engine.codegen.cpp_reduction import reduction_kernel
from engine.ir.indexing import c_index
from engine.ir.nodes import loop_size
from engine.ir.ops import use_handler
from engine.schedule.fusion import Kernel
from engine.schedule.kernel_plan import KernelPlan
from engine.schedule.tiling import Tiling, choose_tiling

PRELUDE = (Path(__file__).with_name("cpp_prelude.h")).read_text()


def generate_kernel(kernel: Kernel, buffers: dict, size_symbols: list[sympy.Symbol]) -> CppKernel:
    plan = kernel.plan
    tiling = choose_tiling(kernel.kind, kernel.nodes, kernel.rows, kernel.red, buffers, kernel.stored)
    if kernel.kind == "reduction":
        return reduction_kernel(kernel, plan, buffers, size_symbols, tiling)
    if tiling.choice == "2d":
        return _tiled_kernel(kernel, plan, buffers, size_symbols, tiling)
    return _pointwise_kernel(kernel, plan, buffers, size_symbols, tiling)


def _pointwise_split(plan: KernelPlan, kernel: Kernel) -> tuple[sympy.Expr, sympy.Expr]:
    """(outer, inner) trip counts: the inner loop walks the last dim(s) so that it vectorizes."""
    sizes = max((loop_size(n) for n in kernel.stored_nodes), key=len, default=())
    inner = sympy.Integer(1)
    for size in reversed(sizes):
        if inner.is_Integer and int(inner) >= 64 or not (size.is_Integer and inner.is_Integer):
            if inner == 1:
                inner = size
            break
        inner = inner * size
    if inner == 1 and sizes:
        inner = sizes[-1]
    outer = sympy.cancel(plan.rows / inner)
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
    outer, inner = _pointwise_split(plan, kernel)
    xo, xi = sympy.Symbol("xo", integer=True, nonnegative=True), sympy.Symbol("xi", integer=True, nonnegative=True)
    xc = sympy.Symbol("xc", integer=True, nonnegative=True)
    printer = CppPrinter(plan, buffers, xi, {xo: outer, xi: inner, xc: inner})
    printer.substitution = {plan.x: xo * inner + xi}
    printer.half_rows = HalfRows(xi, xc, "xn", HALF_CHUNK)  # Note [Vector half conversions]
    with use_handler(printer):
        stores, store_tags = emit_stores(printer, plan, kernel.stored_nodes)
    hoisted, hoisted_tags = printer.take_hoisted()
    rows = printer.half_rows
    # Note [Scatter kernels in C++]: no threads, no simd pragma (two lanes may add into one element)
    scatter = kernel.accumulates
    simd = "" if scatter else "#pragma omp simd"
    body = Source()
    with body.block():
        with body.block(f"for (int64_t xo = 0; xo < {c_index(outer)}; ++xo)",
                        "" if scatter else parallel_clause(outer * inner)):
            body.extend(hoisted, hoisted_tags)
            if not rows.rows:
                with body.block(f"for (int64_t xi = 0; xi < {c_index(inner)}; ++xi)", simd):
                    body.extend(printer.lines, printer.line_tags)
                    body.extend(stores, store_tags)
            else:  # the row is walked in chunks that its converted fp16 rows fit
                with body.block(f"for (int64_t xc = 0; xc < {c_index(inner)}; xc += {HALF_CHUNK})"):
                    body.add(f"const int64_t xn = std::min<int64_t>({HALF_CHUNK}, {c_index(inner)} - xc);")
                    _with_half_rows(body, rows, "for (int64_t xi = xc; xi < xc + xn; ++xi)",
                                    printer.lines + stores, printer.line_tags + store_tags, simd)
    return finish_kernel(kernel, buffers, body, printer, size_symbols, tiling)


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
    language = "cpp"

    def launch_text(self, kernel: CppKernel) -> str:
        if hasattr(kernel, "template"):  # a GEMM template: called through gemm_launch.TemplateLaunch
            return kernel.launch_text()
        args = [f"{name}.data_ptr()" for name in kernel.args] + kernel.size_args
        return f"{kernel.name}({', '.join(args)})"


def load_kernels(module: CppModule, namespace: dict, device: str = "cpu") -> bool:
    """Compile the module (or take it from the cache) and put one ctypes function per kernel in namespace."""
    import ctypes

    from engine.build import build_library, load_library

    path, cache_hit = build_library(module.source)
    library = load_library(path)
    namespace["_library"] = library  # keeps the shared library loaded as long as the wrapper lives
    for kernel in module.kernels:
        function = getattr(library, kernel.name)
        function.restype = None
        function.argtypes = [ctypes.c_void_p] * len(kernel.args) + [ctypes.c_int64] * len(kernel.size_args)
        if hasattr(kernel, "template"):
            from engine.codegen.cpp_gemm import CppTemplateRunner
            from engine.codegen.gemm_launch import TemplateLaunch

            function.argtypes = [ctypes.c_void_p] * (len(kernel.args) + 1) + [ctypes.c_int64] * 3
            function = TemplateLaunch(kernel, CppTemplateRunner(kernel, function), device,
                                      tune=module.autotune)
        namespace[kernel.name] = function
    return cache_hit


def generate_module(kernels: list[Kernel], buffers: dict, size_symbols: list,
                    mode: str = "default") -> CppModule:
    """All generated kernels of one graph in one translation unit (one g++ call per graph)."""
    lines = PRELUDE.splitlines()
    line_kernel: list = [None] * len(lines)
    generated = []
    from engine.codegen.cpp_gemm import generate_template

    for kernel in kernels:
        if kernel.kind not in ("pointwise", "reduction", "template"):
            continue
        cpp = generate_template(kernel, buffers) if kernel.kind == "template" else \
            generate_kernel(kernel, buffers, size_symbols)
        generated.append(cpp)
        lines.append("")
        line_kernel.append(None)
        for line, tag in zip(cpp.source.splitlines(), cpp.line_tags):
            lines.append(line)
            line_kernel.append((cpp.name, tag))
    return CppModule("\n".join(lines) + "\n", generated, line_kernel, autotune=mode == "max-autotune")
