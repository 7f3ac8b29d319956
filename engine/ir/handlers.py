"""Handlers of the ops protocol that write text: a common base with common-subexpression elimination,
the readable IR printer, and the access recorder the scheduler uses to see what a loop body reads."""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

import sympy
import torch

from engine.ir.indexing import Expr, py_index
from engine.ir.ops import BINARY, UNARY, result_dtype


@dataclass(frozen=True)
class Var:
    """A named value in generated text, with the dtype it holds."""
    name: str
    dtype: torch.dtype
    varying: bool = True  # depends on the innermost loop variable (printers hoist the rest out of it)

    def __str__(self) -> str:
        return self.name


class TextHandler:
    """Base for printers: each op becomes one declared temporary, identical expressions are shared.

    Subclasses implement `expr(op, args)` (the text of one op), `declare(var, text)` (one line) and the
    special ops (load, constant, index_expr, to_dtype, where, indirect)."""

    def __init__(self, prefix: str = "tmp"):
        self.lines: list[str] = []
        self.line_tags: list[Any] = []  # one tag per line (provenance), set from `self.tag`
        self.tag: Any = None
        self._cache: dict[tuple, Var] = {}
        self._names = (f"{prefix}{i}" for i in itertools.count())
        self._indirect_names = (f"ind{i}" for i in itertools.count())

    def emit(self, text: str, dtype: torch.dtype, varying: bool = True) -> Var:
        key = (text, dtype)
        if key in self._cache:
            return self._cache[key]
        var = Var(next(self._names), dtype, varying)
        self.lines.append(self.declare(var, text))
        self.line_tags.append(self.tag)
        self._cache[key] = var
        return var

    def new_indirect_symbol(self) -> sympy.Symbol:
        return sympy.Symbol(next(self._indirect_names), integer=True)

    def declare(self, var: Var, text: str) -> str:
        raise NotImplementedError

    def expr(self, op: str, args: list[Var]) -> str:
        raise NotImplementedError


def _make_op(name: str) -> Callable:
    def op(self, *args):
        return self.emit(self.expr(name, list(args)), result_dtype(name, [a.dtype for a in args]),
                         any(a.varying for a in args))
    op.__name__ = name
    return op


for _name in UNARY + BINARY:
    setattr(TextHandler, _name, _make_op(_name))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class IRPrinter(TextHandler):
    """Readable loop bodies: `tmp2 = mul(tmp0, tmp1)`, loads as `buf3[x0*512 + x1]`."""

    def __init__(self, buffers: dict):
        super().__init__()
        self.buffers = buffers

    def declare(self, var, text):
        return f"{var} = {text}"

    def expr(self, op, args):
        return f"{op}({', '.join(map(str, args))})"

    def load(self, name, index):
        buffer = self.buffers[name]
        return self.emit(f"load {name}[{py_index(buffer.storage_offset(index))}]", buffer.dtype)

    def constant(self, value, dtype):
        return self.emit(f"constant({value!r}, {dtype_name(dtype)})", dtype)

    def index_expr(self, expr, dtype):
        return self.emit(f"index({py_index(expr)}, {dtype_name(dtype)})", dtype)

    def to_dtype(self, x, dtype):
        return self.emit(f"to_{dtype_name(dtype)}({x})", dtype)

    def where(self, cond, a, b):
        return self.emit(f"where({cond}, {a}, {b})", a.dtype)

    def indirect(self, value, size):
        symbol = self.new_indirect_symbol()
        self.lines.append(f"{symbol} = indirect({value}, size={py_index(size)})")
        self.line_tags.append(self.tag)
        return symbol


class AccessRecorder:
    """Runs a loop body only to list what it reads: (buffer name, index tuple) per load."""

    def __init__(self, buffers: dict, on_load: Callable[[str, tuple], Any] | None = None):
        self.buffers = buffers
        self.loads: list[tuple[str, tuple[Expr, ...]]] = []
        self.on_load = on_load
        self._indirect = itertools.count()

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

    def indirect(self, value, size):
        return sympy.Symbol(f"ind{next(self._indirect)}", integer=True)

    def __getattr__(self, name):
        if name in UNARY or name in BINARY:
            return lambda *args: Var(name, result_dtype(name, [a.dtype for a in args]))
        raise AttributeError(name)
