"""Handlers of the ops protocol that write text: a common base with common-subexpression elimination,
the readable IR printer, and the access recorder the scheduler uses to see what a loop body reads."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

import sympy
import torch

from engine.ir.indexing import Expr, py_index
from engine.ir.ops import ARITHMETIC, result_dtype


@dataclass(frozen=True)
class Var:
    """A named value in generated text, with the dtype it holds."""
    name: str
    dtype: torch.dtype
    varying: bool = True  # depends on the innermost loop variable (printers hoist the rest out of it)

    def __str__(self) -> str:
        return self.name


# Note [Spelling tables]
# A printer spells arithmetic from one table, op name -> function(printer, *operands) -> text (tinygrad's
# renderers keep such a table per language). A printer class gets one method per entry of its own table and
# no other: an op missing from the table is a missing method, which tests/test_ops_protocol.py reports, instead
# of a generic fallback that would let any printer pass a completeness check.


class TextHandler:
    """Base for printers: each op becomes one declared temporary, identical expressions are shared.

    Subclasses give `SPELLINGS` (Note [Spelling tables]), `declare(var, text)` (one line), the special ops
    (load, constant, index_expr, to_dtype, where, masked, `declare_indirect`) and the structure ops (store,
    reduction, store_reduction; Note [Kernel structure ops])."""

    SPELLINGS: dict[str, Callable[..., str]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in cls.__dict__.get("SPELLINGS", {}):
            if name not in cls.__dict__:
                setattr(cls, name, _make_op(name))

    def __init__(self, prefix: str = "tmp"):
        self.lines: list[str] = []
        self.line_tags: list[Any] = []  # one tag per line (provenance), set from `self.tag`
        self.tag: Any = None
        self._cache: dict[tuple, Var] = {}
        self._names = (f"{prefix}{i}" for i in itertools.count())
        self._indirect_names = (f"ind{i}" for i in itertools.count())
        self._indirect_cache: dict[tuple, tuple[sympy.Symbol, bool]] = {}  # (value, size) -> (symbol, varying)

    def emit(self, text: str, dtype: torch.dtype, varying: bool = True) -> Var:
        key = (text, dtype)
        if key in self._cache:
            return self._cache[key]
        var = Var(next(self._names), dtype, varying)
        self.lines.append(self.declare(var, text))
        self.line_tags.append(self.tag)
        self._cache[key] = var
        return var

    def indirect(self, value, size):
        """One symbol per (value, size): a loop body that runs again (Note [Iterative inlining]) gets the same
        symbol, so its loads keep the same index."""
        key = (value.name, sympy.sympify(size))
        if key not in self._indirect_cache:
            symbol = sympy.Symbol(next(self._indirect_names), integer=True)
            self._indirect_cache[key] = (symbol, self.declare_indirect(symbol, value, size))
        return self._indirect_cache[key][0]

    def declare_indirect(self, symbol: sympy.Symbol, value: Var, size) -> bool:
        """Emit the line defining `symbol`; True when it varies along the innermost loop."""
        raise NotImplementedError

    def declare(self, var: Var, text: str) -> str:
        raise NotImplementedError

    def expr(self, op: str, args: list[Var]) -> str:
        return self.SPELLINGS[op](self, *args)

    def arithmetic(self, op: str, args: list[Var]) -> Var:
        return self.emit(self.expr(op, args), result_dtype(op, [a.dtype for a in args]),
                         any(a.varying for a in args))


def _make_op(name: str) -> Callable:
    def op(self, *args):
        return self.arithmetic(name, list(args))
    op.__name__ = name
    return op


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _by_name(op: str) -> Callable[..., str]:
    return lambda printer, *args: f"{op}({', '.join(map(str, args))})"


class IRPrinter(TextHandler):
    """Readable loop bodies: `tmp2 = mul(tmp0, tmp1)`, loads as `buf3[x0*512 + x1]`."""

    SPELLINGS = {op: _by_name(op) for op in ARITHMETIC}  # the IR's own spelling of an op is its name

    def __init__(self, buffers: dict):
        super().__init__()
        self.buffers = buffers
        self.mask: Var | None = None  # the condition of the masked() body being printed

    def declare(self, var, text):
        return f"{var} = {text}"

    def load(self, name, index):
        buffer = self.buffers[name]
        guard = f" if {self.mask}" if self.mask is not None else ""
        return self.emit(f"load {name}[{py_index(buffer.storage_offset(index))}]{guard}", buffer.dtype)

    def masked(self, mask, body, other):
        """Loads in `body` print their guard (`load buf0[i] if tmp2`); Note [Masked loads]."""
        outer = self.mask
        self.mask = mask if outer is None else self.logical_and(outer, mask)
        try:
            value = body()
        finally:
            self.mask = outer
        return self.emit(f"masked({mask}, {value}, other={other})", value.dtype)

    def store(self, name, index, value):
        self._line(f"store {name}[{py_index(self.buffers[name].storage_offset(index))}] = {value}")

    def reduction(self, dtype, src_dtype, reduction_type, value):
        return self.emit(f"reduce_{reduction_type}({value})", dtype)

    def store_reduction(self, name, index, value):
        self.store(name, index, value)

    def store_add(self, name, index, value, mask):
        guard = f" if {mask}" if mask is not None else ""
        self._line(f"store_add {name}[{py_index(self.buffers[name].storage_offset(index))}] += {value}{guard}")

    def _line(self, text):
        self.lines.append(text)
        self.line_tags.append(self.tag)

    def constant(self, value, dtype):
        return self.emit(f"constant({value!r}, {dtype_name(dtype)})", dtype)

    def index_expr(self, expr, dtype):
        return self.emit(f"index({py_index(expr)}, {dtype_name(dtype)})", dtype)

    def to_dtype(self, x, dtype):
        return self.emit(f"to_{dtype_name(dtype)}({x})", dtype)

    def where(self, cond, a, b):
        return self.emit(f"where({cond}, {a}, {b})", a.dtype)

    def declare_indirect(self, symbol, value, size):
        self._line(f"{symbol} = indirect({value}, size={py_index(size) if size is not None else 'in range'})")
        return True


class AccessRecorder:
    """Runs a loop body only to list what it reads: (buffer name, index tuple) per load, and what it stores."""

    def __init__(self, buffers: dict, on_load: Callable[[str, tuple], Any] | None = None):
        self.buffers = buffers
        self.loads: list[tuple[str, tuple[Expr, ...]]] = []
        self.stores: list[tuple[str, tuple[Expr, ...]]] = []
        self.on_load = on_load
        self._indirect: dict[tuple, sympy.Symbol] = {}

    def load(self, name, index):
        self.loads.append((name, tuple(index)))
        if self.on_load is not None:
            replaced = self.on_load(name, tuple(index))
            if replaced is not None:
                return replaced
        return Var("load", self.buffers[name].dtype)

    def constant(self, value, dtype):
        return Var("c", dtype)

    def index_expr(self, expr, dtype):
        return Var("i", dtype)

    def to_dtype(self, x, dtype):
        return Var("t", dtype)

    def where(self, cond, a, b):
        return Var("w", a.dtype)

    def masked(self, mask, body, other):  # the body's loads are listed like any other
        return Var("m", body().dtype)

    def indirect(self, value, size):  # one symbol per (value, size), as TextHandler.indirect
        key = (value, sympy.sympify(size))
        if key not in self._indirect:
            self._indirect[key] = sympy.Symbol(f"ind{len(self._indirect)}", integer=True)
        return self._indirect[key]

    def store(self, name, index, value):
        self.stores.append((name, tuple(index)))

    def reduction(self, dtype, src_dtype, reduction_type, value):
        return Var("reduction", dtype)

    def store_reduction(self, name, index, value):
        self.stores.append((name, tuple(index)))

    def store_add(self, name, index, value, mask):
        self.stores.append((name, tuple(index)))

    def __getattr__(self, name):
        if name in ARITHMETIC:
            return lambda *args: Var(name, result_dtype(name, [a.dtype for a in args]))
        raise AttributeError(name)
