"""Triton code generation: one @triton.jit kernel per fused kernel, all of a graph's kernels in one module.

Kernel shapes (Note [Fused loop shape]; Note [Triton kernel shapes]):
  pointwise   x0 = pid*XBLOCK + arange(XBLOCK); values are 1-D blocks; loads and stores masked by x0 < numel
  persistent  a 2-D tile [XBLOCK rows, RBLOCK >= red]: the whole row sits in registers, every reduction pass
              and the epilogue reuse the values loaded once (softmax and layernorm read the row once)
  looped      the same tile, walked along r in steps of RBLOCK: one loop per reduction pass, accumulating
              elementwise into a [XBLOCK, RBLOCK] accumulator reduced to one value per row after the loop
Values are Triton tensors; the printer is the same TextHandler over the ops protocol as the C++ one, and loads
follow the same Inliner rule. float16/bfloat16 are loaded into float32, computed there, stored rounded.
"""
from __future__ import annotations

import ast
import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import sympy
import torch
from sympy.printing.str import StrPrinter

from engine.codegen.provenance import LineTag
from engine.ir.handlers import TextHandler, Var
from engine.ir.indexing import simplify_index
from engine.ir.nodes import Buffer, Reduction
from engine.ir.ops import BINARY, UNARY, compute_dtype, reduction_identity, result_dtype, use_handler
from engine.schedule.fusion import Kernel, node_reads
from engine.schedule.kernel_plan import Inliner, KernelPlan

TL_TYPES = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
SIGNATURE_TYPES = {  # triton.compile's names for pointer arguments (display extras)
    torch.float32: "*fp32", torch.float64: "*fp64", torch.float16: "*fp16", torch.bfloat16: "*bf16",
    torch.int64: "*i64", torch.int32: "*i32", torch.int16: "*i16", torch.int8: "*i8", torch.uint8: "*u8",
    torch.bool: "*i1",
}
HALF = (torch.float16, torch.bfloat16)

# Note [Triton kernel shapes]
# A reduction of at most PERSISTENT_LIMIT elements per row runs persistent (RBLOCK = next power of two >= red,
# the row in registers: 8192 float32 over 16 warps is 16 registers a thread); longer or symbolic ones loop.
# Block sizes are launch-time constants (tl.constexpr), so the same source runs on a GPU and under the
# interpreter with different blocks. The interpreter runs one program at a time in Python with numpy, so it
# wants few, large programs; a GPU wants enough programs to fill its SMs and a few values per thread.
PERSISTENT_LIMIT = 8192
INTERPRETER_TILE = 1 << 15  # elements per program under the interpreter
INT32_LIMIT = 2 ** 31


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def tl_type(dtype: torch.dtype) -> str:
    return TL_TYPES[dtype]


# --- the prelude of helper functions -------------------------------------------------------------------------

_PRELUDE_PATH = Path(__file__).with_name("triton_prelude.py")


def _parse_prelude() -> tuple[str, dict[str, str], dict[str, set[str]]]:
    text = _PRELUDE_PATH.read_text()
    start = text.index("import os")
    header = text[start:text.index("# --- end of header")].rstrip() + "\n"
    lines = text.splitlines()
    helpers, calls = {}, {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            helpers[node.name] = "\n".join(lines[first - 1:node.end_lineno])
            calls[node.name] = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id.startswith("gb_")}
    return header, helpers, calls


PRELUDE_HEADER, HELPERS, HELPER_CALLS = _parse_prelude()


def _with_dependencies(names: set[str]) -> list[str]:
    """The helpers, each after the helpers it calls (Triton resolves names at compile time, so order is for
    the reader)."""
    ordered: list[str] = []

    def visit(name):
        if name in ordered:
            return
        for called in sorted(HELPER_CALLS[name] - {name}):
            visit(called)
        ordered.append(name)

    for name in sorted(names):
        visit(name)
    return ordered


# --- index expressions ---------------------------------------------------------------------------------------


class TritonIndexPrinter(StrPrinter):
    """Index expressions as Triton: // and % (operands are non-negative, so truncation is floor), and
    tl.maximum/tl.minimum for the clamps of masked-off reads."""

    def _operand(self, e):
        text = self._print(e)
        return f"({text})" if e.is_Add or e.is_Mul else text

    def _print_FloorDiv(self, e):
        return f"({self._operand(e.args[0])} // {self._operand(e.args[1])})"

    def _print_ModIndex(self, e):
        return f"({self._operand(e.args[0])} % {self._operand(e.args[1])})"

    def _fold(self, fn, args):
        text = self._print(args[0])
        for a in args[1:]:
            text = f"{fn}({text}, {self._print(a)})"
        return text

    def _print_Max(self, e):
        return self._fold("tl.maximum", e.args)

    def _print_Min(self, e):
        return self._fold("tl.minimum", e.args)

    def _print_Pow(self, e, rational=False):
        base, exponent = e.args
        if exponent.is_Integer and exponent > 0:
            return "(" + "*".join([self._operand(base)] * int(exponent)) + ")"
        raise ValueError(f"index expression {e} has a non-integer power")


_INDEX_PRINTER = TritonIndexPrinter()


def triton_index(expr) -> str:
    return _INDEX_PRINTER.doprint(expr)


# --- the printer ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TVar(Var):
    """A Triton value: `dims` are the kernel axes ("x" rows, "r" the reduction) it varies along, which say its
    shape ([XBLOCK, 1], [1, RBLOCK], ...). A literal is Python text (a constant), not yet a tensor."""
    dims: frozenset = frozenset()
    literal: bool = False
    value: object = None  # a literal's Python value


X, R = frozenset("x"), frozenset("r")
XR = X | R


def _literal(value, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        value = float(value)
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        text = repr(value)
        return f"({text})" if value < 0 else text
    value = int(value)
    return f"({value})" if value < 0 else str(value)


INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">",
         "ge": ">=", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "left_shift": "<<",
         "right_shift": ">>"}
BOOL_INFIX = {"add": "|", "mul": "&", "sub": "^", "maximum": "|", "minimum": "&"}
TL_UNARY = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2", "sqrt": "tl.sqrt_rn",
            "rsqrt": "tl.rsqrt", "sin": "tl.sin", "cos": "tl.cos", "erf": "tl.erf", "floor": "tl.floor",
            "ceil": "tl.ceil", "sigmoid": "tl.sigmoid"}
HELPER_UNARY = {name: f"gb_{name}" for name in (
    "expm1", "log1p", "tanh", "sinh", "cosh", "asinh", "acosh", "atanh", "tan", "asin", "acos", "atan", "erfc",
    "erfinv", "lgamma", "log10", "round", "trunc")}
INTEGER_IDENTITY = {"floor", "ceil", "trunc", "round"}  # on integers these return their argument


class TritonPrinter(TextHandler):
    """Writes one kernel body. `inner` is the axis of the innermost loop ("x" for pointwise, "r" for
    reductions): values that do not vary along it are hoisted above that loop (Note [Triton kernel shapes])."""

    def __init__(self, plan: KernelPlan, buffers: dict, inner: str, masks: dict):
        super().__init__()
        self.plan = plan
        self.buffers = buffers
        self.inner = inner
        self.masks = masks  # {"x": "xmask" or None, "r": "rmask" or None, "xr": ...}
        self.ranges = {plan.x: plan.rows, plan.r: plan.red}
        self.symbol_dims: dict = {plan.x: X, plan.r: R}
        self.hoisted: list[str] = []
        self.hoisted_tags: list = []
        self.inliner = Inliner(plan, external=self._load_memory, accumulator=lambda name: self.accumulators[name],
                               on_inline=self._enter_node)
        self.accumulators: dict[str, TVar] = {}
        self.loaded: set[str] = set()
        self.helpers: set[str] = set()

    # -- scopes (as in CppPrinter) ---------------------------------------------------------------------------
    def emit(self, text, dtype, dims=frozenset()):
        key = (text, dtype)
        if key in self._cache:
            return self._cache[key]
        varying = self.inner in dims
        var = TVar(next(self._names), dtype, varying, frozenset(dims))
        self.add_line(f"{var} = {text}", varying)
        self._cache[key] = var
        return var

    def add_line(self, line: str, varying: bool):
        (self.lines if varying else self.hoisted).append(line)
        (self.line_tags if varying else self.hoisted_tags).append(self.tag)

    def start_inner_loop(self):
        """Forget values of the previous loop over r (out of scope after it)."""
        self._cache = {k: v for k, v in self._cache.items() if not v.varying}
        self.inliner.memo = {k: v for k, v in self.inliner.memo.items() if not getattr(v, "varying", True)}
        self.lines, self.line_tags = [], []

    def take(self) -> tuple[list[str], list]:
        """Hoisted lines, then the loop's lines; both emptied."""
        lines, tags = self.hoisted + self.lines, self.hoisted_tags + self.line_tags
        self.hoisted, self.hoisted_tags, self.lines, self.line_tags = [], [], [], []
        return lines, tags

    def take_hoisted(self) -> tuple[list[str], list]:
        lines, tags = self.hoisted, self.hoisted_tags
        self.hoisted, self.hoisted_tags = [], []
        return lines, tags

    def _enter_node(self, node: Buffer):
        previous = self.tag
        self.tag = LineTag(node.name)
        return lambda: setattr(self, "tag", previous)

    # -- helpers -------------------------------------------------------------------------------------------
    def helper(self, name: str) -> str:
        self.helpers.add(name)
        return name

    def mask(self, dims) -> str | None:
        key = "".join(sorted(dims, reverse=True))  # "x", "r", "xr"
        return self.masks.get(key)

    def tensor(self, v: TVar) -> str:
        """Text of `v` as a Triton tensor (a literal becomes a 0-d tensor of its dtype)."""
        return f"tl.full([], {v}, {tl_type(compute_dtype(v.dtype))})" if v.literal else str(v)

    def index(self, expr) -> tuple[str, frozenset]:
        expr = simplify_index(sympy.expand(sympy.sympify(expr)), self.ranges)
        dims = frozenset().union(*[self.symbol_dims.get(s, frozenset()) for s in expr.free_symbols])
        return triton_index(expr), dims

    # -- special ops ---------------------------------------------------------------------------------------
    def load(self, name, index):
        return self.inliner.load(name, index)

    def _load_memory(self, name, index):
        buffer = self.buffers[name]
        self.loaded.add(name)
        offset, dims = self.index(buffer.storage_offset(index))
        mask = self.mask(dims)
        other = "0.0" if buffer.dtype.is_floating_point else "0"
        text = f"tl.load({name} + ({offset})" + (f", mask={mask}, other={other})" if mask else ")")
        if buffer.dtype in HALF:
            text += ".to(tl.float32)"
        return self.emit(text, buffer.dtype, dims)

    def constant(self, value, dtype):
        if dtype in (torch.float64, torch.int64) and not (
                dtype == torch.int64 and -INT32_LIMIT <= int(value) < INT32_LIMIT):
            # a Python literal would be float32 / int32 in Triton
            return self.emit(f"tl.full([], {_literal(value, dtype)}, {tl_type(dtype)})", dtype)
        return TVar(_literal(value, dtype), dtype, False, frozenset(), True, value)

    def index_expr(self, expr, dtype):
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return self.constant(int(expr), dtype)
        text, dims = self.index(expr)
        if not dims:  # sizes only: a scalar, made a tensor of the index type first
            text = f"tl.full([], {text}, tl.int64)"
        if dtype == torch.bool:
            return self.emit(f"({text}) != 0", dtype, dims)
        return self.emit(f"({text}).to({tl_type(compute_dtype(dtype))})", dtype, dims)

    def to_dtype(self, x, dtype):
        if x.literal:  # convert the Python value the way torch would
            try:
                converted = torch.tensor(x.value, dtype=compute_dtype(x.dtype)).to(dtype).item()
            except (RuntimeError, ValueError, OverflowError):
                return self.emit(f"{self.tensor(x)}.to({tl_type(compute_dtype(dtype))})", dtype)
            return self.constant(converted, dtype)
        if dtype == torch.bool:
            return self.emit(f"{x} != 0", dtype, x.dims)
        if dtype in HALF:  # round to the half type, keep computing in float32
            return self.emit(f"{x}.to({tl_type(dtype)}).to(tl.float32)", dtype, x.dims)
        if compute_dtype(x.dtype) == compute_dtype(dtype):
            return TVar(x.name, dtype, x.varying, x.dims, x.literal)
        return self.emit(f"{x}.to({tl_type(dtype)})", dtype, x.dims)

    def where(self, cond, a, b):
        if cond.literal:
            return a if cond.name == "True" else b
        return self.emit(f"tl.where({cond}, {a}, {b})", a.dtype, cond.dims | a.dims | b.dims)

    def indirect(self, value, size):
        symbol = self.new_indirect_symbol()
        size_text, size_dims = self.index(size)
        self.symbol_dims[symbol] = value.dims | size_dims
        self.add_line(f"{symbol} = tl.where({value} < 0, {value} + {size_text}, {value})",
                      self.inner in self.symbol_dims[symbol])
        return symbol

    # -- arithmetic ----------------------------------------------------------------------------------------
    def compute(self, op: str, args: list[TVar]) -> TVar:
        if op in INTEGER_IDENTITY and not args[0].dtype.is_floating_point:
            return args[0]
        if all(a.literal for a in args):  # keep Triton from folding Python constants with Python's rules
            first = args[0]
            args = [TVar(self.tensor(first), first.dtype, False, frozenset())] + list(args[1:])
        text = self.expr(op, args)
        return self.emit(text, result_dtype(op, [a.dtype for a in args]), frozenset().union(*[a.dims for a in args]))

    def expr(self, op, args):
        a = args[0]
        floating = a.dtype.is_floating_point
        boolean = a.dtype == torch.bool
        if len(args) == 2:
            return self._binary(op, a, args[1], floating, boolean)
        if op in TL_UNARY or op in HELPER_UNARY:
            fn = TL_UNARY.get(op) or self.helper(HELPER_UNARY[op])
            if floating:
                return f"{fn}({self.tensor(a)})"
            return f"{fn}({self.tensor(a)}.to(tl.float64)).to({tl_type(a.dtype)})"  # as C++: via double
        simple = {
            "neg": f"-{a}", "abs": f"{a}" if boolean else f"tl.abs({self.tensor(a)})",
            "relu": f"tl.where({a} < 0, 0, {a})", "reciprocal": f"1.0 / {a}", "square": f"{a} * {a}",
            "logical_not": f"{a} == 0", "bitwise_not": f"{a} == 0" if boolean else f"~{a}",
            "isnan": f"{a} != {a}", "isinf": f"tl.abs({a}) == float(\"inf\")" if floating else f"{a} != {a}",
            "signbit": f"{self.helper('gb_signbit')}({a})" if floating else f"{a} < 0",
            "sign": f"{a}" if boolean else f"{self.helper('gb_sign')}({a})",
        }
        if op in simple:
            return simple[op]
        raise NotImplementedError(f"Triton printer has no rule for {op}")

    def _binary(self, op, a, b, floating, boolean):
        if boolean and b.dtype == torch.bool and op in BOOL_INFIX:
            return f"{a} {BOOL_INFIX[op]} {b}"
        if op in INFIX:
            return f"{a} {INFIX[op]} {b}"
        if op == "truediv":
            return f"{a} / {b}"
        if op == "floordiv":
            return f"tl.floor({a} / {b})" if floating else f"{self.helper('gb_floordiv_int')}({a}, {b})"
        if op == "truncdiv":
            return f"{self.helper('gb_trunc')}({a} / {b})" if floating else f"{a} // {b}"
        if op == "remainder":
            return f"{self.helper('gb_remainder')}({a}, {b})"
        if op == "fmod":
            return f"{a} % {b}"
        if op == "pow":
            return f"{self.helper('gb_pow' if floating else 'gb_pow_int')}({self.tensor(a)}, {self.tensor(b)})"
        if op in ("maximum", "minimum"):
            if floating:
                return f"{self.helper('gb_' + op)}({self.tensor(a)}, {b})"
            return f"tl.{op}({self.tensor(a)}, {b})"
        if op in ("atan2", "hypot", "copysign"):
            return f"{self.helper('gb_' + op)}({self.tensor(a)}, {self.tensor(b)})"
        logical = {"logical_and": "&", "logical_or": "|", "logical_xor": "^"}
        if op in logical:
            return f"({a} != 0) {logical[op]} ({b} != 0)"
        raise NotImplementedError(f"Triton printer has no rule for {op}")


def _make_op(name):
    def op(self, *args):
        return self.compute(name, list(args))
    op.__name__ = name
    return op


for _name in UNARY + BINARY:
    setattr(TritonPrinter, _name, _make_op(_name))


# --- launch configuration ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchConfig:
    XBLOCK: int
    RBLOCK: int | None = None
    num_warps: int = 4

    def kwargs(self) -> dict:
        values = {"XBLOCK": self.XBLOCK, "num_warps": self.num_warps}
        if self.RBLOCK is not None:
            values["RBLOCK"] = self.RBLOCK
        return values

    def text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.kwargs().items())


def _static(expr) -> int | None:
    expr = sympy.sympify(expr)
    return int(expr) if expr.is_Integer else None


def choose_config(form: str, rows, red, interpreter: bool) -> LaunchConfig:
    """Block sizes and warps from the kernel's form and (static) sizes; symbolic sizes get defaults."""
    rows, red = _static(rows), _static(red)
    rows_p2 = next_power_of_2(rows) if rows is not None else None
    if form == "pointwise":
        limit = INTERPRETER_TILE if interpreter else 1024
        xblock = min(limit, max(16, rows_p2)) if rows_p2 is not None else limit
        return LaunchConfig(xblock, None, max(1, min(4, xblock // 256)))
    if form == "persistent":
        rblock = next_power_of_2(red)
        target = INTERPRETER_TILE if interpreter else 2048
        xblock = max(1, min(target // rblock, 64 if not interpreter else INTERPRETER_TILE, rows_p2 or 1))
        return LaunchConfig(xblock, rblock, max(1, min(16, xblock * rblock // 256)))
    rblock = 4096 if interpreter else 2048  # looped
    xblock = max(1, min(INTERPRETER_TILE // rblock, rows_p2 or 1)) if interpreter else 1
    return LaunchConfig(xblock, rblock, 8)


def candidate_configs(form: str, rows, red) -> list[LaunchConfig]:
    """A few configs around the heuristic's, for autotuning on a GPU."""
    base = choose_config(form, rows, red, interpreter=False)
    if form == "pointwise":
        options = [base] + [LaunchConfig(x, None, w) for x, w in ((256, 2), (512, 4), (1024, 4), (2048, 8), (4096, 8))]
    elif form == "persistent":
        options = [base] + [LaunchConfig(x, base.RBLOCK, w) for x in (1, 2, 4, 8) for w in (4, 8, 16)
                            if x * base.RBLOCK <= 16384 and x * base.RBLOCK >= 32 * w]
    else:
        options = [base] + [LaunchConfig(1, r, w) for r, w in ((512, 4), (1024, 4), (1024, 8), (4096, 8), (4096, 16))]
    rows_p2 = next_power_of_2(_static(rows)) if _static(rows) is not None else None
    unique = []
    for option in options:
        if rows_p2 is not None and option.XBLOCK > max(rows_p2, 16 if form == "pointwise" else 1):
            continue
        if option not in unique:
            unique.append(option)
    return unique


# --- kernels -------------------------------------------------------------------------------------------------


@dataclass
class TritonKernel:
    name: str
    source: str
    args: list[str]  # buffer names in signature order
    size_args: list[str]
    form: str  # pointwise | persistent | looped
    rows: sympy.Expr
    red: sympy.Expr
    config: LaunchConfig
    int64: bool
    signature: dict  # argument name -> triton type ("*fp32", "i32", "constexpr") for triton.compile
    arg_layouts: dict  # buffer name -> (size, stride, dtype), for autotuning with stand-in tensors
    line_tags: list = field(default_factory=list)
    autotune: list = field(default_factory=list)  # [{"config", "ms"}] once tuned
    autotune_cached: bool = False

    def grid(self, config: LaunchConfig | None = None) -> tuple | None:
        rows = _static(self.rows)
        if rows is None:
            return None
        block = (config or self.config).XBLOCK
        return ((rows + block - 1) // block, 1, 1)

    def grid_text(self) -> str:
        static = self.grid()
        if static is not None:
            return str(static)
        rows = triton_index(sympy.sympify(self.rows))
        return f"((({rows}) + {self.config.XBLOCK - 1}) // {self.config.XBLOCK}, 1, 1)"

    def record_fields(self) -> dict:
        """What the record shows about this kernel beyond its source (report.py)."""
        return {"triton": {
            "form": self.form, "config": self.config.kwargs(), "grid": self.grid_text(), "int64_index": self.int64,
            "signature": self.signature, "rows": str(self.rows), "red": str(self.red),
            "autotune": self.autotune, "autotune_cached": self.autotune_cached}}


class _Source:
    def __init__(self, depth: int = 1):
        self.lines: list[str] = []
        self.tags: list = []
        self.depth = depth

    def add(self, line: str, tag=None):
        self.lines.append("    " * self.depth + line)
        self.tags.append(tag)

    def extend(self, pair):
        for line, tag in zip(*pair):
            self.add(line, tag)


def kernel_form(kernel: Kernel) -> str:
    if kernel.kind != "reduction":
        return "pointwise"
    red = _static(kernel.red)
    return "persistent" if red is not None and red <= PERSISTENT_LIMIT else "looped"


def _needs_int64(kernel: Kernel, buffers: dict) -> bool:
    sizes = [kernel.rows * kernel.red] + [buffers[n].numel for n in kernel.reads + kernel.stored if n in buffers]
    return any(_static(s) is None or _static(s) >= INT32_LIMIT for s in sizes)


def reduction_passes(kernel: Kernel, buffers: dict) -> list[list[Reduction]]:
    """Reductions grouped by how many reductions feed them: pass k needs the results of pass k-1."""
    names = {n.name for n in kernel.nodes}
    depth: dict[str, int] = {}
    for node in kernel.nodes:
        inputs = [depth.get(r, 0) for r in node_reads(node, buffers) if r in names]
        depth[node.name] = max(inputs, default=0) + (1 if isinstance(node, Reduction) else 0)
    passes: dict[int, list[Reduction]] = {}
    for node in kernel.nodes:
        if isinstance(node, Reduction):
            passes.setdefault(depth[node.name], []).append(node)
    return [passes[k] for k in sorted(passes)]


def generate_kernel(kernel: Kernel, buffers: dict, size_symbols: list, interpreter: bool) -> TritonKernel:
    plan = kernel.plan
    form = kernel_form(kernel)
    int64 = _needs_int64(kernel, buffers)
    config = choose_config(form, plan.rows, plan.red, interpreter)
    masks = _masks(form, plan, config)
    printer = TritonPrinter(plan, buffers, "x" if form == "pointwise" else "r", masks)
    body = _Source()
    with use_handler(printer):
        if form == "pointwise":
            _pointwise_body(kernel, plan, printer, body, masks, int64)
        else:
            _reduction_body(kernel, plan, printer, body, masks, int64, form, buffers)
    return _finish(kernel, buffers, printer, body, size_symbols, form, config, int64)


def _masks(form: str, plan: KernelPlan, config: LaunchConfig) -> dict:
    """Which masks the kernel needs. A block that divides its axis needs none; the source must hold for every
    config it may launch with (the GPU's, the interpreter's, the autotuner's), so all of them must divide."""
    configs = [config, choose_config(form, plan.rows, plan.red, True), choose_config(form, plan.rows, plan.red, False)]
    configs += candidate_configs(form, plan.rows, plan.red)
    rows, red = _static(plan.rows), _static(plan.red)
    x_needed = rows is None or any(rows % c.XBLOCK for c in configs)
    masks = {"x": "xmask" if x_needed else None}
    if form != "pointwise":
        r_needed = red is None or any(red % c.RBLOCK for c in configs)
        masks["r"] = "rmask" if r_needed else None
        masks["xr"] = "xrmask" if x_needed and r_needed else masks["x"] or masks["r"]
    return masks


def _rows_header(body: _Source, plan: KernelPlan, masks: dict, int64: bool, two_d: bool):
    pid = "tl.program_id(0).to(tl.int64)" if int64 else "tl.program_id(0)"
    body.add(f"xoffset = {pid} * XBLOCK")
    body.add(f"x0 = xoffset + tl.arange(0, XBLOCK){'[:, None]' if two_d else ''}")
    if masks["x"]:
        body.add(f"xmask = x0 < {triton_index(plan.rows)}")


def _r_header(body: _Source, plan: KernelPlan, masks: dict, int64: bool, start: str):
    r = f"{start}tl.arange(0, RBLOCK)[None, :]"
    body.add(f"r0 = ({r}).to(tl.int64)" if int64 else f"r0 = {r}")
    if masks["r"]:
        body.add(f"rmask = r0 < {triton_index(plan.red)}")
    if masks["r"] and masks["x"]:
        body.add("xrmask = xmask & rmask")


def _store(printer: TritonPrinter, node: Buffer, plan: KernelPlan, value: TVar, dims: frozenset, shape: str) -> str:
    offset, offset_dims = printer.index(node.storage_offset(plan.index(node)))
    if offset_dims != dims:  # e.g. a scalar output: the pointer needs the block's shape for the mask
        offset = f"{offset} + tl.zeros({shape}, tl.int32)"
    text = str(value)
    if node.dtype in HALF and not value.literal:
        text = f"{value}.to({tl_type(node.dtype)})"
    mask = printer.mask(dims)
    return f"tl.store({node.name} + ({offset}), {text}{f', mask={mask}' if mask else ''})"


def _pointwise_body(kernel, plan, printer, body, masks, int64):
    _rows_header(body, plan, masks, int64, two_d=False)
    stores = []
    for node in [n for n in kernel.nodes if n.name in kernel.stored]:
        printer.tag = LineTag(node.name)
        value = node.inner_fn(plan.index(node))
        stores.append((_store(printer, node, plan, value, X, "[XBLOCK]"), LineTag(node.name)))
    body.extend(printer.take())
    for line, tag in stores:
        body.add(line, tag)


# Reductions (Note [torch semantics in Triton] in triton_prelude.py): each value is first made a full
# [XBLOCK, RBLOCK] tile with masked-off lanes set to the reduction's identity, then reduced along axis 1.
ROW_REDUCE = {"sum": "tl.sum({t}, 1)[:, None]", "prod": "tl.reduce({t}, 1, gb_mul)[:, None]",
              "any": "tl.max({t}, 1)[:, None] > 0", "all": "tl.min({t}, 1)[:, None] > 0"}
ELEMENTWISE = {"sum": "{acc} + {t}", "prod": "{acc} * {t}", "any": "tl.maximum({acc}, {t})",
               "all": "tl.minimum({acc}, {t})"}


def _accumulator_dtype(node: Reduction) -> torch.dtype:
    if node.reduction_type in ("any", "all"):
        return torch.int32
    if node.reduction_type in ("argmax", "argmin"):
        return compute_dtype(node.src_dtype)
    if node.reduction_type in ("max", "min") and node.dtype == torch.bool:
        return torch.int32
    return compute_dtype(node.dtype)


def _tile(printer: TritonPrinter, node: Reduction, value: TVar) -> tuple[TVar, torch.dtype, str]:
    kind = node.reduction_type
    dtype = _accumulator_dtype(node)
    identity = int(kind == "all") if dtype == torch.int32 and kind in ("any", "all") else \
        reduction_identity(kind, node.src_dtype if kind in ("argmax", "argmin") else dtype)
    if kind in ("any", "all") or dtype == torch.int32 and value.dtype == torch.bool:
        value = printer.emit(f"({printer.tensor(value)} != 0).to(tl.int32)", torch.int32, value.dims)
    elif value.literal or compute_dtype(value.dtype) != dtype:
        value = printer.emit(f"{printer.tensor(value)}.to({tl_type(dtype)})", dtype, value.dims)
    identity_text = _literal(identity, dtype)
    mask = printer.mask(XR)
    text, dims = str(value), value.dims
    if mask:
        text = f"tl.where({mask}, {text}, {identity_text})"
        dims = dims | {"xmask": X, "rmask": R, "xrmask": XR}[mask]
    if dims != XR:
        text = f"{text} + tl.zeros([XBLOCK, RBLOCK], {tl_type(dtype)})"
    return printer.emit(text, dtype, XR), dtype, identity_text


def _row_value(printer: TritonPrinter, node: Reduction, tile: str, index: str | None) -> str:
    kind = node.reduction_type
    floating = _accumulator_dtype(node).is_floating_point
    if kind in ROW_REDUCE:
        if kind == "prod":
            printer.helper("gb_mul")
        return ROW_REDUCE[kind].format(t=tile)
    if kind in ("max", "min"):
        return f"{printer.helper(f'gb_{kind}_row')}({tile})" if floating else f"tl.{kind}({tile}, 1)[:, None]"
    return f"{printer.helper(f'gb_{kind}_row')}({tile}, {index})"


def _reduction_body(kernel, plan, printer, body, masks, int64, form, buffers):
    _rows_header(body, plan, masks, int64, two_d=True)
    index_type = "tl.int64" if int64 else "tl.int32"
    if form == "persistent":
        _r_header(body, plan, masks, int64, "")
    for group in reduction_passes(kernel, buffers):
        if form == "looped":
            printer.start_inner_loop()
        updates, finals, inits = [], [], []
        for node in group:
            printer.tag = tag = LineTag(node.name)
            value = node.inner_fn(plan.index(node), plan.rindex(node))
            tile, dtype, identity = _tile(printer, node, value)
            arg = node.reduction_type in ("argmax", "argmin")
            indices = printer.emit(f"r0 + tl.zeros([XBLOCK, RBLOCK], {index_type})", torch.int64, XR) if arg else None
            row = f"row_{node.name}"
            if form == "persistent":
                finals.append((f"{row} = {_row_value(printer, node, tile.name, indices and indices.name)}", tag))
            else:
                acc = f"acc_{node.name}"
                inits.append((f"{acc} = tl.full([XBLOCK, RBLOCK], {identity}, {tl_type(dtype)})", tag))
                if arg:
                    inits.append((f"{acc}_index = tl.full([XBLOCK, RBLOCK], 2147483647, {index_type})", tag))
                    update = printer.helper(f"gb_{node.reduction_type}_update")
                    updates.append((f"{acc}, {acc}_index = {update}({acc}, {acc}_index, {tile}, {indices})", tag))
                else:
                    kind = node.reduction_type
                    floating = dtype.is_floating_point
                    if kind in ("max", "min"):
                        step = f"{printer.helper(f'gb_{kind}imum')}({acc}, {tile})" if floating else \
                            f"tl.{kind}imum({acc}, {tile})"
                    else:
                        step = ELEMENTWISE[kind].format(acc=acc, t=tile)
                    updates.append((f"{acc} = {step}", tag))
                finals.append((f"{row} = {_row_value(printer, node, acc, f'{acc}_index' if arg else None)}", tag))
            printer.accumulators[node.name] = TVar(row, node.dtype, False, X)
        if form == "persistent":
            body.extend(printer.take())
        else:
            body.extend(printer.take_hoisted())
            for line, tag in inits:
                body.add(line, tag)
            _r_loop(body, plan, masks, int64, printer, updates)
        for line, tag in finals:
            body.add(line, tag)
    _reduction_stores(kernel, plan, printer, body, masks, int64, form)


def _r_loop(body, plan, masks, int64, printer, tail):
    body.add(f"for roffset in range(0, {triton_index(plan.red)}, RBLOCK):")
    body.depth += 1
    _r_header(body, plan, masks, int64, "roffset + ")
    body.extend((printer.lines, printer.line_tags))
    for line, tag in tail:
        body.add(line, tag)
    body.depth -= 1
    printer.lines, printer.line_tags = [], []


def _reduction_stores(kernel, plan, printer, body, masks, int64, form):
    stored = [n for n in kernel.nodes if n.name in kernel.stored]
    rows = [n for n in stored if plan.role(n) != "full"]
    full = [n for n in stored if plan.role(n) == "full"]
    stores = []
    for node in rows:
        printer.tag = LineTag(node.name)
        value = printer.accumulators[node.name] if isinstance(node, Reduction) else node.inner_fn(plan.index(node))
        stores.append((_store(printer, node, plan, value, X, "[XBLOCK, 1]"), LineTag(node.name)))
    body.extend(printer.take_hoisted())
    if form == "persistent":
        body.extend((printer.lines, printer.line_tags))
        printer.lines, printer.line_tags = [], []
    for line, tag in stores:
        body.add(line, tag)
    if not full:
        return
    if form == "looped":
        printer.start_inner_loop()
    stores = []
    for node in full:
        printer.tag = LineTag(node.name)
        value = node.inner_fn(plan.index(node))
        stores.append((_store(printer, node, plan, value, XR, "[XBLOCK, RBLOCK]"), LineTag(node.name)))
    body.extend(printer.take_hoisted())
    if form == "persistent":
        body.extend(printer.take())
        for line, tag in stores:
            body.add(line, tag)
    else:
        _r_loop(body, plan, masks, int64, printer, stores)


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _finish(kernel, buffers, printer, body, size_symbols, form, config, int64) -> TritonKernel:
    text = "\n".join(body.lines)
    used = set(_IDENTIFIER.findall(text))
    args = [n for n in kernel.reads if n in printer.loaded] + list(kernel.stored)
    sizes = [str(s) for s in size_symbols if str(s) in used]
    constexprs = ["XBLOCK"] + ([] if form == "pointwise" else ["RBLOCK"])
    params = args + sizes + [f"{c}: tl.constexpr" for c in constexprs]
    header = [f"@triton.jit", f"def {kernel.name}({', '.join(params)}):"]
    prologue = [f"    {s} = {s}.to(tl.int64)" for s in sizes] if int64 else []
    lines = header + prologue + body.lines
    tags = [None] * (len(header) + len(prologue)) + body.tags
    signature = {name: SIGNATURE_TYPES[buffers[name].dtype] for name in args}
    signature.update({s: "i32" for s in sizes})
    signature.update({c: "constexpr" for c in constexprs})
    layouts = {}
    for name in args:
        buffer = buffers[name]
        layouts[name] = ([_static(s) for s in buffer.size], [_static(s) for s in buffer.stride], buffer.dtype)
    return TritonKernel(kernel.name, "\n".join(lines), args, sizes, form, kernel.rows, kernel.red, config, int64,
                        signature, layouts, tags, [])


# --- the module ----------------------------------------------------------------------------------------------


@dataclass
class TritonModule:
    source: str
    kernels: list[TritonKernel]
    line_kernel: list  # per source line: (kernel name, LineTag) or None
    interpreter: bool  # kernels meant for the interpreter (the graph is on the CPU)
    autotune: bool = False  # set before launch_text to autotune on the GPU (mode="max-autotune")
    language = "triton"

    @property
    def key(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:24]

    def tunable(self, kernel: TritonKernel) -> bool:
        return self.autotune and not self.interpreter and kernel.grid() is not None and all(
            all(v is not None for v in layout[0] + layout[1]) for layout in kernel.arg_layouts.values())

    def launch_text(self, kernel: TritonKernel) -> str:
        """The wrapper's call: the jit function's run() with the grid and block sizes worked out here, so a
        launch does no work beyond Triton's own argument handling (the lean launch path)."""
        args = ", ".join(kernel.args + kernel.size_args)
        if self.tunable(kernel):  # filled in by load_kernels once the configs are timed
            return f"{kernel.name}.run({args}, grid={kernel.name}_grid, warmup=False, **{kernel.name}_config)"
        return f"{kernel.name}.run({args}, grid={kernel.grid_text()}, warmup=False, {kernel.config.text()})"


def generate_module(kernels: list[Kernel], buffers: dict, size_symbols: list) -> TritonModule:
    """All generated kernels of one graph in one Python module (imported once per graph)."""
    devices = {n.device for k in kernels for n in k.nodes if k.kind in ("pointwise", "reduction")}
    interpreter = not any(str(d).startswith("cuda") for d in devices)
    generated = [generate_kernel(k, buffers, size_symbols, interpreter) for k in kernels
                 if k.kind in ("pointwise", "reduction")]
    helpers = set()
    for kernel in generated:
        helpers |= {name for name in HELPERS if re.search(rf"\b{name}\(", kernel.source)}
    lines = ['"""Triton kernels generated by Glassbox."""'] + PRELUDE_HEADER.splitlines()
    for name in _with_dependencies(helpers):
        lines += ["", ""] + HELPERS[name].splitlines()
    line_kernel: list = [None] * len(lines)
    for kernel in generated:
        lines += ["", ""]
        line_kernel += [None, None]
        for line, tag in zip(kernel.source.splitlines(), kernel.line_tags):
            lines.append(line)
            line_kernel.append((kernel.name, tag))
    return TritonModule("\n".join(lines) + "\n", generated, line_kernel, interpreter)


def load_kernels(module: TritonModule, namespace: dict, device: str = "cpu") -> bool:
    """Import the module's kernels (under the interpreter on the CPU, Note [Math under the interpreter]) and
    put one jit function per kernel name in namespace; autotune first if the module asks for it."""
    from engine.codegen import triton_build

    interpret = not str(device).startswith("cuda")
    loaded, cache_hit = triton_build.load_source(module.source, interpret=interpret)
    namespace["_triton_module"] = loaded  # keeps the module alive as long as the wrapper
    for kernel in module.kernels:
        namespace[kernel.name] = getattr(loaded, kernel.name)
        if module.tunable(kernel):
            best = triton_build.autotune(kernel, getattr(loaded, kernel.name), namespace, device, module.key)
            namespace[f"{kernel.name}_config"] = best.kwargs()
            namespace[f"{kernel.name}_grid"] = kernel.grid(best)
    return cache_hit
