"""The Triton printer: loop bodies in the ops protocol -> lines of Triton (engine/codegen/triton/kernel.py puts the
lines into kernels).

Like CppPrinter it is a KernelPrinter (one temporary per op, identical expressions shared) whose loads follow
kernel_plan.Inliner. Each value is a Triton tensor whose shape is known from the kernel axes it varies along
(TVar.dims): [XBLOCK] in a pointwise kernel, [XBLOCK, 1] / [1, RBLOCK] / [XBLOCK, RBLOCK] in a reduction tile.
Loads are masked by exactly the axes their index varies along. Index expressions are sympy, printed as Python
over the kernel's index variables x0 and r0 (the plan's own symbols, so no substitution is needed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import sympy
import torch

from engine.codegen.kernel_printer import INFIX, KernelPrinter, infix, shared_unary
from engine.ir import derived
from engine.ir.handlers import Var
from engine.ir.indexing import Bounded, PythonIndexPrinter
from engine.ir.ops import compute_dtype, result_dtype
from engine.schedule.kernel_plan import KernelPlan

TL_TYPES = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}
HALF = (torch.float16, torch.bfloat16)
INT32_LIMIT = 2 ** 31


def tl_type(dtype: torch.dtype) -> str:
    return TL_TYPES[dtype]


# --- index expressions ---------------------------------------------------------------------------------------


class TritonIndexPrinter(PythonIndexPrinter):
    """Index expressions as Triton: Python's // and % (operands are non-negative, so truncation is floor) and
    its refusal of fractions (Note [Index printing]), with tl.maximum/tl.minimum for the clamps of masked-off
    reads."""

    max_fn, min_fn = "tl.maximum", "tl.minimum"


_INDEX_PRINTER = TritonIndexPrinter()


def triton_index(expr) -> str:
    return _INDEX_PRINTER.doprint(expr)


# --- the printer ---------------------------------------------------------------------------------------------


def _both(condition, block_mask: str) -> str:
    """A masked() body's condition and the block's mask, for a load (Note [No & and | on conditions]: a 0-d
    condition is combined through tl.where)."""
    return f"{condition} & {block_mask}" if condition.dims else f"tl.where({condition}, {block_mask}, False)"


@dataclass(frozen=True)
class TVar(Var):
    """A Triton value: `dims` are the kernel axes ("x" rows, "r" the reduction) it varies along, which say its
    shape ([XBLOCK, 1], [1, RBLOCK], ...). A literal is Python text (a constant), not yet a tensor."""
    dims: frozenset = frozenset()
    literal: bool = False
    value: object = None  # a literal's Python value


X, R = frozenset("x"), frozenset("r")
XR = X | R


def literal(value, dtype: torch.dtype) -> str:
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


# on bools (Note [No & and | on conditions] in the prelude): or, and, xor
BOOL_OPS = {"add": "tl.where({a}, True, {b})", "maximum": "tl.where({a}, True, {b})",
            "mul": "tl.where({a}, {b}, False)", "minimum": "tl.where({a}, {b}, False)", "sub": "{a} != {b}",
            "logical_or": "tl.where({a} != 0, True, {b} != 0)", "logical_and": "tl.where({a} != 0, {b} != 0, False)",
            "logical_xor": "({a} != 0) != ({b} != 0)"}
POWERS = {2: "{a} * {a}", 3: "{a} * {a} * {a}", 1: "{a}", 0.5: "{sqrt}({a})", -1: "1.0 / {a}",
          -2: "1.0 / ({a} * {a})", -0.5: "1.0 / {sqrt}({a})"}
TL_UNARY = {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2", "sqrt": "tl.sqrt",
            "rsqrt": "tl.rsqrt", "sin": "tl.sin", "cos": "tl.cos", "erf": "tl.erf", "floor": "tl.floor",
            "ceil": "tl.ceil"}
HELPER_UNARY = {name: f"gb_{name}" for name in (
    "expm1", "log1p", "tanh", "sinh", "cosh", "asinh", "acosh", "atanh", "tan", "asin", "acos", "atan", "erfc",
    "erfinv", "lgamma", "log10", "round", "trunc")}
INTEGER_IDENTITY = {"floor", "ceil", "trunc", "round"}  # on integers these return their argument



def _math(op: str):
    """A tl./gb_ math function; integers go through float64 (as in C++)."""
    def spell(p, a):
        fn = TL_UNARY.get(op) or HELPER_UNARY[op]
        if op == "sqrt" and a.dtype != torch.float64:
            fn = "tl.sqrt_rn"  # IEEE square root (tl.sqrt is approximate in float32; float64 has no _rn)
        if a.dtype.is_floating_point:
            return f"{fn}({p.tensor(a)})"
        return f"{fn}({p.tensor(a)}.to(tl.float64)).to({tl_type(a.dtype)})"
    return spell


def _on_bools(op: str, otherwise):
    """Two bools: Note [No & and | on conditions] in the prelude; otherwise `otherwise`."""
    def spell(p, a, b):
        if a.dtype == torch.bool and b.dtype == torch.bool:
            return BOOL_OPS[op].format(a=a, b=b)
        return otherwise(p, a, b)
    return spell


def _logical(op: str):
    def spell(p, a, b):
        if op == "logical_and" and a.dtype == b.dtype == torch.bool and a.dims and b.dims:
            return f"{a} & {b}"  # two blocks of bools (a masked() body's range test): & is safe on them
        return BOOL_OPS[op].format(a=a, b=b)
    return spell


def _pow(p, a, b):
    floating = a.dtype.is_floating_point
    if b.literal and b.value in POWERS and (floating or float(b.value) >= 0):
        return POWERS[b.value].format(a=a, sqrt="tl.sqrt" if a.dtype == torch.float64 else "tl.sqrt_rn")
    return f"{'gb_pow' if floating else 'gb_pow_int'}({p.tensor(a)}, {p.tensor(b)})"


def _extremum(op: str):
    return lambda p, a, b: f"{'gb_' if a.dtype.is_floating_point else 'tl.'}{op}({p.tensor(a)}, {b})"


def _helper2(op: str):
    return lambda p, a, b: f"gb_{op}({p.tensor(a)}, {p.tensor(b)})"


TRITON_SPELLINGS = {  # Note [Spelling tables]
    **{op: _math(op) for op in (*TL_UNARY, *HELPER_UNARY)},
    **shared_unary(lambda a: "1.0", lambda a: f"{a} == 0", lambda a: f"gb_signbit({a})"),
    "abs": lambda p, a: f"{a}" if a.dtype == torch.bool else f"tl.abs({p.tensor(a)})",
    "relu": lambda p, a: f"tl.where({a} < 0, 0, {a})",
    "sigmoid": lambda p, a: f"1.0 / (1.0 + tl.exp(-{a}))",
    "isinf": lambda p, a: f"tl.abs({a}) == float(\"inf\")" if a.dtype.is_floating_point else f"{a} != {a}",
    "sign": lambda p, a: f"{a}" if a.dtype == torch.bool else f"gb_sign({a})",
    **{op: infix(symbol) for op, symbol in INFIX.items()},
    **{op: _on_bools(op, infix(INFIX[op])) for op in ("add", "sub", "mul")},
    **{op: _logical(op) for op in ("logical_and", "logical_or", "logical_xor")},
    "maximum": _on_bools("maximum", _extremum("maximum")),
    "minimum": _on_bools("minimum", _extremum("minimum")),
    "truediv": lambda p, a, b: f"{a} / {b}",
    "floordiv": lambda p, a, b: f"gb_floordiv_{'float' if a.dtype.is_floating_point else 'int'}({p.tensor(a)}, {b})",
    "truncdiv": lambda p, a, b: f"gb_trunc({a} / {b})" if a.dtype.is_floating_point else f"{a} // {b}",
    "remainder": lambda p, a, b: f"gb_remainder({p.tensor(a)}, {b})",
    "fmod": lambda p, a, b: f"{a} % {b}",
    "pow": _pow,
    **{op: _helper2(op) for op in ("atan2", "hypot", "copysign")},
}


class TritonPrinter(KernelPrinter):
    """Writes one kernel body. `inner` is the axis of the innermost loop ("x" for pointwise, "r" for
    reductions): values that do not vary along it are hoisted above that loop (Note [Triton kernel shapes])."""

    SPELLINGS = TRITON_SPELLINGS

    def __init__(self, plan: KernelPlan, buffers: dict, inner: str, masks: dict):
        super().__init__(plan, buffers)
        self.inner = inner
        self.masks = masks  # {"x": "xmask" or None, "r": "rmask" or None, "xr": ...}
        self.symbol_dims: dict = {plan.x: X, plan.r: R}
        self.store_dims, self.store_shape = X, "[XBLOCK]"
        self.eviction: str | None = None  # looped rows: the cache hint of loads along r (Note [Eviction in looped rows])
        self.zero_outside: dict = {}  # a masked load -> its mask: the load reads 0 where the mask is false

    # -- hooks (KernelPrinter) ------------------------------------------------------------------------------
    def new_var(self, name, dtype, dims=frozenset()):
        return TVar(name, dtype, self.inner in dims, frozenset(dims))

    def declare(self, var, text):
        return f"{var} = {text}"

    def row_value(self, node, dtype, reduction_type):
        """The [XBLOCK, 1] row value triton/kernel.py assigns after the reduction (row_<node>)."""
        return TVar(f"row_{node}", dtype, False, X)

    def take(self) -> tuple[list[str], list]:
        """Hoisted lines, then the loop's lines; both emptied."""
        lines, tags = self.hoisted + self.lines, self.hoisted_tags + self.line_tags
        self.hoisted, self.hoisted_tags, self.lines, self.line_tags = [], [], [], []
        return lines, tags

    # -- helpers -------------------------------------------------------------------------------------------
    def block_mask(self, dims) -> str | None:
        """The mask of the kernel's block over `dims` (the lanes past the end), or None when every lane is in."""
        key = "".join(sorted(dims, reverse=True))  # "x", "r", "xr"
        return self.masks.get(key)

    def tensor(self, v: TVar) -> str:
        """Text of `v` as a Triton tensor (a literal becomes a 0-d tensor of its dtype)."""
        return f"tl.full([], {v}, {tl_type(compute_dtype(v.dtype))})" if v.literal else str(v)

    def index(self, expr) -> tuple[str, frozenset]:
        expr = self.simplified(expr)
        dims = frozenset().union(*[self.symbol_dims.get(s, frozenset()) for s in expr.free_symbols])
        return triton_index(expr), dims

    # -- special ops ---------------------------------------------------------------------------------------
    def _load_memory(self, name, index):
        buffer = self.buffers[name]
        self.loaded.add(name)
        offset, dims = self.index(buffer.storage_offset(index))
        condition = self.mask  # a masked() body's (Note [Masked loads])
        if condition is not None and not dims and not self.simplified(buffer.storage_offset(index)).has(Bounded):
            condition = None  # one address for every lane, valid wherever it is used: read it as is (hoisted)
        if condition is not None:
            if condition.dims and not dims:  # a scalar address takes the block shape of its mask (tl.load
                offset = f"tl.where({condition}, {offset}, 0)"  # refuses a block mask on a scalar pointer)
            dims = dims | condition.dims
        mask = self.block_mask(dims)
        if condition is not None:
            mask = str(condition) if mask is None else _both(condition, mask)
        other = "0.0" if buffer.dtype.is_floating_point else "0"
        hint = f", eviction_policy=\"{self.eviction}\"" if self.eviction and "r" in dims else ""
        text = f"tl.load({name} + ({offset})" + (f", mask={mask}, other={other}" if mask else "") + hint + ")"
        if buffer.dtype in HALF:
            text += ".to(tl.float32)"
        value = self.emit(text, buffer.dtype, dims)
        if condition is not None:
            self.zero_outside[value.name] = condition
        return value

    def masked_value(self, mask, value, other):
        """A body that is one masked load reads 0 where its mask is false already: no select when `other` is 0."""
        if other.literal and other.value == 0 and self.zero_outside.get(value.name) == mask:
            return value
        return super().masked_value(mask, value, other)

    def constant(self, value, dtype):
        if dtype in (torch.float64, torch.int64) and not (
                dtype == torch.int64 and -INT32_LIMIT <= int(value) < INT32_LIMIT):
            # a Python literal would be float32 / int32 in Triton
            return self.emit(f"tl.full([], {literal(value, dtype)}, {tl_type(dtype)})", dtype)
        return TVar(literal(value, dtype), dtype, False, frozenset(), True, value)

    def index_expr(self, expr, dtype):
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            if dtype == torch.int64:  # a Python literal would be an int32 in Triton: the value must be int64
                return self.emit(f"tl.full([], {literal(int(expr), dtype)}, tl.int64)", dtype)
            return self.constant(int(expr), dtype)
        text, dims = self.index(expr)
        if not dims:  # sizes only: a scalar, made a tensor of the index type first (a float derived size's
            # value stays a float: Note [Derived sizes])
            text = f"tl.full([], {text}, {'tl.float32' if derived.is_float(expr) else 'tl.int64'})"
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
        # between two Python literals Triton picks the type (int32 for an int64 0): make one a typed tensor
        first = self.tensor(a) if a.literal and b.literal else a
        return self.emit(f"tl.where({cond}, {first}, {b})", a.dtype, cond.dims | a.dims | b.dims)

    def declare_indirect(self, symbol, value, size):
        if size is None:  # a position already in range (Note [Op vocabulary]): read as is
            self.symbol_dims[symbol] = value.dims
            varying = self.inner in self.symbol_dims[symbol]
            self.add_line(f"{symbol} = {value}", varying)
            return varying
        size_text, size_dims = self.index(size)
        self.symbol_dims[symbol] = value.dims | size_dims
        varying = self.inner in self.symbol_dims[symbol]
        self.add_line(f"{symbol} = tl.where({value} < 0, {value} + {size_text}, {value})", varying)
        return varying

    # -- kernel structure (Note [Kernel structure ops]) -----------------------------------------------------
    def store(self, name, index, value):
        """A store over the block `self.store_dims` (set by the kernel for each phase: rows, tile, ...)."""
        node = self.buffers[name]
        dims, shape = self.store_dims, self.store_shape
        offset, offset_dims = self.index(node.storage_offset(index))
        if offset_dims != dims:  # e.g. a scalar output: the pointer needs the block's shape for the mask
            offset = f"{offset} + tl.full({shape}, 0, tl.int32)"
        text = str(value)
        if node.dtype in HALF and not value.literal:
            text = f"{value}.to({tl_type(node.dtype)})"
        mask = self.block_mask(dims)
        self.stores.append((f"tl.store({name} + ({offset}), {text}{f', mask={mask}' if mask else ''})", self.tag))

    def store_add(self, name, index, value, keep):
        """Note [Accumulating stores]: an atomic add at a data-dependent offset, over the block. The buffer holds
        the compute dtype (float32 for half types), so the value goes as it is; relaxed order suffices, as
        nothing in the kernel reads the buffer."""
        node = self.buffers[name]
        dims, shape = self.store_dims, self.store_shape
        offset, offset_dims = self.index(node.storage_offset(index))
        if offset_dims != dims:  # the pointer takes the block's shape (a value of fewer dims is broadcast to it)
            offset = f"{offset} + tl.full({shape}, 0, tl.int32)"
        text = self.tensor(value) if value.literal else str(value)
        if compute_dtype(value.dtype) != node.dtype:
            text = f"{text}.to({tl_type(node.dtype)})"
        mask = self.block_mask(dims)
        if keep is not None and keep.literal:
            if not keep.value:
                return  # adds nothing anywhere
        elif keep is not None and keep.dims == dims:  # two blocks of bools: & is safe on them
            mask = str(keep) if mask is None else f"{keep} & {mask}"
        elif keep is not None:  # a 0-d condition (Note [No & and | on conditions] in the prelude)
            mask = f"tl.where({keep}, {mask or f'tl.full({shape}, 1, tl.int1)'}, False)"
        self.stores.append((f"tl.atomic_add({name} + ({offset}), {text}{f', mask={mask}' if mask else ''}, "
                            f"sem=\"relaxed\")", self.tag))

    # -- arithmetic ----------------------------------------------------------------------------------------
    def arithmetic(self, op: str, args: list[TVar]) -> TVar:
        if op in INTEGER_IDENTITY and not args[0].dtype.is_floating_point:
            return args[0]
        if all(a.literal for a in args):  # keep Triton from folding Python constants with Python's rules
            first = args[0]
            args = [TVar(self.tensor(first), first.dtype, False, frozenset())] + list(args[1:])
        text = self.expr(op, args)
        return self.emit(text, result_dtype(op, [a.dtype for a in args]), frozenset().union(*[a.dims for a in args]))
