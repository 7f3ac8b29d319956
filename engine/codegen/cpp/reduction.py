"""C++ reduction kernels: a row loop on the threads, one pass per group of reductions over each row, split
accumulators summed in a cascade, split reductions over the threads for few long rows, and reductions over a
non-innermost axis as column tiles (Note [Column tiles in C++])."""
from __future__ import annotations

from dataclasses import dataclass, replace

import sympy

from engine.codegen.cpp.printer import (THREADS, CppKernel, CppPrinter, Staging, c_constant, c_type, finish_kernel,
                                       parallel_clause)
from engine.codegen.kernel_core import (FLAG_REDUCTIONS, Source, accumulator_type, emit_epilogue, emit_stores, run_pass,
                                        stores_by_role)
from engine.codegen.provenance import LineTag
from engine.ir.handlers import Var
from engine.ir.indexing import FloorDiv, c_index
from engine.ir.nodes import Buffer, Reduction
from engine.ir.ops import use_handler
from engine.schedule.fusion import Kernel
from engine.schedule.kernel_plan import Inliner, KernelPlan
from engine.schedule.online_softmax import online_passes
from engine.schedule.policy import MAX_REDUCTION_PASSES
from engine.schedule.tiling import Tiling

# Note [Reductions in C++]
# Sums, products, min/max and any/all use an OpenMP simd reduction clause, so the inner loop vectorizes.
# max/min must propagate NaN like torch.amax: the vector loop tracks "saw a NaN" beside the running max.
# argmax/argmin keep (best value, first index) and run as a plain loop.
# Flags (NaN seen, any, all) accumulate in an int with | and &: a bool reduction with || stops gcc from
# vectorizing the loop (measured: 10 ms vs 0.8 ms for a 2048x2048 row max).
SIMD_CLAUSE = {"sum": "+", "prod": "*", "max": "max", "min": "min", "any": "|", "all": "&"}


def reduction_kernel(kernel: Kernel, plan: KernelPlan, buffers, size_symbols, tiling: Tiling) -> CppKernel:
    passes = kernel.passes
    if tiling.choice == "column" and _column_tiles_fit(kernel, plan, passes):
        return _column_kernel(kernel, plan, buffers, size_symbols, tiling, passes[0])
    if tiling.choice == "split" and _column_tiles_fit(kernel, plan, passes) and \
            _few_columns(kernel, plan, buffers) is not None:  # Note [Split column tiles in C++]
        column = _few_columns(kernel, plan, buffers)
        tiling = Tiling("split", tiling.reason + f"; C++: {column[0].name} is contiguous along the outputs and "
                        f"strided ({column[1]}) along the reduction: column tiles, their reduction chunks on the "
                        f"threads (Note [Split column tiles in C++])")
        return _column_kernel(kernel, plan, buffers, size_symbols, tiling, passes[0], split=True)
    if tiling.choice == "column":
        tiling = Tiling("column", tiling.reason + "; C++: not tiled (several passes or an argmax), a thread per "
                                                  "output walks the reduction, runs unused")
    if online_passes(plan, passes, {name: b.dtype for name, b in buffers.items()}).pairs:
        tiling = Tiling(tiling.choice, tiling.reason + "; C++: no online softmax, the max and the sum of "
                        "exp(x - max) stay two passes: a thread's second pass re-reads its row from its own "
                        "cache, and a per-element rescale would cost more than that read (Note [Online softmax])")
    x, r = plan.x, plan.r
    printer = CppPrinter(plan, buffers, r, {x: plan.rows, r: plan.red})
    printer.split = tiling.choice == "split"  # Note [Split reductions in C++]
    x_symbol = sympy.Symbol("x0", integer=True, nonnegative=True)
    r_symbol = sympy.Symbol("r0", integer=True, nonnegative=True)
    printer.substitution = {x: x_symbol, r: r_symbol}
    printer.index_ranges = {x_symbol: plan.rows, r_symbol: plan.red}
    printer.varying_symbols = {r_symbol}
    printer.inner_var = printer.row_cache_index = r_symbol
    body = Source()
    rows_pragma = "" if printer.split else parallel_clause(plan.rows * plan.red)
    with body.block(), body.block(f"for (int64_t x0 = 0; x0 < {c_index(plan.rows)}; ++x0)", rows_pragma):
        for name in _row_cache_nodes(kernel, plan, buffers, passes):
            printer.row_cache[name] = False
            body.add(f"alignas(64) {c_type(buffers[name].dtype)} cache_{name}[{c_index(plan.red)}];", LineTag(name))
        with use_handler(printer):
            for group in passes:
                _emit_pass(group, plan, printer, body)
                printer.finish_pass()
            emit_epilogue(printer, kernel, plan, body, lambda per_row: per_row or printer.start_inner_loop(),
                          lambda body, lines, tags: _row_loop(plan, printer, body, lines, tags))
    return finish_kernel(kernel, buffers, body, printer, size_symbols, tiling)


def _row_loop(plan: KernelPlan, printer: CppPrinter, body: Source, lines: list, tags: list) -> None:
    """The epilogue's walk of a row (on all threads for a split reduction: Note [Split reductions in C++])."""
    pragma = f"#pragma omp parallel for simd {THREADS}" if printer.split else "#pragma omp simd"
    with body.block(f"for (int64_t r0 = 0; r0 < {c_index(plan.red)}; ++r0)", pragma):
        body.extend(lines, tags)


# Note [Row cache]
# A reduction kernel walks each row once per pass. An expensive elementwise value needed by two passes
# (softmax's exp(x - max): summed in one pass, divided in the last) is computed once, kept in a per-thread
# array of one row, and read back later, when the row length is a known constant that fits on the stack.
# Up to 256 KiB a row (64Ki floats: a thread's stack is 8 MiB here, libgomp's workers take the same default):
# softmax over 32000- and 50257-wide rows computed its exp twice at 16 KiB and ran 1.14x and 1.49x
# Inductor's time (CPU time, one thread), which stores exp once into a full-size buffer; cached, 0.70x and
# 0.89x. A row cache of that size stays in the L2 cache between the two passes.
ROW_CACHE_BYTES = 256 * 1024
EXPENSIVE_OPS = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos",
                 "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "lgamma",
                 "sigmoid", "pow", "atan2", "hypot"}


def _row_cache_nodes(kernel: Kernel, plan: KernelPlan, buffers, passes) -> list[str]:
    if not (plan.red.is_Integer and 1 < int(plan.red)):
        return []
    from engine.ir.handlers import AccessRecorder

    phases = [[(n, True) for n in group] for group in passes]
    phases.append([(n, False) for n in kernel.stored_nodes if plan.role(n) == "full"])
    seen_in: dict[str, int] = {}
    for phase in phases:
        evaluated: set[str] = set()

        def compute(node, index):
            if tuple(index) == tuple(plan.index(node)):
                evaluated.add(node.name)
            return node.inner_fn(list(index))

        inliner = Inliner(plan, external=lambda name, index: Var("m", buffers[name].dtype),
                          accumulator=lambda name: Var("a", buffers[name].dtype), compute=compute)
        with use_handler(AccessRecorder(buffers, on_load=inliner.load)):
            for node, is_reduction in phase:
                if is_reduction:
                    node.inner_fn(plan.index(node), plan.rindex(node))
                else:
                    compute(node, plan.index(node))
        for name in evaluated:
            seen_in[name] = seen_in.get(name, 0) + 1
    chain = len(passes) > MAX_REDUCTION_PASSES  # Note [Row cache of a persistent chain]
    cached, total = [], 0
    for name, count in seen_in.items():
        size = int(plan.red) * _cache_itemsize(buffers[name].dtype)
        if count < 2 or plan.role(buffers[name]) != "full" or size > ROW_CACHE_BYTES:
            continue
        if _uses_expensive_op(buffers[name], buffers) or chain and total + size <= CHAIN_CACHE_BYTES:
            cached.append(name)
            total += size
    return cached


# Note [Row cache of a persistent chain]
# A kernel past MAX_REDUCTION_PASSES holds a chain of row reductions over short rows (Note [Persistent
# chains] in policy.py): 32 layer norms are 64 passes, and pass k's values are computed from pass k-1's,
# which are computed from pass k-2's, and so on back to the input: recomputed in every pass, the kernel's
# code grows with the square of the chain (2635 lines and 5 s of g++ for 32 layer norms over rows of 64).
# So in such a kernel every value two passes need is kept in the row cache, cheap or not (up to
# CHAIN_CACHE_BYTES of stack a thread): each pass reads the previous one's values back, the code is linear.
CHAIN_CACHE_BYTES = 1 << 20


def _cache_itemsize(dtype) -> int:
    """Bytes of one cached value: its C type's (halves are cached in float, as computed)."""
    return 4 if c_type(dtype) == "float" else dtype.itemsize


def _uses_expensive_op(node: Buffer, buffers) -> bool:
    from engine.ir.handlers import AccessRecorder

    used: set[str] = set()

    class Counter(AccessRecorder):
        def __getattr__(self, name):
            used.add(name)
            return super().__getattr__(name)

    with use_handler(Counter(buffers)):
        node.inner_fn([sympy.Integer(0)] * len(node.size))
    return bool(used & EXPENSIVE_OPS)


# Note [Split accumulators]
# A vectorized reduction with one accumulator is bound by the latency of its add, not by loads: each vector
# add waits for the previous one (3-4 cycles), so a row in L1 is summed at one vector per ~4 cycles. When the
# row is long, a pass keeps ACCUMULATOR_LANES partial results instead (an array the vectorizer turns into
# several independent registers), walks the row in blocks of that many elements, finishes the remainder into
# the scalar accumulator, and folds the lanes into it at the end. Sums also become a little more accurate
# (lanes are shorter chains). Passes with argmax/argmin stay scalar (first-index order matters).
ACCUMULATOR_LANES = 32  # 4 AVX2 or 2 AVX-512 registers of float32
SPLIT_MIN_ROW = 4 * ACCUMULATOR_LANES


def _accumulator(kind: str, dtype, src_dtype) -> tuple:
    """(dtype, C type, identity) of an accumulator (kernel_core.accumulator_type; flags in a plain int)."""
    dtype, identity = accumulator_type(kind, dtype, src_dtype)
    if kind in FLAG_REDUCTIONS:
        return dtype, "int", str(identity)
    return dtype, c_type(dtype), c_constant(identity, dtype)


def _update_text(kind: str, target: str, value: str) -> str:
    """Fold `value` into `target` for a sum/prod/max/min/any/all reduction."""
    if kind in ("sum", "prod"):
        return f"{target} = {target} {SIMD_CLAUSE[kind]} {value};"
    if kind in ("any", "all"):
        return f"{target} {SIMD_CLAUSE[kind]}= ({value} != 0);"
    compare = ">" if kind == "max" else "<"
    return f"{target} = {value} {compare} {target} ? {value} : {target};"


@dataclass
class _Accumulator:
    node: str  # the Reduction's buffer name (provenance)
    name: str
    kind: str
    ctype: str
    identity: str
    value: str


def _emit_pass(group: list[Reduction], plan: KernelPlan, printer: CppPrinter, body: Source):
    printer.start_inner_loop()
    updates, update_tags, clauses, finals = [], [], [], []
    accumulators: list[_Accumulator] = []
    vectorizable = True
    for name, dtype, src_dtype, kind, value in run_pass(printer, plan, group):
        acc = f"acc_{name}"
        dtype, ctype, identity = _accumulator(kind, dtype, src_dtype)
        body.add(f"{ctype} {acc} = {identity};", LineTag(name))
        if kind in ("argmax", "argmin"):
            vectorizable = False
            better = ">" if kind == "argmax" else "<"
            body.add(f"int64_t {acc}_index = 0;", LineTag(name))
            body.add(f"bool {acc}_nan = false;", LineTag(name))
            nan_check = f" || {value} != {value}" if dtype.is_floating_point else ""
            updates.append(f"if (!{acc}_nan && ({value} {better} {acc}{nan_check})) {{ {acc} = {value}; "
                           f"{acc}_index = r0; {acc}_nan = {value} != {value}; }}")
            update_tags.append(LineTag(name))
            continue
        accumulators.append(_Accumulator(name, acc, kind, ctype, identity, str(value)))
        if kind in ("max", "min") and dtype.is_floating_point:
            body.add(f"int {acc}_nan = 0;", LineTag(name))
            updates.append(f"{acc}_nan |= ({value} != {value});")
            update_tags.append(LineTag(name))
            clauses.append(f"reduction(|:{acc}_nan)")
            finals.append((f"if ({acc}_nan) {acc} = std::numeric_limits<{ctype}>::quiet_NaN();", name))
    body.extend(*printer.take_hoisted())
    row = c_index(plan.red)
    split = vectorizable and accumulators and not (plan.red.is_Integer and int(plan.red) < SPLIT_MIN_ROW)
    if split:
        _emit_split_loop(accumulators, updates, update_tags, clauses, row, printer, body, printer.split)
    else:
        for a in accumulators:
            updates.append(_update_text(a.kind, a.name, a.value))
            update_tags.append(LineTag(a.node))
            clauses.append(f"reduction({SIMD_CLAUSE[a.kind]}:{a.name})")
        pragma = f"#pragma omp simd {' '.join(clauses)}" if vectorizable else ""
        with body.block(f"for (int64_t r0 = 0; r0 < {row}; ++r0)", pragma):
            body.extend(printer.lines, printer.line_tags)
            body.extend(updates, update_tags)
    for line, name in finals:
        body.add(line, LineTag(name))


# Note [Cascade sums]
# A float32 lane that keeps adding stops growing once its total is 2^24 times the addend: the sum of 2^31
# ones over 32 lanes gave 536870912 (2^24 * 32) instead of 2147483648. ATen sums in a cascade: short runs
# are summed first, then the run totals. Here the lanes restart from the identity for every chunk of
# CASCADE_CHUNK elements (128 elements a lane), the chunk's lanes are folded into a chunk total, and chunk
# totals go into the row's accumulator: no partial sum grows past a chunk, and the accumulator takes one add
# per chunk. The chunk loop is also the unit of a split reduction (Note [Split reductions in C++]).
CASCADE_CHUNK = 4096

# Note [Split reductions in C++]
# A kernel with few rows and long ones (a full sum, a column sum with a few columns) would run its rows on
# a few threads and leave the others idle. When the kernel's tiling is "split" (engine/schedule/tiling.py),
# the rows loop runs on one thread and each pass's chunk loop runs on all of them (`omp parallel for` with a reduction clause per accumulator: each thread sums its chunks, OpenMP adds
# the thread totals), as do the row's elementwise stores after the passes.
def _emit_split_loop(accumulators: list[_Accumulator], updates, update_tags, clauses, row: str,
                     printer: CppPrinter, body: Source, parallel: bool) -> None:
    """One pass with ACCUMULATOR_LANES partial accumulators per reduction, restarted every chunk
    (Note [Split accumulators], Note [Cascade sums])."""
    lanes, chunk = ACCUMULATOR_LANES, CASCADE_CHUNK
    tags = [LineTag(a.node) for a in accumulators]
    pragma = ""
    if parallel:
        pragma = " ".join(["#pragma omp parallel for", THREADS] + [f"reduction({SIMD_CLAUSE[a.kind]}:{a.name})"
                                                          for a in accumulators] + clauses)
    with body.block():  # a scope per pass: every pass declares its own row_blocked
        body.add(f"const int64_t row_blocked = ({row}) / {lanes} * {lanes};")
        with body.block(f"for (int64_t chunk = 0; chunk < row_blocked; chunk += {chunk})", pragma):
            for a, tag in zip(accumulators, tags):
                body.add(f"{a.ctype} {a.name}_lanes[{lanes}];", tag)
                body.add(f"for (int64_t lane = 0; lane < {lanes}; ++lane) {a.name}_lanes[lane] = {a.identity};")
            body.add(f"const int64_t chunk_end = std::min<int64_t>(chunk + {chunk}, row_blocked);")
            lane_updates = [_update_text(a.kind, f"{a.name}_lanes[lane]", a.value) for a in accumulators]
            with body.block(f"for (int64_t row_block = chunk; row_block < chunk_end; row_block += {lanes})"):
                with body.block(f"for (int64_t lane = 0; lane < {lanes}; ++lane)",
                                f"#pragma omp simd {' '.join(clauses)}".rstrip()):
                    body.add("const int64_t r0 = row_block + lane;")
                    body.extend(printer.lines, printer.line_tags)
                    body.extend(updates + lane_updates, update_tags + tags)
            for a, tag in zip(accumulators, tags):
                body.add(f"{a.ctype} {a.name}_chunk = {a.identity};", tag)
            with body.block(f"for (int64_t lane = 0; lane < {lanes}; ++lane)"):
                for a, tag in zip(accumulators, tags):
                    body.add(_update_text(a.kind, f"{a.name}_chunk", f"{a.name}_lanes[lane]"), tag)
            for a, tag in zip(accumulators, tags):
                body.add(_update_text(a.kind, a.name, f"{a.name}_chunk"), tag)
        tail_updates = [_update_text(a.kind, a.name, a.value) for a in accumulators]
        with body.block(f"for (int64_t r0 = row_blocked; r0 < {row}; ++r0)"):
            body.extend(printer.lines, printer.line_tags)
            body.extend(updates + tail_updates, update_tags + tags)


# Note [Column tiles in C++]
# A reduction over a non-innermost axis (x.sum(0), a mean over the batch, a sum over dim 1 of NCHW) reads
# its input contiguously along the outputs and strided along the reduction (Note [Tiling from strides]).
# Walking one output's reduction at a time reads a cache line per element and vectorizes into gathers.
# Column tiles swap the loops: a thread takes COLUMN_TILE outputs, keeps an accumulator per output, and for
# each reduction step updates them all in one vectorized inner loop over contiguous memory. Sums stay a
# cascade (Note [Column cascades]).
# Kernels with one pass of sum/prod/max/min/any/all take this form, with per-output stores and full-size
# ones (Note [Full-size stores of column tiles]).
COLUMN_TILE = 64

# Note [Column cascades]
# A column tile has one accumulator per output, so each output's sum is one running total: a column of 3001
# float32 values summed in turn was 8-10x further from float64 than eager's cascade at its worst element (eager
# ATen's sum nests partial sums of 16), and the verdict failed about one random input in 30 of x.sum(0) * 2
# (Inductor's too). Each tile now sums COLUMN_BLOCK steps into block partials, the blocks of a CASCADE_CHUNK
# into chunk partials, and the chunks into the accumulators: within 1-2x of eager's worst error from 3001 to
# 100000 rows (simulated in float32), for one add of the tile's partials per COLUMN_BLOCK steps.
COLUMN_BLOCK = 64

# Note [Full-size stores of column tiles]
# A full-size value of a reduction kernel is stored at x*red + r (Note [Fused loop shape]): contiguous along
# the reduction, the other axis from the column tile's reads, which are contiguous along the outputs (a
# squeeze-excitation x * x.mean((2, 3)) over a channels-last x, stored NCHW). After a tile's reductions,
# its full-size stores walk the tile in the second loop order: the outputs outside, the reduction inside
# (vectorized, the stores contiguous), in blocks of COLUMN_TILE reduction steps. A read strided along the
# reduction (the column read itself, again) is staged per block (Note [Staged reads]): copied along its
# contiguous axis into a COLUMN_TILE^2 array laid out along the reduction, which the vectorized loop reads.
# The pass above keeps its order: its reads are contiguous along the outputs.


# Note [Split column tiles in C++]
# A reduction with few outputs over a long leading dim (x.mean(0) of 100000 x 16) is tiled "split" (few
# outputs, long reductions: engine/schedule/tiling.py), and a split row walk reads each output's column with
# a stride: 16 walks of 6.4 MB that each use 4 bytes of every 64-byte line, 13x Inductor's time on one thread
# (scripts/cpu_tiling_bench.py, load ~10). As column tiles (Note [Column tiles in C++]) one walk reads every
# line once, vectorized along the outputs. The split is kept across the reduction instead of across tiles:
# each CASCADE_CHUNK of reduction steps is a unit of work for the threads, summed into its own partials (one
# array of tile width per chunk, on the heap), and the chunks' partials are folded in chunk order afterwards,
# the same order and so the same result as one thread's cascade (Note [Cascade sums]).


def _few_columns(kernel: Kernel, plan: KernelPlan, buffers):
    """(access, stride) of a read strided along the reduction and contiguous along the outputs, where the
    outputs fit one column tile; None otherwise."""
    from engine.schedule.strides import column_access, kernel_accesses

    if not (plan.rows.is_Integer and int(plan.rows) <= COLUMN_TILE):
        return None
    return column_access(plan, kernel_accesses(kernel.nodes, plan, buffers, kernel.stored))


def _column_tiles_fit(kernel: Kernel, plan: KernelPlan, passes) -> bool:
    return len(passes) == 1 and all(n.reduction_type in SIMD_CLAUSE for n in passes[0])


def _column_kernel(kernel: Kernel, plan: KernelPlan, buffers, size_symbols, tiling: Tiling,
                   group: list[Reduction], split: bool = False) -> CppKernel:
    x0 = sympy.Symbol("x0", integer=True, nonnegative=True)
    r0 = sympy.Symbol("r0", integer=True, nonnegative=True)
    xa = sympy.Symbol("xa", integer=True, nonnegative=True)
    # the outputs as runs of `run` (Note [Runs of an axis]): x = xa*run + x0, a tile never crosses a run
    run = plan.rows if tiling.run is None else tiling.run
    runs = sympy.cancel(plan.rows / run)
    printer = CppPrinter(plan, buffers, x0, {xa: runs, x0: run, r0: plan.red})
    printer.substitution = {plan.x: xa * run + x0 if tiling.run is not None else x0, plan.r: r0}
    printer.varying_symbols = {x0}
    tile, chunk = COLUMN_TILE, CASCADE_CHUNK
    run_text, red = c_index(run), c_index(plan.red)
    body = Source()
    with use_handler(printer):
        reductions = run_pass(printer, plan, group)
        pass_lines, pass_tags = printer.lines, printer.line_tags
        hoisted, hoisted_tags = printer.take_hoisted()
        accumulators = []
        for name, dtype, src_dtype, kind, value in reductions:
            _, ctype, identity = _accumulator(kind, dtype, src_dtype)
            nan = kind in ("max", "min") and dtype.is_floating_point
            accumulators.append((name, f"acc_{name}", kind, ctype, identity, str(value), nan))
            printer.accumulators[name] = Var(f"acc_{name}[x0 - xo]", dtype, True)
        if split:  # one tile, of a static width: its chunks on the threads (Note [Split column tiles in C++])
            tiles = body.block()
        elif tiling.run is None:
            tiles = body.block(f"for (int64_t xo = 0; xo < {run_text}; xo += {tile})",
                               parallel_clause(plan.rows * plan.red))
        else:  # one loop over every tile of every run, so that the threads share all of them
            per_run = FloorDiv(run + tile - 1, tile)
            tiles = body.block(f"for (int64_t t = 0; t < {c_index(runs * per_run)}; ++t)",
                               parallel_clause(plan.rows * plan.red))
        with body.block(), tiles:
            if split:
                body.add("constexpr int64_t xo = 0;")
            if tiling.run is not None:
                body.add(f"const int64_t xa = t / {c_index(per_run)}, xo = t % {c_index(per_run)} * {tile};")
            body.add(f"constexpr int64_t xe = {run_text};" if split else
                     f"const int64_t xe = std::min<int64_t>(xo + {tile}, {run_text});")
            for name, acc, kind, ctype, identity, value, nan in accumulators:
                body.add(f"{ctype} {acc}[{tile}];", LineTag(name))
                body.add(f"for (int64_t j = 0; j < {tile}; ++j) {acc}[j] = {identity};", LineTag(name))
                if nan:
                    body.add(f"int {acc}_nan[{tile}] = {{0}};", LineTag(name))
            chunks = f"(({red}) + {chunk - 1}) / {chunk}"
            if split:
                for name, acc, kind, ctype, identity, value, nan in accumulators:
                    body.add(f"std::vector<{ctype}> {acc}_parts({chunks} * {tile});", LineTag(name))
                    if nan:
                        body.add(f"std::vector<int> {acc}_nan_parts({chunks} * {tile}, 0);", LineTag(name))
            loop = f"for (int64_t c = 0; c < {chunks}; ++c)" if split else \
                f"for (int64_t rc = 0; rc < {red}; rc += {chunk})"
            with body.block(loop, parallel_clause(plan.rows * plan.red) if split else ""):
                if split:
                    body.add(f"const int64_t rc = c * {chunk};")
                for name, acc, kind, ctype, identity, value, nan in accumulators:
                    if split and nan:
                        body.add(f"int* {acc}_nan = &{acc}_nan_parts[c * {tile}];", LineTag(name))
                    body.add(f"{ctype} {acc}_chunk[{tile}];", LineTag(name))  # a local array: registers
                    body.add(f"for (int64_t j = 0; j < {tile}; ++j) {acc}_chunk[j] = {identity};", LineTag(name))
                body.add(f"const int64_t rce = std::min<int64_t>(rc + {chunk}, {red});")
                with body.block(f"for (int64_t rb = rc; rb < rce; rb += {COLUMN_BLOCK})"):  # Note [Column cascades]
                    for name, acc, kind, ctype, identity, value, nan in accumulators:
                        body.add(f"{ctype} {acc}_block[{tile}];", LineTag(name))
                        body.add(f"for (int64_t j = 0; j < {tile}; ++j) {acc}_block[j] = {identity};", LineTag(name))
                    with body.block(f"for (int64_t r0 = rb; r0 < std::min<int64_t>(rb + {COLUMN_BLOCK}, rce); ++r0)"):
                        body.extend(hoisted, hoisted_tags)
                        with body.block("for (int64_t x0 = xo; x0 < xe; ++x0)", "#pragma omp simd"):
                            body.extend(pass_lines, pass_tags)
                            for name, acc, kind, ctype, identity, value, nan in accumulators:
                                body.add(_update_text(kind, f"{acc}_block[x0 - xo]", value), LineTag(name))
                                if nan:
                                    body.add(f"{acc}_nan[x0 - xo] |= ({value} != {value});", LineTag(name))
                    with body.block("for (int64_t j = 0; j < xe - xo; ++j)", "#pragma omp simd"):
                        for name, acc, kind, *_ in accumulators:
                            body.add(_update_text(kind, f"{acc}_chunk[j]", f"{acc}_block[j]"), LineTag(name))
                with body.block("for (int64_t j = 0; j < xe - xo; ++j)"):
                    for name, acc, kind, *_ in accumulators:
                        body.add(f"{acc}_parts[c * {tile} + j] = {acc}_chunk[j];" if split else
                                 _update_text(kind, f"{acc}[j]", f"{acc}_chunk[j]"), LineTag(name))
            if split:  # the chunks' partials, folded in chunk order
                with body.block(f"for (int64_t c = 0; c < {chunks}; ++c)"), \
                        body.block("for (int64_t j = 0; j < xe - xo; ++j)"):
                    for name, acc, kind, ctype, identity, value, nan in accumulators:
                        body.add(_update_text(kind, f"{acc}[j]", f"{acc}_parts[c * {tile} + j]"), LineTag(name))
                        if nan:
                            body.add(f"{acc}_nan[j] |= {acc}_nan_parts[c * {tile} + j];", LineTag(name))
            for name, acc, kind, ctype, identity, value, nan in accumulators:
                if nan:
                    body.add(f"for (int64_t j = 0; j < xe - xo; ++j) if ({acc}_nan[j]) "
                             f"{acc}[j] = std::numeric_limits<{ctype}>::quiet_NaN();", LineTag(name))
            per_row, full = stores_by_role(kernel, plan)
            # the per-output stores, in a fresh scope: nothing computed in the loops above is visible here
            if per_row:
                _fresh_scope(printer)
                stores, store_tags = emit_stores(printer, plan, per_row, per_row=True)
                body.extend(*printer.take_hoisted())
                with body.block("for (int64_t x0 = xo; x0 < xe; ++x0)", "#pragma omp simd"):
                    body.extend(printer.lines, printer.line_tags)
                    body.extend(stores, store_tags)
            if full:
                _full_size_stores(printer, plan, full, accumulators, body)
    if full:
        tiling = replace(tiling, reason=tiling.reason + "; C++: the full-size stores walk each tile with the "
                         "outputs outside and the reduction inside, where they are contiguous (Note [Full-size "
                         "stores of column tiles])")
    return finish_kernel(kernel, buffers, body, printer, size_symbols, tiling)


def _fresh_scope(printer: CppPrinter) -> None:
    printer.start_inner_loop()
    printer._cache, printer._indirect_cache = {}, {}
    for inliner in printer._inliners.values():  # the unmasked one and each mask's (Note [Inlining under a mask])
        inliner.memo = {}


def _full_size_stores(printer: CppPrinter, plan: KernelPlan, full: list[Buffer], accumulators, body: Source):
    """A column tile's full-size stores, outputs outside and the reduction inside (Note [Full-size stores of
    column tiles]); the tile's reduced values do not move along the reduction."""
    x0, r0 = sympy.Symbol("x0", integer=True, nonnegative=True), sympy.Symbol("r0", integer=True, nonnegative=True)
    _fresh_scope(printer)
    printer.varying_symbols = {r0}
    printer.staging = Staging(x0, r0, COLUMN_TILE)  # Note [Staged reads]: the reads strided along r
    for name, acc, *_ in accumulators:
        printer.accumulators[name] = Var(f"{acc}[x0 - xo]", printer.accumulators[name].dtype, False)
    stores, store_tags = emit_stores(printer, plan, full)
    hoisted, hoisted_tags = printer.take_hoisted()
    red = c_index(plan.red)
    with body.block(f"for (int64_t r0o = 0; r0o < {red}; r0o += {COLUMN_TILE})"):
        body.add(f"const int64_t r0e = std::min<int64_t>(r0o + {COLUMN_TILE}, {red}), x0o = xo, x0e = xe;")
        printer.staging.emit(body)
        with body.block("for (int64_t x0 = xo; x0 < xe; ++x0)"):
            body.extend(hoisted, hoisted_tags)
            with body.block("for (int64_t r0 = r0o; r0 < r0e; ++r0)", "#pragma omp simd"):
                body.extend(printer.lines, printer.line_tags)
                body.extend(stores, store_tags)
    printer.varying_symbols, printer.staging = {x0}, None
