"""C++/OpenMP code generation: one `extern "C"` function per fused kernel.

Loop shapes (Note [Fused loop shape]):
  pointwise  for xo (OpenMP threads) { for xi (simd) { body; stores } }
  reduction  for x (OpenMP threads) { pass 1: for r (simd reduction) {...}; ...; last: for r { stores } }
Values that do not depend on the innermost loop variable are hoisted out of it (loop-invariant code motion
in the printer), so a row's mean or a broadcast bias is computed once per row, not once per element.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import sympy
import torch

from engine.codegen.provenance import LineTag
from engine.codegen.kernel_printer import KernelPrinter
from engine.ir.handlers import Var
from engine.ir.indexing import c_index, simplify_index
from engine.ir.nodes import Buffer, Reduction
from engine.ir.ops import reduction_identity, use_handler
from engine.schedule.fusion import Kernel
from engine.schedule.kernel_plan import (Inliner, KernelPlan, reduce_node, reduction_passes, store_node,
                                         store_row_value)

PRELUDE = (Path(__file__).with_name("cpp_prelude.h")).read_text()

C_TYPES = {
    torch.float32: "float", torch.float64: "double", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "bool",
    torch.float16: "float", torch.bfloat16: "float",  # computed in float
}
STORAGE_TYPES = {**C_TYPES, torch.float16: "uint16_t", torch.bfloat16: "uint16_t"}
PARALLEL_MIN_ELEMENTS = 32768  # below this, starting OpenMP threads costs more than it saves

LIBM = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan", "asin", "acos",
        "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma", "floor", "ceil",
        "trunc"}
UNARY_FLOAT_CALLS = {**{name: name for name in LIBM}, "round": "nearbyint", "erfinv": "gb_erfinv",
                     "sign": "gb_sign"}


def _math_call(op: str, dtype: torch.dtype) -> str:
    """float32 (and half, computed in float) calls the C float function, which has a vector version
    (Note [Vector math]); double calls std::."""
    name = UNARY_FLOAT_CALLS[op]
    if name.startswith("gb_"):
        return name
    return f"{name}f" if c_type(dtype) == "float" else f"std::{name}"
INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
         "ge": ">=", "logical_and": "&&", "logical_or": "||", "bitwise_and": "&", "bitwise_or": "|",
         "bitwise_xor": "^", "left_shift": "<<", "right_shift": ">>"}


def c_type(dtype: torch.dtype) -> str:
    return C_TYPES[dtype]


def c_constant(value, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        ctype = c_type(dtype)
        value = float(value)
        if math.isnan(value):
            return f"std::numeric_limits<{ctype}>::quiet_NaN()"
        if math.isinf(value):
            return f"{'-' if value < 0 else ''}std::numeric_limits<{ctype}>::infinity()"
        text = repr(value)
        return f"{text}f" if ctype == "float" else text
    value = int(value)
    if value == -(2 ** 63):
        return "std::numeric_limits<int64_t>::min()"
    return f"({c_type(dtype)}){value}LL" if dtype == torch.int64 else f"({c_type(dtype)}){value}"


def _float_call(op: str):
    """A C math function: float for float32 and half, double otherwise; integers through double
    (floor/ceil/trunc/round of an integer is the integer)."""
    def spell(p, a):
        if not a.dtype.is_floating_point:
            if op in ("floor", "ceil", "trunc", "round"):
                return f"{a}"
            if op != "sign":
                return f"{_math_call(op, torch.float64)}(static_cast<double>({a}))"
        return f"{_math_call(op, a.dtype)}({a})"
    return spell


def _infix(symbol: str):
    return lambda p, a, b: f"{a} {symbol} {b}"


def _one(a) -> str:
    return c_constant(1, a.dtype)


def _truediv(p, a, b):
    if a.dtype.is_floating_point and a.varying and not b.varying:
        # one division per row, then multiplies: the reciprocal is hoisted out of the inner loop
        return f"{a} * {p.emit(f'{c_constant(1, b.dtype)} / {b}', b.dtype, False)}"
    return f"{a} / {b}"


def _by_kind(floating: str, integer: str):
    """A binary op spelled one way for floating operands, another for integers ({a}, {b}, {t}: C type)."""
    return lambda p, a, b: (floating if a.dtype.is_floating_point else integer).format(a=a, b=b, t=c_type(a.dtype))


CPP_SPELLINGS = {  # Note [Spelling tables]
    **{op: _float_call(op) for op in UNARY_FLOAT_CALLS},
    **{op: _infix(symbol) for op, symbol in INFIX.items()},
    "neg": lambda p, a: f"-{a}",
    "abs": lambda p, a: f"std::abs({a})" if a.dtype != torch.bool else f"{a}",
    "rsqrt": lambda p, a: f"{_one(a)} / {_math_call('sqrt', a.dtype)}({a})",
    "sigmoid": lambda p, a: f"{_one(a)} / ({_one(a)} + {_math_call('exp', a.dtype)}(-{a}))",
    "relu": lambda p, a: f"{a} < {c_constant(0, a.dtype)} ? {c_constant(0, a.dtype)} : {a}",
    "reciprocal": lambda p, a: f"{_one(a)} / {a}",
    "square": lambda p, a: f"{a} * {a}",
    "logical_not": lambda p, a: f"!{a}",
    "bitwise_not": lambda p, a: f"!{a}" if a.dtype == torch.bool else f"~{a}",
    "isnan": lambda p, a: f"{a} != {a}",
    "isinf": lambda p, a: f"std::isinf({a})" if a.dtype.is_floating_point else "false",
    "signbit": lambda p, a: f"std::signbit({a})" if a.dtype.is_floating_point else f"{a} < 0",
    "truediv": _truediv,
    "floordiv": _by_kind("std::floor({a} / {b})", "gb_floordiv<{t}>({a}, {b})"),
    "truncdiv": _by_kind("std::trunc({a} / {b})", "{a} / {b}"),
    "remainder": _by_kind("gb_fmod_py({a}, {b})", "gb_mod<{t}>({a}, {b})"),
    "fmod": _by_kind("std::fmod({a}, {b})", "{a} % {b}"),
    "pow": _by_kind("std::pow({a}, {b})", "gb_ipow<{t}>({a}, {b})"),
    "maximum": _by_kind("gb_maximum<{t}>({a}, {b})", "gb_maximum<{t}>({a}, {b})"),
    "minimum": _by_kind("gb_minimum<{t}>({a}, {b})", "gb_minimum<{t}>({a}, {b})"),
    "atan2": lambda p, a, b: f"std::atan2({a}, {b})",
    "hypot": lambda p, a, b: f"std::hypot({a}, {b})",
    "copysign": lambda p, a, b: f"std::copysign({a}, {b})",
    "logical_xor": lambda p, a, b: f"(bool){a} != (bool){b}",
}
class CppPrinter(KernelPrinter):
    """Writes one kernel body. Loads of this kernel's own nodes are inlined (see kernel_plan.Inliner)."""

    SPELLINGS = CPP_SPELLINGS

    def __init__(self, plan: KernelPlan, buffers: dict, inner_var: sympy.Symbol, index_ranges: dict):
        super().__init__(plan, buffers, compute=self._compute)
        self.inner_var = inner_var
        self.index_ranges = index_ranges
        self.substitution: dict = {}
        self.varying_symbols: set = {inner_var}
        self.row_cache: dict[str, bool] = {}  # node -> written by an earlier pass (Note [Row cache])
        self.row_cache_index: sympy.Symbol | None = None
        self.cache_written_now: set[str] = set()
        self.stores: list[tuple[str, object]] = []  # (line, tag) from ops.store / ops.store_reduction
        self.pass_reductions: list[tuple] = []  # ops.reduction calls of the pass being emitted

    def _compute(self, node, index):
        if node.name not in self.row_cache or tuple(index) != tuple(self.plan.index(node)):
            return node.inner_fn(list(index))
        slot = f"cache_{node.name}[{self.row_cache_index}]"
        if self.row_cache[node.name]:
            return self.emit(slot, node.dtype, True)
        value = node.inner_fn(list(index))
        self.add_line(f"{slot} = {value};", True)
        self.cache_written_now.add(node.name)
        return value

    def finish_pass(self):
        """Values cached in the pass just emitted are readable from the next one on."""
        for name in self.cache_written_now:
            self.row_cache[name] = True
        self.cache_written_now = set()

    def emit(self, text, dtype, varying=True):
        key = (text, dtype)
        if key in self._cache:
            return self._cache[key]
        var = Var(next(self._names), dtype, varying)
        self.add_line(self.declare(var, text), varying)
        self._cache[key] = var
        return var

    # -- ops -------------------------------------------------------------------------------------------------
    def declare(self, var, text):
        return f"const {c_type(var.dtype)} {var} = {text};"

    def index(self, expr) -> tuple[str, bool]:
        expr = simplify_index(sympy.expand(sympy.sympify(expr).subs(self.substitution)), self.index_ranges)
        return c_index(expr), bool(expr.free_symbols & self.varying_symbols)

    def _load_memory(self, name, index):
        buffer = self.buffers[name]
        text, varying = self.index(buffer.storage_offset(index))
        access = f"{name}[{text}]"
        if buffer.dtype == torch.float16:
            access = f"gb_half_to_float({access})"
        elif buffer.dtype == torch.bfloat16:
            access = f"gb_bf16_to_float({access})"
        return self.emit(access, buffer.dtype, varying)

    def constant(self, value, dtype):
        return Var(c_constant(value, dtype), dtype, False)

    def index_expr(self, expr, dtype):
        text, varying = self.index(expr)
        return self.emit(f"static_cast<{c_type(dtype)}>({text})", dtype, varying)

    def to_dtype(self, x, dtype):
        if dtype == torch.bool:
            return self.emit(f"({x} != 0)", dtype, x.varying)
        if dtype == torch.float16:
            return self.emit(f"gb_round_half(static_cast<float>({x}))", dtype, x.varying)
        if dtype == torch.bfloat16:
            return self.emit(f"gb_round_bf16(static_cast<float>({x}))", dtype, x.varying)
        return self.emit(f"static_cast<{c_type(dtype)}>({x})", dtype, x.varying)

    def where(self, cond, a, b):
        return self.emit(f"{cond} ? {a} : {b}", a.dtype, cond.varying or a.varying or b.varying)

    def declare_indirect(self, symbol, value, size):
        size_text, _ = self.index(size)
        self.add_line(f"const int64_t {symbol} = {value} < 0 ? {value} + {size_text} : "
                      f"static_cast<int64_t>({value});", value.varying)
        if value.varying:
            self.varying_symbols.add(symbol)
        return value.varying

    # -- kernel structure (Note [Kernel structure ops]) -----------------------------------------------------
    def store(self, name, index, value):
        index_text, _ = self.index(self.buffers[name].storage_offset(index))
        self.stores.append((_store_text(self.buffers[name], index_text, value), self.tag))

    def store_reduction(self, name, index, value):
        self.store(name, index, value)

    def reduction(self, dtype, src_dtype, reduction_type, value):
        """Declares the accumulator of the current pass (emitted by _emit_pass); its name is the row's value."""
        node = self.tag.ir_node
        self.pass_reductions.append((node, dtype, src_dtype, reduction_type, value))
        name = f"acc_{node}_index" if reduction_type in ("argmax", "argmin") else f"acc_{node}"
        return Var(name, torch.int64 if reduction_type in ("argmax", "argmin") else dtype, False)




@dataclass
class CppKernel:
    name: str
    source: str
    args: list[str]  # buffer names in signature order, then size symbols
    size_args: list[str]
    line_tags: list = field(default_factory=list)  # one per source line


def _pointwise_split(plan: KernelPlan, kernel: Kernel) -> tuple[sympy.Expr, sympy.Expr]:
    """(outer, inner) trip counts: the inner loop walks the last dim(s) so that it vectorizes."""
    sizes = max((n.size for n in kernel.nodes if n.name in kernel.stored), key=len, default=())
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


def _parallel_clause(work) -> str:
    if work.is_Integer and int(work) < PARALLEL_MIN_ELEMENTS:
        return ""
    condition = "" if work.is_Integer else f" if({c_index(work)} >= {PARALLEL_MIN_ELEMENTS})"
    return f"#pragma omp parallel for{condition}"


def _store_text(node: Buffer, index_text: str, value: Var) -> str:
    if node.dtype == torch.float16:
        value_text = f"gb_float_to_half({value})"
    elif node.dtype == torch.bfloat16:
        value_text = f"gb_float_to_bf16({value})"
    else:
        value_text = f"{value}"
    return f"{node.name}[{index_text}] = {value_text};"


def _emit_stores(nodes: list[Buffer], plan: KernelPlan, printer: CppPrinter) -> tuple[list[str], list]:
    """Compute each node at the index the kernel stores it (its body lines go to the printer)."""
    printer.stores = []
    for node in nodes:
        printer.tag = LineTag(node.name)
        store_node(plan, node)
    return [line for line, _ in printer.stores], [tag for _, tag in printer.stores]


class _Source:
    """Lines with indentation and one provenance tag each."""

    def __init__(self):
        self.lines: list[str] = []
        self.tags: list = []
        self.depth = 0

    def add(self, line: str, tag=None):
        self.lines.append("    " * self.depth + line)
        self.tags.append(tag)

    def extend(self, lines, tags):
        for line, tag in zip(lines, tags):
            self.add(line, tag)

    @contextlib.contextmanager
    def block(self, header: str = "", pragma: str = ""):
        """`pragma`, `header {`, the indented body, `}`."""
        if pragma:
            self.add(pragma)
        self.add(f"{header} {{".lstrip())
        self.depth += 1
        yield
        self.depth -= 1
        self.add("}")


def generate_kernel(kernel: Kernel, buffers: dict, size_symbols: list[sympy.Symbol]) -> CppKernel:
    plan = kernel.plan
    if kernel.kind == "reduction":
        return _reduction_kernel(kernel, plan, buffers, size_symbols)
    return _pointwise_kernel(kernel, plan, buffers, size_symbols)


def _signature(kernel: Kernel, buffers: dict, body_text: str, size_symbols) -> tuple[str, list[str], list[str]]:
    params, names = [], []
    for name in kernel.reads:
        if f"{name}[" in body_text:
            params.append(f"const {STORAGE_TYPES[buffers[name].dtype]}* __restrict__ {name}")
            names.append(name)
    for name in kernel.stored:
        params.append(f"{STORAGE_TYPES[buffers[name].dtype]}* __restrict__ {name}")
        names.append(name)
    sizes = [str(s) for s in size_symbols if str(s) in body_text.replace("(", " ").replace(")", " ")
             .replace("*", " ").replace("+", " ").replace(";", " ").replace("<", " ").replace(",", " ").split()]
    params += [f"const int64_t {s}" for s in sizes]
    return f'extern "C" void {kernel.name}({", ".join(params)})', names, sizes


def _pointwise_kernel(kernel: Kernel, plan: KernelPlan, buffers, size_symbols) -> CppKernel:
    outer, inner = _pointwise_split(plan, kernel)
    xo, xi = sympy.Symbol("xo", integer=True, nonnegative=True), sympy.Symbol("xi", integer=True, nonnegative=True)
    printer = CppPrinter(plan, buffers, xi, {xo: outer, xi: inner})
    printer.substitution = {plan.x: xo * inner + xi}
    with use_handler(printer):
        stores, store_tags = _emit_stores([n for n in kernel.nodes if n.name in kernel.stored], plan, printer)
    hoisted, hoisted_tags = printer.take_hoisted()
    body = _Source()
    with body.block():
        with body.block(f"for (int64_t xo = 0; xo < {c_index(outer)}; ++xo)", _parallel_clause(outer * inner)):
            body.extend(hoisted, hoisted_tags)
            with body.block(f"for (int64_t xi = 0; xi < {c_index(inner)}; ++xi)", "#pragma omp simd"):
                body.extend(printer.lines, printer.line_tags)
                body.extend(stores, store_tags)
    return _finish(kernel, buffers, body, size_symbols)


def _finish(kernel, buffers, body: _Source, size_symbols) -> CppKernel:
    text = "\n".join(body.lines)
    header, names, sizes = _signature(kernel, buffers, text, size_symbols)
    lines = [header] + body.lines
    tags = [None] + body.tags
    return CppKernel(kernel.name, "\n".join(lines), names, sizes, tags)


# Note [Reductions in C++]
# Sums, products, min/max and any/all use an OpenMP simd reduction clause, so the inner loop vectorizes.
# max/min must propagate NaN like torch.amax: the vector loop tracks "saw a NaN" beside the running max.
# argmax/argmin keep (best value, first index) and run as a plain loop.
# Flags (NaN seen, any, all) accumulate in an int with | and &: a bool reduction with || stops gcc from
# vectorizing the loop (measured: 10 ms vs 0.8 ms for a 2048x2048 row max).
SIMD_CLAUSE = {"sum": "+", "prod": "*", "max": "max", "min": "min", "any": "|", "all": "&"}


def _reduction_kernel(kernel: Kernel, plan: KernelPlan, buffers, size_symbols) -> CppKernel:
    x, r = plan.x, plan.r
    printer = CppPrinter(plan, buffers, r, {x: plan.rows, r: plan.red})
    x_symbol = sympy.Symbol("x0", integer=True, nonnegative=True)
    r_symbol = sympy.Symbol("r0", integer=True, nonnegative=True)
    printer.substitution = {x: x_symbol, r: r_symbol}
    printer.index_ranges = {x_symbol: plan.rows, r_symbol: plan.red}
    printer.varying_symbols = {r_symbol}
    printer.inner_var = printer.row_cache_index = r_symbol
    from engine.schedule.fusion import node_reads
    passes = reduction_passes(kernel.nodes, lambda node: node_reads(node, buffers))
    body = _Source()
    rows_pragma = "" if splits_rows(plan) else _parallel_clause(plan.rows * plan.red)
    with body.block(), body.block(f"for (int64_t x0 = 0; x0 < {c_index(plan.rows)}; ++x0)", rows_pragma):
        for name in _row_cache_nodes(kernel, plan, buffers, passes):
            printer.row_cache[name] = False
            body.add(f"alignas(64) {c_type(buffers[name].dtype)} cache_{name}[{c_index(plan.red)}];", LineTag(name))
        with use_handler(printer):
            for group in passes:
                _emit_pass(group, plan, printer, body)
                printer.finish_pass()
            _emit_row_epilogue(kernel, plan, printer, body)
    return _finish(kernel, buffers, body, size_symbols)


def _emit_row_epilogue(kernel: Kernel, plan: KernelPlan, printer: CppPrinter, body: _Source) -> None:
    """After the passes: store per-row values, then one more loop over the row for full-size outputs."""
    for node in kernel.nodes:
        if node.name in kernel.stored and plan.role(node) != "full":
            printer.tag = LineTag(node.name)
            printer.stores = []
            store_row_value(plan, node, printer.accumulators)
            body.extend(*printer.take_hoisted())
            body.extend([line for line, _ in printer.stores], [tag for _, tag in printer.stores])
    stored_full = [n for n in kernel.nodes if n.name in kernel.stored and plan.role(n) == "full"]
    if stored_full:
        printer.start_inner_loop()
        stores, store_tags = _emit_stores(stored_full, plan, printer)
        body.extend(*printer.take_hoisted())
        pragma = "#pragma omp parallel for simd" if splits_rows(plan) else "#pragma omp simd"
        with body.block(f"for (int64_t r0 = 0; r0 < {c_index(plan.red)}; ++r0)", pragma):
            body.extend(printer.lines, printer.line_tags)
            body.extend(stores, store_tags)


# Note [Row cache]
# A reduction kernel walks each row once per pass. An expensive elementwise value needed by two passes
# (softmax's exp(x - max): summed in one pass, divided in the last) is computed once, kept in a per-thread
# array of one row, and read back later, when the row length is a known constant that fits on the stack.
ROW_CACHE_MAX = 16384
EXPENSIVE_OPS = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos",
                 "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv", "lgamma",
                 "sigmoid", "pow", "atan2", "hypot"}


def _row_cache_nodes(kernel: Kernel, plan: KernelPlan, buffers, passes) -> list[str]:
    if not (plan.red.is_Integer and 1 < int(plan.red) <= ROW_CACHE_MAX):
        return []
    from engine.ir.handlers import AccessRecorder

    phases = [[(n, True) for n in group] for group in passes]
    phases.append([(n, False) for n in kernel.nodes if n.name in kernel.stored and plan.role(n) == "full"])
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
    return [name for name, count in seen_in.items()
            if count > 1 and plan.role(buffers[name]) == "full" and _uses_expensive_op(buffers[name], buffers)]


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


def _emit_pass(group: list[Reduction], plan: KernelPlan, printer: CppPrinter, body: _Source):
    printer.start_inner_loop()
    updates, update_tags, clauses, finals = [], [], [], []
    accumulators: list[_Accumulator] = []
    vectorizable = True
    printer.pass_reductions = []
    for node in group:
        printer.tag = LineTag(node.name)
        printer.accumulators[node.name] = reduce_node(plan, node)
    for name, dtype, src_dtype, kind, value in printer.pass_reductions:
        acc = f"acc_{name}"
        dtype = dtype if kind not in ("argmax", "argmin") else src_dtype
        ctype = "int" if kind in ("any", "all") else c_type(dtype)
        identity = c_constant(reduction_identity(kind, dtype), dtype) if ctype != "int" else str(int(kind == "all"))
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
        _emit_split_loop(accumulators, updates, update_tags, clauses, row, printer, body, splits_rows(plan))
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
# a few threads and leave the others idle. When the rows are fewer than SPLIT_MAX_ROWS and a row has at
# least SPLIT_MIN_RED elements, the rows loop runs on one thread and each pass's chunk loop runs on all of
# them (`omp parallel for` with a reduction clause per accumulator: each thread sums its chunks, OpenMP adds
# the thread totals), as do the row's elementwise stores after the passes.
SPLIT_MAX_ROWS = 16
SPLIT_MIN_RED = 1 << 16


def splits_rows(plan: KernelPlan) -> bool:
    rows, red = plan.rows, plan.red
    return rows.is_Integer and int(rows) < SPLIT_MAX_ROWS and red.is_Integer and int(red) >= SPLIT_MIN_RED


def _emit_split_loop(accumulators: list[_Accumulator], updates, update_tags, clauses, row: str,
                     printer: CppPrinter, body: _Source, parallel: bool) -> None:
    """One pass with ACCUMULATOR_LANES partial accumulators per reduction, restarted every chunk
    (Note [Split accumulators], Note [Cascade sums])."""
    lanes, chunk = ACCUMULATOR_LANES, CASCADE_CHUNK
    tags = [LineTag(a.node) for a in accumulators]
    pragma = ""
    if parallel:
        pragma = " ".join(["#pragma omp parallel for"] + [f"reduction({SIMD_CLAUSE[a.kind]}:{a.name})"
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


@dataclass
class CppModule:
    source: str
    kernels: list[CppKernel]
    line_kernel: list  # per source line: (kernel name, LineTag) or None
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
                                      tune=getattr(module, "autotune", False))
        namespace[kernel.name] = function
    return cache_hit


def generate_module(kernels: list[Kernel], buffers: dict, size_symbols: list) -> CppModule:
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
    return CppModule("\n".join(lines) + "\n", generated, line_kernel)
