"""Derived sizes: symbolic values that index arithmetic cannot spell, computed once per call by the wrapper.

Note [Derived sizes]
Under dynamic shapes torch writes some sizes and scalars through float arithmetic: F.interpolate with
scale_factor=0.5 gives a height of TruncToInt(0.5*ToFloat(s0)), `x.shape[-1] ** -0.5` a float ToFloat(s0)**-0.5.
No kernel language reads those as index arithmetic (their class names reached g++ and Python as text), and
rewriting them as integer division is wrong wherever the float rounds (float(0.3*10) truncates to 3, the exact
rational 0.29999...*10 to 2). So lowering names each such expression once, a derived size (ds0, ds1, ...): the
wrapper computes it in Python from the input sizes exactly as torch does (Python floats), and kernels take it as
an argument like a size symbol: int64 when torch says the value is an integer, a double scalar otherwise.

Note [CPU scalars on the GPU]
Under dynamic shapes Dynamo passes a model's Python floats (an RMSNorm's eps, a RoPE base) as 0-d float64 CPU
tensors. A GPU kernel cannot read CPU memory, and copying each to the device per call cost the H200 Llama ten
pageable host-to-device copies, ~0.87 ms of host time a call (1.24x Inductor). Such an input is instead read
on the host (`.item()`, an InputItem derived value) and reaches kernels as a scalar argument, as Inductor does;
a CUDA graph keys its recordings on those values as on sizes, so a new value records anew.
"""
from __future__ import annotations

import math

import sympy

from engine.ir.indexing import Bounded, FloorDiv, ModIndex, PythonIndexPrinter

_INDEX_FUNCTIONS = (FloorDiv, ModIndex, Bounded, sympy.Max, sympy.Min)


class InputItem(sympy.Function):
    """The float value of the 0-d tensor input at a position, read on the host (Note [CPU scalars on the GPU])."""
    nargs = 1


class IntInputItem(InputItem):
    """InputItem of an integer tensor."""
    is_integer = True


def input_items(derived_sizes: dict) -> list[int]:
    """The input positions whose values the derived sizes read."""
    return [int(expr.args[0]) for expr in derived_sizes.values() if isinstance(expr, InputItem)]


def needs_name(expr) -> bool:
    """Whether `expr` holds anything beyond integer index arithmetic (a float, a true division, a cast)."""
    if not isinstance(expr, sympy.Basic):
        return False
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Float) or (node.is_Rational and not node.is_Integer):
            return True
        if isinstance(node, sympy.Pow) and not (node.exp.is_Integer and node.exp > 0):
            return True
        if isinstance(node, sympy.Function) and not isinstance(node, _INDEX_FUNCTIONS):
            return True
    return False


def new_symbol(position: int, expr: sympy.Expr) -> sympy.Symbol:
    if expr.is_integer:  # a size is never negative; an input's value may be
        return sympy.Symbol(f"ds{position}", integer=True, nonnegative=not isinstance(expr, InputItem) or None)
    return sympy.Symbol(f"ds{position}", real=True)


def is_float(expr) -> bool:
    """Whether a size-like expression is float-valued: it names a float derived size (every other symbol, a
    loop variable or a size, is an integer)."""
    return any(not symbol.is_integer for symbol in sympy.sympify(expr).free_symbols)


class _SizePrinter(PythonIndexPrinter):
    """torch's size functions (torch.utils._sympy.functions) as the Python torch itself evaluates them."""

    def _call(self, fn: str, e) -> str:
        return f"{fn}({', '.join(self._print(a) for a in e.args)})"

    def _print_Float(self, e):
        return repr(float(e))

    def _print_Rational(self, e):
        return f"({e.p} / {e.q})" if not e.is_Integer else str(e.p)

    def _print_Mul(self, e):
        return "*".join(self._operand(a) for a in e.args)

    def _print_Pow(self, e, rational=False):
        return f"({self._operand(e.args[0])} ** {self._operand(e.args[1])})"

    def _print_ToFloat(self, e):
        return self._call("float", e)

    def _print_TruncToInt(self, e):
        return self._call("int", e)

    def _print_TruncToFloat(self, e):
        return f"float(math.trunc({self._print(e.args[0])}))"

    def _print_FloorToInt(self, e):
        return self._call("math.floor", e)

    def _print_CeilToInt(self, e):
        return self._call("math.ceil", e)

    def _print_RoundToInt(self, e):
        return self._call("round", e)

    def _print_RoundDecimal(self, e):
        return self._call("round", e)

    def _print_IntTrueDiv(self, e):
        return f"({self._operand(e.args[0])} / {self._operand(e.args[1])})"

    _print_FloatTrueDiv = _print_IntTrueDiv

    def _print_PowByNatural(self, e):
        return f"({self._operand(e.args[0])} ** {self._operand(e.args[1])})"

    _print_FloatPow = _print_PowByNatural

    def _print_PythonMod(self, e):  # Python's % (a result in [0, b) for b > 0, whatever a's sign)
        return f"({self._operand(e.args[0])} % {self._operand(e.args[1])})"

    def _print_InputItem(self, e):
        return f"args[{int(e.args[0])}].item()"

    def _print_Identity(self, e):
        return self._print(e.args[0])

    def _print_Abs(self, e):
        return self._call("abs", e)


_PRINTER = _SizePrinter()


def py_value(expr) -> str:
    """Python source computing `expr` from the size symbols it names (and `math`)."""
    return _PRINTER.doprint(expr)


def evaluate(expr, values: dict[str, int | float], args=()) -> int | float:
    """`expr`'s value for the given values of its symbols (by name) and the graph's inputs `args`."""
    return eval(py_value(expr), {"math": math, "__builtins__": {"float": float, "int": int, "round": round,
                                                                 "abs": abs, "max": max, "min": min}},
                {**values, "args": args})
