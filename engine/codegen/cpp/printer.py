"""The C++ printer (the ops protocol -> C++ lines, one spelling table) and the pieces every C++ kernel is
assembled from: the provenance-tagged source, stores, the signature (arguments found in the body)."""
from __future__ import annotations

import contextlib
import functools

import math
from dataclasses import dataclass, field

import sympy
import torch

from engine.codegen.kernel_core import Source, buffer_arguments, float_sizes, size_arguments
from engine.codegen.kernel_printer import INFIX, KernelPrinter, infix, shared_unary
from engine.ir.handlers import Var
from engine.ir.indexing import Bounded, FloorDiv, ModIndex, c_index, upper_bound
from engine.ir.nodes import Buffer
from engine.record import CatPieces
from engine.schedule.fusion import Kernel
from engine.schedule.kernel_plan import KernelPlan
from engine.schedule.tiling import Tiling

C_TYPES = {
    torch.float32: "float", torch.float64: "double", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "bool",
    torch.float16: "float", torch.bfloat16: "float",  # computed in float
}
STORAGE_TYPES = {**C_TYPES, torch.float16: "uint16_t", torch.bfloat16: "uint16_t"}
PARALLEL_MIN_ELEMENTS = 32768  # below this, starting OpenMP threads costs more than it saves
THREADS = "num_threads(gb_thread_count())"  # every parallel region's clause (Note [Kernel threads] in cpp/prelude.h)

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


C_INFIX = {**INFIX, "logical_and": "&&", "logical_or": "||"}


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
    **{op: infix(symbol) for op, symbol in C_INFIX.items()},
    **shared_unary(_one, lambda a: f"!{a}", lambda a: f"std::signbit({a})"),
    "abs": lambda p, a: f"std::abs({a})" if a.dtype != torch.bool else f"{a}",
    "rsqrt": lambda p, a: f"{_one(a)} / {_math_call('sqrt', a.dtype)}({a})",
    "sigmoid": lambda p, a: f"{_one(a)} / ({_one(a)} + {_math_call('exp', a.dtype)}(-{a}))",
    "relu": lambda p, a: f"{a} < {c_constant(0, a.dtype)} ? {c_constant(0, a.dtype)} : {a}",
    "isinf": lambda p, a: f"std::isinf({a})" if a.dtype.is_floating_point else "false",
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
        super().__init__(plan, buffers, compute=self._compute, index_ranges=index_ranges)
        self.inner_var = inner_var
        self.varying_symbols: set = {inner_var}
        self.row_cache: dict[str, bool] = {}  # node -> written by an earlier pass (Note [Row cache])
        self.row_cache_index: sympy.Symbol | None = None
        self.cache_written_now: set[str] = set()
        self.split = False  # a split reduction's chunk loops run on all threads (Note [Split reductions in C++])
        self.rounded: dict[str, tuple] = {}  # a to_dtype(half) value -> (its dtype, the value before rounding)
        self.staging: Staging | None = None  # 2D tiles: transposed reads go through a tile (Note [Staged reads])
        self.half_rows: HalfRows | None = None  # fp16 rows converted whole (Note [Vector half conversions])
        self.index_values: dict[str, sympy.Expr] = {}  # an index_expr's or integer constant's value, by Var name
        self.index_tests: list[sympy.Expr] = []  # a - b of each comparison of two index values (Note [Cat pieces])
        self.inner_gathers = False  # a read divides the inner variable (Note [Inner loops without gathers])

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

    # -- hooks (KernelPrinter) ------------------------------------------------------------------------------
    def new_var(self, name, dtype, varying=True):
        return Var(name, dtype, varying)

    def declare(self, var, text):
        return f"const {c_type(var.dtype)} {var} = {text};"

    def row_value(self, node, dtype, reduction_type):
        """The accumulator _emit_pass declares for the reduction (its index, for argmax/argmin)."""
        if reduction_type in ("argmax", "argmin"):
            return Var(f"acc_{node}_index", torch.int64, False)
        return Var(f"acc_{node}", dtype, False)

    def simplified(self, expr) -> sympy.Expr:
        """As KernelPrinter's, and a Bounded position that the loop ranges keep inside its bound is the plain
        position (a cat piece's read needs no clamp: Note [Cat pieces])."""
        expr = super().simplified(expr)
        if expr.has(Bounded):
            expr = expr.replace(lambda e: isinstance(e, Bounded) and self._within(e.args[0], 0, e.args[1] - 1),
                                lambda e: e.args[0])
        return expr

    def _bounds(self, expr) -> tuple[int | None, int | None]:
        """(lowest, highest) value of an index expression over the loop ranges, each None when unknown."""
        expr = sympy.expand(expr)
        if expr.is_Integer:
            return int(expr), int(expr)
        constant, rest = expr.as_coeff_Add()
        low = int(constant) if constant.is_Integer and rest.is_nonnegative else None
        high = upper_bound(expr, self.index_ranges)
        return low, int(high) if high is not None and high.is_Integer else None

    def _within(self, expr, low: int, high) -> bool:
        lo, hi = self._bounds(expr)
        return lo is not None and hi is not None and sympy.sympify(high).is_Integer and low <= lo and hi <= high

    # Note [Folded index tests]
    # A comparison of two index values (a cat's `position >= start`, a pad's `position < size`) is decided
    # where the loop ranges decide it: its value is the constant true or false, and a masked() body under a
    # false mask is not printed at all (its loads are not read, Note [Masked loads]). In an unsplit kernel
    # this rarely fires; in a cat piece (Note [Cat pieces]) every test of the cat dim folds, so the piece is
    # the body of its own input alone. Each comparison's difference (in the plan's variables) is kept in
    # `index_tests`, from which generate_kernel finds the cuts of a cat.
    COMPARISONS = ("lt", "le", "gt", "ge")

    def arithmetic(self, op, args):
        if op in self.COMPARISONS and all(a.name in self.index_values for a in args):
            difference = sympy.expand(self.index_values[args[0].name] - self.index_values[args[1].name])
            self.index_tests.append(difference - 1 if op in ("gt", "le") else difference)  # as `d >= 0`, `d < 0`
            low, high = self._bounds(self.simplified(difference))
            decided = {"lt": (high is not None and high < 0, low is not None and low >= 0),
                       "le": (high is not None and high <= 0, low is not None and low > 0),
                       "gt": (low is not None and low > 0, high is not None and high <= 0),
                       "ge": (low is not None and low >= 0, high is not None and high < 0)}[op]
            if decided[0] or decided[1]:
                return self.constant(decided[0], torch.bool)
        if op == "logical_and" and any(a.name in ("true", "false") for a in args):
            a, b = args
            if "false" in (a.name, b.name):
                return self.constant(False, torch.bool)
            return b if a.name == "true" else a
        return super().arithmetic(op, args)

    def masked(self, mask, body, other):
        if mask.name == "false":  # Note [Folded index tests]: never read
            return other
        return super().masked(mask, body, other)

    # -- ops -------------------------------------------------------------------------------------------------
    def index(self, expr) -> tuple[str, bool]:
        expr = self.simplified(expr)
        varying = bool(expr.free_symbols & self.varying_symbols)
        if varying and isinstance(expr, sympy.Add):
            expr = self._hoist_invariant_divisions(expr)
        return c_index(expr), varying

    # Note [Hoisted index divisions]
    # An index that mixes an affine part along the inner loop with divisions and remainders of the outer
    # variables (a permute's read, 3136*x + 200704*(y / 3136) + y % 56 + ..., or a broadcast over NCHW) stops
    # gcc from vectorizing the inner loop ("evolution of base is not affine"), even though the divisions do not
    # change along it. Their sum is computed once above the inner loop instead, as a named offset, and the
    # inner loop's index becomes that offset plus an affine expression.
    def _hoist_invariant_divisions(self, expr: sympy.Add) -> sympy.Expr:
        invariant = [t for t in expr.args if not t.free_symbols & self.varying_symbols]
        if not any(t.has(FloorDiv, ModIndex) for t in invariant):
            return expr
        offset = self.emit(c_index(sympy.Add(*invariant)), torch.int64, False)
        return sympy.Add(*[t for t in expr.args if t not in invariant]) + sympy.Symbol(str(offset), integer=True)

    def _load_memory(self, name, index):
        buffer = self.buffers[name]
        self.loaded.add(name)
        offset = buffer.storage_offset(index)
        stage = self.staging and self.staging.stage(name, buffer, self.simplified(offset))
        if buffer.dtype == torch.float16 and self.half_rows is not None:
            row = self.half_rows.load(self, name, stage, self.simplified(offset))
            if row is not None:
                return self.emit(row, buffer.dtype, True)
        if not stage and any(self.inner_var in a.free_symbols
                             for a in self.simplified(offset).atoms(FloorDiv, ModIndex)):
            self.inner_gathers = True  # Note [Inner loops without gathers] in cpp/module.py
        text, varying = (stage, True) if stage else self.index(offset)
        access = stage or f"{name}[{text}]"
        if buffer.dtype == torch.float16:
            access = f"gb_half_to_float({access})"
        elif buffer.dtype == torch.bfloat16:
            access = f"gb_bf16_to_float({access})"
        return self.emit(access, buffer.dtype, varying)

    def constant(self, value, dtype):
        var = Var(c_constant(value, dtype), dtype, False)
        if not (dtype.is_floating_point or dtype == torch.bool):
            self.index_values[var.name] = sympy.Integer(int(value))
        return var

    def index_expr(self, expr, dtype):
        text, varying = self.index(expr)
        var = self.emit(f"static_cast<{c_type(dtype)}>({text})", dtype, varying)
        if not (dtype.is_floating_point or dtype == torch.bool):
            self.index_values[var.name] = sympy.sympify(expr)
        return var

    def to_dtype(self, x, dtype):
        if dtype == torch.bool:
            return self.emit(f"({x} != 0)", dtype, x.varying)
        if dtype in (torch.float16, torch.bfloat16):
            rounding = "gb_round_half" if dtype == torch.float16 else "gb_round_bf16"
            rounded = self.emit(f"{rounding}(static_cast<float>({x}))", dtype, x.varying)
            self.rounded[str(rounded)] = (dtype, x)
            return rounded
        return self.emit(f"static_cast<{c_type(dtype)}>({x})", dtype, x.varying)

    def where(self, cond, a, b):
        if cond.name in ("true", "false"):  # Note [Folded index tests]
            return a if cond.name == "true" else b
        return self.emit(f"{cond} ? {a} : {b}", a.dtype, cond.varying or a.varying or b.varying)

    def declare_indirect(self, symbol, value, size):
        if size is None:  # a position already in range (Note [Op vocabulary]): read as is
            self.add_line(f"const int64_t {symbol} = static_cast<int64_t>({value});", value.varying)
        else:
            size_text, _ = self.index(size)
            self.add_line(f"const int64_t {symbol} = {value} < 0 ? {value} + {size_text} : "
                          f"static_cast<int64_t>({value});", value.varying)
        if value.varying:
            self.varying_symbols.add(symbol)
        return value.varying

    # -- kernel structure (Note [Kernel structure ops]) -----------------------------------------------------
    def store(self, name, index, value):
        offset = self.buffers[name].storage_offset(index)
        dtype, unrounded = self.rounded.get(str(value), (None, None))
        if dtype == self.buffers[name].dtype:  # the store rounds to that type itself: round once, not twice
            value = unrounded
        if self.buffers[name].dtype == torch.float16 and self.half_rows is not None:
            row = self.half_rows.store(self, name, self.simplified(offset))
            if row is not None:
                self.stores.append((f"{row} = {value};", self.tag))
                return
        index_text, _ = self.index(offset)
        self.stores.append((_store_text(self.buffers[name], index_text, value), self.tag))

    def store_add(self, name, index, value, keep):
        """Note [Accumulating stores], Note [Scatter kernels in C++]: a plain `+=` in a loop on one thread (the
        buffer holds the compute type: float, double or an integer)."""
        index_text, _ = self.index(self.buffers[name].storage_offset(index))
        if keep is not None and keep.name not in ("true", "1"):
            self.stores.append((f"if ({keep}) {name}[{index_text}] += {value};", self.tag))
        else:
            self.stores.append((f"{name}[{index_text}] += {value};", self.tag))


@dataclass
class HalfRows:
    """fp16 rows of the inner loop converted whole (Note [Vector half conversions] in cpp/prelude.h): a load
    or store contiguous along `var` (stride 1, no other value that changes inside the loop) reads or writes a
    float array instead, filled before the loop (`before`) or converted into memory after it (`after`). The
    loop walks var over [start, start + count), count <= capacity."""
    var: sympy.Symbol
    start: sympy.Symbol
    count: str
    capacity: int
    rows: dict = field(default_factory=dict)  # (buffer, first address, load/store) -> row array name
    before: list = field(default_factory=list)  # (line, tag) above the inner loop
    after: list = field(default_factory=list)  # (line, tag) below it

    def _first(self, printer, offset: sympy.Expr) -> sympy.Expr | None:
        """The offset at the loop's first step, or None when the access is not a contiguous row."""
        if offset.free_symbols & printer.varying_symbols != {self.var}:
            return None
        if any(self.var in a.free_symbols for a in offset.atoms(FloorDiv, ModIndex)):
            return None
        if sympy.expand(offset.subs(self.var, self.var + 1) - offset) != 1:
            return None
        return offset.subs(self.var, self.start)

    def _row(self, printer, key) -> tuple[str, bool]:
        if key in self.rows:
            return self.rows[key], False
        row = f"half_row{len(self.rows)}"
        self.rows[key] = row
        self.before.append((f"alignas(64) float {row}[{self.capacity}];", printer.tag))
        return row, True

    def load(self, printer, name: str, stage: str | None, offset: sympy.Expr) -> str | None:
        if stage is not None:  # a staged tile row: contiguous along the inner loop by construction
            source = printer.staging.row_start(stage)
        else:
            first = self._first(printer, offset)
            if first is None:
                return None
            source = f"&{name}[{printer.index(first)[0]}]"
        row, new = self._row(printer, (name, source, "load"))
        if new:
            self.before.append((f"gb_half_to_float_n({source}, {row}, {self.count});", printer.tag))
        return f"{row}[{self.var} - {self.start}]"

    def store(self, printer, name: str, offset: sympy.Expr) -> str | None:
        first = self._first(printer, offset)
        if first is None:
            return None
        target = f"&{name}[{printer.index(first)[0]}]"
        row, new = self._row(printer, (name, target, "store"))
        if new:
            self.after.append((f"gb_float_to_half_n({row}, {target}, {self.count});", printer.tag))
        return f"{row}[{self.var} - {self.start}]"


# Note [Staged reads]
# In a 2D tile (Note [Blocked loops in C++]) the inner loop runs along X, the output's contiguous axis, so a
# read that is contiguous along Y instead (x.t(), a permute's input) strides by a row per element: gcc turns it
# into a gather (float) or leaves the whole loop scalar (16-bit types have no gather). Such a read is staged:
# before the tile's rows are walked, a copy loop walks the tile along the read's own contiguous axis into a
# small array laid out like the output (stage[(y - yo) * TILE + (x - xo)]), and the vectorized inner loop
# reads the array contiguously. The copy keeps the storage type (a half read stays 16-bit until computed).
STAGE_MIN_STRIDE = 16  # a smaller stride along X is a few cache lines per tile row: read it directly
# by storage type: (function, block side), the widest block first (Note [Vector transposes] in cpp/prelude.h)
VECTOR_TRANSPOSES = {"float": [("gb_transpose16_f32", 16), ("gb_transpose8_f32", 8)],
                     "uint16_t": [("gb_transpose8_u16", 8)]}


@functools.lru_cache(maxsize=65536)
def _step(offset: sympy.Expr, symbol: sympy.Symbol) -> sympy.Expr:
    """How far `offset` moves when `symbol` grows by one, simplified. Cached by expression: every body that
    reads a staged buffer asks again for each load, and simplify is slow on a clamped window's Min/Max
    (reports/test_lanes.md)."""
    return sympy.simplify(offset.subs(symbol, symbol + 1) - offset)


@dataclass
class Staging:
    y: sympy.Symbol
    x: sympy.Symbol
    tile: int
    stages: dict = field(default_factory=dict)  # source (name, offset) -> (stage name, storage type)

    def stage(self, name: str, buffer: Buffer, offset: sympy.Expr) -> str | None:
        """The staged read of buffer `name` at `offset` (an index over y and x), or None to read it directly."""
        step = _step(offset, self.x)
        if not (step.is_Integer and abs(int(step)) >= STAGE_MIN_STRIDE) or self.y not in offset.free_symbols:
            return None
        key = (name, offset)
        if key not in self.stages:
            self.stages[key] = (f"stage{len(self.stages)}", STORAGE_TYPES[buffer.dtype])
        return f"{self.stages[key][0]}[({self.y} - {self.y}o) * {self.tile} + ({self.x} - {self.x}o)]"

    def row_start(self, access: str) -> str:
        """The address of the current tile row of a staged read (`access`, from stage()) at x = xo."""
        return f"&{access.split('[', 1)[0]}[({self.y} - {self.y}o) * {self.tile}]"

    def emit(self, body, tag=None, whole: bool = False) -> None:
        """Declare and fill every stage of the current tile (inside the tile loops, above its rows). A read that
        is affine along y (x.t()) is copied along y, contiguous in memory; any other (a permute's, with
        divisions and remainders of y) walks the tile's rows, with the y-only part of its index computed once per
        row, and reads a fixed stride along x. `whole`: the tile is known whole (Note [Whole tiles])."""
        y, x, tile = self.y, self.x, self.tile
        for stage, storage in self.stages.values():
            body.add(f"alignas(64) {storage} {stage}[{tile * tile}];", tag)
        target = f"[({y} - {y}o) * {tile} + ({x} - {x}o)]"
        for (name, offset), (stage, storage) in self.stages.items():
            if _step(offset, y) == 1:
                step = int(_step(offset, x))
                blocks = [(fn, side) for fn, side in VECTOR_TRANSPOSES.get(storage, []) if tile % side == 0]
                transpose, side = blocks[0] if blocks and step > 0 else (None, 1)
                if transpose:  # Note [Vector transposes] in cpp/prelude.h: whole tiles in register blocks
                    block = contextlib.nullcontext() if whole else \
                        body.block(f"if ({x}e - {x}o == {tile} && {y}e - {y}o == {tile})")
                    with block, body.block(f"for (int64_t {x} = {x}o; {x} < {x}e; {x} += {side})"), \
                            body.block(f"for (int64_t {y} = {y}o; {y} < {y}e; {y} += {side})"):
                        body.add(f"{transpose}(&{name}[{c_index(offset)}], {step}, &{stage}{target}, {tile});", tag)
                    if whole:
                        continue
                with body.block("else") if transpose else contextlib.nullcontext(), \
                        body.block(f"for (int64_t {x} = {x}o; {x} < {x}e; ++{x})"), \
                        body.block(f"for (int64_t {y} = {y}o; {y} < {y}e; ++{y})"):
                    body.add(f"{stage}{target} = {name}[{c_index(offset)}];", tag)
                continue
            row = sympy.Add(*[t for t in sympy.Add.make_args(offset) if x not in t.free_symbols])
            with body.block(f"for (int64_t {y} = {y}o; {y} < {y}e; ++{y})"):
                body.add(f"const int64_t {stage}_row = {c_index(row)};", tag)
                with body.block(f"for (int64_t {x} = {x}o; {x} < {x}e; ++{x})"):
                    body.add(f"{stage}{target} = {name}[{stage}_row + {c_index(offset - row)}];", tag)


@dataclass
class CppKernel:
    name: str
    source: str
    args: list[str]  # buffer names in signature order, then size symbols
    size_args: list[str]
    tiling: Tiling
    line_tags: list = field(default_factory=list)  # one per source line
    pieces: CatPieces | None = None  # a cat's loop nests, one per piece (Note [Cat pieces] in cpp/module.py)
    float_sizes: tuple[str, ...] = ()  # size arguments passed as doubles (Note [Derived sizes])

    def record_fields(self) -> dict:
        tiling = self.tiling.record()
        tiling.pieces = self.pieces
        return {"tiling": tiling}


def parallel_clause(work, loop: bool = True) -> str:
    """The OpenMP pragma for `work` elements: a parallel loop, or with `loop` False a parallel region whose
    loops share it out themselves (Note [Cat pieces]); none when the work is too small for threads."""
    if work.is_Integer and int(work) < PARALLEL_MIN_ELEMENTS:
        return ""
    condition = "" if work.is_Integer else f" if({c_index(work)} >= {PARALLEL_MIN_ELEMENTS})"
    return f"#pragma omp parallel{' for' if loop else ''}{condition} {THREADS}"


def _store_text(node: Buffer, index_text: str, value: Var) -> str:
    if node.dtype == torch.float16:
        value_text = f"gb_float_to_half({value})"
    elif node.dtype == torch.bfloat16:
        value_text = f"gb_float_to_bf16({value})"
    else:
        value_text = f"{value}"
    return f"{node.name}[{index_text}] = {value_text};"


def _signature(kernel: Kernel, buffers: dict, printer: CppPrinter, size_symbols) -> tuple[str, list[str], list[str]]:
    names = buffer_arguments(kernel, printer)
    params = [f"{'' if name in kernel.stored else 'const '}{STORAGE_TYPES[buffers[name].dtype]}* __restrict__ {name}"
              for name in names]
    sizes = size_arguments(size_symbols, printer)
    floats = float_sizes(size_symbols)
    params += [f"const {'double' if s in floats else 'int64_t'} {s}" for s in sizes]
    return f'extern "C" void {kernel.name}({", ".join(params)})', names, sizes


def finish_kernel(kernel, buffers, body: Source, printer: CppPrinter, size_symbols, tiling: Tiling) -> CppKernel:
    header, names, sizes = _signature(kernel, buffers, printer, size_symbols)
    lines = [header] + body.lines
    tags = [None] + body.tags
    floats = float_sizes(size_symbols)
    return CppKernel(kernel.name, "\n".join(lines), names, sizes, tiling, tags,
                     float_sizes=tuple(s for s in sizes if s in floats))
