"""Index expressions: sympy over loop variables and size symbols.

Every index in the loop IR is a sympy expression. Loop variables are non-negative integers, size symbols
(s0, s1, ... for dynamic dimensions) positive integers. Integer division and modulo get their own functions
(FloorDiv, ModIndex) because sympy's floor(a/b) rewrites itself into forms that no printer wants to emit;
both are only ever applied to non-negative operands, so C's `/` and `%` are exact for them.
"""
from __future__ import annotations

import functools
import math
from typing import Iterable, Mapping, Sequence

import sympy
# sympy imports its tensor module on the first Add it builds (~0.2 s); importing it with the engine keeps
# that cost out of the first compile.
import sympy.tensor.tensor  # noqa: F401
from sympy.printing.str import StrPrinter

Expr = sympy.Expr


# Note [Sympy's cache is small]
# sympy remembers what each of its cached functions returned, but each in an LRU of SYMPY_CACHE_SIZE entries
# (1000 by default, fixed when sympy is imported, which torch does before us). A graph of hundreds of kernels
# expands far more distinct index expressions than that, and every pass that traces a kernel's body again
# (fusion, tiling, strides, the memory plan, codegen) expands the same ones again: torchvision MaxViT-T's
# lower..codegen called expand 42362 times on 6136 distinct expressions, and each miss walks the whole tree
# once per expansion hint. So index arithmetic expands through `expand`, sympy.expand behind a cache of our
# own that holds a graph's expressions (structurally equal expressions are interchangeable: the premise of
# sympy's cache too); that took about a seventh off MaxViT-T's lower..codegen, the generated code unchanged.
EXPAND_CACHE = 1 << 17


@functools.lru_cache(maxsize=EXPAND_CACHE)
def expand(expr: Expr) -> Expr:
    """sympy.expand, remembered (Note [Sympy's cache is small])."""
    return sympy.expand(expr)


@functools.lru_cache(maxsize=None)
def loop_var(prefix: str, i: int) -> sympy.Symbol:
    return sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True)


@functools.lru_cache(maxsize=None)
def size_symbol(i: int) -> sympy.Symbol:
    return sympy.Symbol(f"s{i}", integer=True, positive=True)


# Note [Dividing a term by a number]
# Index terms are an integer coefficient times a monomial (loop variables, size symbols, floor divisions,
# moduli), and most divisors are plain numbers (a dim's size). Such a term is divisible exactly when the
# coefficient is, and the quotient is the coefficient's quotient times the same monomial: integer arithmetic
# gives the answer sympy.cancel would, without building a rational function. A model of 187 kernels
# (Hugging Face MobileViT) spent 7.3 s of its 16.4 s codegen in cancel. Anything else (symbolic divisors,
# rational coefficients, a monomial with a denominator) still goes through cancel.
def _exact_quotient(term: Expr, divisor: Expr) -> Expr | None:
    """term / divisor when it is a polynomial (no denominator left), else None."""
    if divisor.is_Integer and divisor > 0:
        coefficient, monomial = term.as_coeff_Mul()
        if coefficient.is_Integer and sympy.fraction(monomial)[1] == 1:
            return None if coefficient % divisor else (coefficient // divisor) * monomial
    quotient = _monomial_quotient(term, divisor)
    if quotient is not NotImplemented:
        return quotient
    quotient = sympy.cancel(term / divisor)
    return quotient if divisor == 1 or sympy.fraction(quotient)[1] == 1 else None


def _powers(monomial: Expr) -> dict | None:
    """A monomial's factors with their integer powers ({} for 1), or None if it is not a plain monomial."""
    if monomial == 1:
        return {}
    if monomial.is_Add:
        return None
    powers = monomial.as_powers_dict()
    return powers if all(e.is_Integer and e > 0 for e in powers.values()) else None


def _monomial_quotient(term: Expr, divisor: Expr):
    """Note [Dividing a term by a number], for symbolic divisors: an integer times a monomial over an integer
    times a monomial (dynamic shapes: a view's divisor is a product of size symbols) divides exactly when the
    coefficients do and every factor of the divisor appears in the term at least as often: the quotient
    without sympy.cancel, which a resized image's index under dynamic sizes called for minutes. NotImplemented
    for anything else."""
    (t_coeff, t_mono), (d_coeff, d_mono) = term.as_coeff_Mul(), divisor.as_coeff_Mul()
    if not (t_coeff.is_Integer and d_coeff.is_Integer) or d_coeff <= 0:
        return NotImplemented
    t_powers, d_powers = _powers(t_mono), _powers(d_mono)
    if t_powers is None or d_powers is None:
        return NotImplemented
    if t_coeff % d_coeff or any(t_powers.get(base, 0) < power for base, power in d_powers.items()):
        return None
    rest = sympy.Mul(*(base ** (power - d_powers.get(base, 0)) for base, power in t_powers.items()))
    return (t_coeff // d_coeff) * rest


def _split_divisible(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    """a = b * quotient + rest, with every term of b*quotient divisible by b."""
    quotient, rest = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(expand(a)):
        exact = _exact_quotient(term, b)
        if exact is not None:
            quotient += exact
        else:
            rest += term
    return quotient, rest


# Note [Splitting keeps operands non-negative]
# FloorDiv and ModIndex print as C's `/` and `%`, which truncate toward zero: exact only for a >= 0. Dropping
# the part of a that b divides keeps the value in floor arithmetic, but the rest may be negative where a was
# not: Swin's window pad (4 - W % 4) % 4 became (-(W % 4)) % 4, which C computes as -(W % 4), and the pad
# read 3 elements before the input. So a split happens only when the rest is provably non-negative.
class FloorDiv(sympy.Function):
    """floor(a / b) for a >= 0 and b > 0."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        quotient, rest = _split_divisible(a, b)
        if quotient != 0 and rest.is_nonnegative:  # Note [Splitting keeps operands non-negative]
            # floor((b*q + r) / b) == q + floor(r / b) for integer q
            return quotient + FloorDiv(rest, b)
        if isinstance(a, FloorDiv):  # floor(floor(x / c) / b) == floor(x / (c*b))
            return FloorDiv(a.args[0], a.args[1] * b)
        return None


class ModIndex(sympy.Function):
    """a mod b for a >= 0 and b > 0."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        quotient, rest = _split_divisible(a, b)
        if quotient != 0 and rest.is_nonnegative:  # Note [Splitting keeps operands non-negative]
            return ModIndex(rest, b)
        return None


# Note [Bounded positions]
# A masked load (Note [Masked loads] in ops.py) reads where its condition holds, and there a position such as
# cat's `i - start` lies in [0, n); elsewhere it is out of range and never read. Bounded(e, n) is e with that
# promise, so that simplify_index can use it: the divisions and remainders a view puts over the position
# vanish as they would over a loop variable of extent n (a cat of permuted (8, 16, T, 64) tensors read
# 1048576*((1024*t + p) // 1048576) for 0 before). Where the promise may fail, the value is unused: Triton's
# mask keeps the address from being read, the evaluator replaces it, and C, which reads it anyway and selects
# after, prints Bounded as the clamp max(0, min(e, n - 1)), so every address stays inside the tensor.
class Bounded(sympy.Function):
    """e, promised to lie in [0, n) wherever the value is used (Note [Bounded positions])."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, e, n):
        if e.is_Integer:  # a probe at a point (a stride, a refutation) gets the number itself
            return e
        if isinstance(e, Bounded):  # promised twice: the narrower promise holds (clamping twice is clamping
            inner, m = e.args       # once); a chain of slice writes nests one Bounded per write
            if m == n or (n - m).is_nonnegative:
                return e
            if (m - n).is_nonnegative:
                return Bounded(inner, n)
        return None


def upper_bound(expr: Expr, ranges: Mapping[sympy.Symbol, Expr]) -> Expr | None:
    """Largest value expr takes when each loop variable v runs over [0, ranges[v]); None if unknown."""
    expr = expand(expr)
    if expr.is_Integer or expr.is_Symbol and expr not in ranges:
        return expr
    if expr.is_Symbol:
        return ranges[expr] - 1
    if isinstance(expr, (ModIndex, Bounded)):
        return expr.args[1] - 1
    if isinstance(expr, FloorDiv):
        top = upper_bound(expr.args[0], ranges)
        return None if top is None else FloorDiv(top, expr.args[1])
    if expr.is_Add:
        parts = [upper_bound(t, ranges) for t in expr.args]
        return None if any(p is None for p in parts) else sympy.Add(*parts)
    if expr.is_Mul:
        coeff, rest = expr.as_coeff_Mul()
        if coeff < 0:
            return None
        if not (rest.free_symbols & set(ranges)):
            return expr
        bounds = [upper_bound(f, ranges) for f in sympy.Mul.make_args(rest)]
        if any(b is None for b in bounds):
            return None
        return coeff * sympy.Mul(*bounds)
    return None


SIMPLIFY_OPS = 24  # a symbolic difference longer than this is not handed to sympy.simplify


def _provably_less(a: Expr | None, b: Expr) -> bool:
    if a is None:
        return False
    return _provably_less_cached(a, b)


@functools.lru_cache(maxsize=65536)
def _provably_less_cached(a: Expr, b: Expr) -> bool:
    """sympy.simplify is the costly step of simplify_index, and the same bounds come back for every index
    that shares a term (a Swin graph asked 2683 times about 169 distinct differences): cached by expression."""
    difference = expand(b - a - 1)
    known = difference.is_nonnegative
    if known is not None:
        return known
    if difference.free_symbols and sympy.count_ops(difference) > SIMPLIFY_OPS:
        return False  # Note [Strides under symbolic sizes] in engine/schedule/strides.py: unproven is not less
    return bool(sympy.simplify(difference).is_nonnegative)


def _split_by_granule(a: Expr, b: Expr, ranges) -> tuple[Expr, Expr, Expr] | None:
    """Write a = g*large + small with 0 <= small < g and g dividing b, for the largest such g > 1."""
    if not b.is_Integer:
        return None
    terms = sympy.Add.make_args(expand(a))
    candidates = sorted({math.gcd(int(t.as_coeff_Mul()[0]), int(b)) for t in terms
                         if t.as_coeff_Mul()[0].is_Integer}, reverse=True)
    for g in candidates:
        if g <= 1:
            continue
        large = [t for t in terms if t.as_coeff_Mul()[0].is_Integer and int(t.as_coeff_Mul()[0]) % g == 0]
        small = sympy.Add(*[t for t in terms if t not in large])
        if small != 0 and _provably_less(upper_bound(small, ranges), sympy.Integer(g)) and \
                all(t.is_nonnegative for t in sympy.Add.make_args(small)):
            return sympy.Integer(g), expand(sympy.Add(*large) / g), small
    return None


# Note [Symbolic divisors]
# Under dynamic shapes a flat position over a loop nest is xo*W + xi with W a size expression (an output width
# (s0 - 1) // 2 + 1), and expanded it no longer shows W as a factor: xo*((s0 - 1) // 2) + xo + xi. Dividing it
# by W again (the dims of a pool's output) then stayed a division by an expression, in every read, and the
# inner loop did not vectorize: max_pool3d compiled with dynamic sizes ran 2.7x slower than with static ones.
# So a division by a symbolic b gathers the terms of each loop variable, and where their coefficients share a
# factor g that divides b (b itself, or one of them) and the other terms stay below g, the granule rule of
# integer divisors applies: floor((g*q + s)/b) = floor(q/(b/g)) and (g*q + s) mod b = g*(q mod (b/g)) + s.


def _split_by_divisor(a: Expr, b: Expr, ranges) -> tuple[Expr, Expr, Expr] | None:
    """(g, q, s) with a = g*q + s, 0 <= s < g and g dividing b, for a symbolic b (Note [Symbolic divisors]):
    g is b itself or a coefficient of a loop variable in a that divides b; None if none fits."""
    if b.is_Integer or not b.free_symbols or not any(v in a.free_symbols for v in ranges):
        return None
    groups: dict[Expr, Expr] = {}  # the loop-variable part of each term -> the sum of its coefficients
    for term in sympy.Add.make_args(expand(a)):
        key = sympy.Mul(*[f for f in sympy.Mul.make_args(term) if f.free_symbols & set(ranges)])
        groups[key] = groups.get(key, sympy.Integer(0)) + sympy.cancel(term / key)
    groups = {key: expand(c) for key, c in groups.items()}
    candidates = [b] + [c for key, c in groups.items() if key != 1 and c.free_symbols and c != b
                        and _exact_quotient(b, c) is not None]
    for g in candidates:
        quotient, small = sympy.Integer(0), sympy.Integer(0)
        for key, coefficient in groups.items():
            exact = _exact_quotient(coefficient, g) if key != 1 else None
            if exact is not None and exact != 0:
                quotient += key * exact
            else:
                small += key * coefficient
        small = expand(small)
        if quotient != 0 and all(t.is_nonnegative for t in sympy.Add.make_args(small)) and _provably_less(
                upper_bound(small, ranges), g):
            return g, expand(quotient), small
    return None


# Note [Merging divisions and remainders]
# Splitting a flat index into dims and putting the dims back together (a reshape of a permute, the outputs of
# x.sum(1) over NCHW walked flat) leaves sums of nested floors and remainders that are the flat index, or one
# remainder of it: x % 56 + 56*((x / 56) % 56) is x % 3136. A division left in an inner loop stops gcc's
# vectorizer and costs a gather per element, so these identities, exact for a >= 0 and m, n > 0, are applied
# until none fits:
#   k*(a % m) + k*m*((a / m) % n)  ->  k*(a % (m*n))        (two adjacent digits are one digit)
#   k*(a % m) + k*m*(a / m)        ->  k*a                  (the last digit and the rest are the whole)
#   (a % c) / m  ->  (a / m) % (c/m)   and   (a % c) % m  ->  a % m,   when m divides c
# The first two match terms of a sum; the last two rewrite one node into the form the first two look for
# (a floor of a remainder is written as a remainder of a floor, as Inductor's ModularIndexing is).


def _divides(m: Expr, c: Expr) -> Expr | None:
    """c / m when m divides c (numbers, or a monomial of sizes), else None."""
    if m.is_Integer and c.is_Integer:
        return None if int(c) % int(m) else sympy.Integer(int(c) // int(m))
    return _exact_quotient(c, m)


def _remainder_terms(terms: list[Expr]) -> list[tuple[Expr, Expr, Expr]]:
    """(term, its factor outside, the ModIndex) for every term that is a product with one ModIndex."""
    found = []
    for term in terms:
        factors = sympy.Mul.make_args(term)
        mods = [f for f in factors if isinstance(f, ModIndex)]
        if len(mods) == 1:
            found.append((term, sympy.Mul(*[f for f in factors if f is not mods[0]]), mods[0]))
    return found


def _merge_once(terms: list[Expr]) -> list[Expr] | None:
    """One application of the sum rules of Note [Merging divisions and remainders], or None."""
    remainders = _remainder_terms(terms)
    for term, k, (a, m) in ((t, k, mod.args) for t, k, mod in remainders):
        digits = FloorDiv(a, m)
        for other, k_other, mod in remainders:
            if other is not term and mod.args[0] == digits and k_other == expand(k * m):
                rest = [t for t in terms if t is not term and t is not other]
                return rest + [k * ModIndex(a, m * mod.args[1])]
        whole = expand(k * m * digits)
        if whole in terms:
            rest = [t for t in terms if t is not term and t != whole]
            return rest + [expand(k * a)]
    return None


def _recombine(expr: Expr) -> Expr:
    """Put split indexes back together (Note [Merging divisions and remainders])."""
    if not expr.is_Add:
        return expr
    terms = list(expr.args)
    while any(isinstance(f, ModIndex) for t in terms for f in sympy.Mul.make_args(t)):
        merged = _merge_once(terms)
        if merged is None:
            break
        terms = list(sympy.Add.make_args(expand(sympy.Add(*merged))))
    return sympy.Add(*terms)


def _nested(e: Expr) -> Expr | None:
    """The node rules of Note [Merging divisions and remainders]: (a % c) / m and (a % c) % m, m dividing c."""
    a, m = e.args
    if not isinstance(a, ModIndex):
        return None
    inner, c = a.args
    quotient = _divides(m, c)
    if quotient is None:
        return None
    if isinstance(e, FloorDiv):
        return ModIndex(FloorDiv(inner, m), quotient)
    return ModIndex(inner, m)


def simplify_index(expr: Expr, ranges: Mapping[sympy.Symbol, Expr]) -> Expr:
    """Simplify FloorDiv/ModIndex using the loop ranges: floor(a/b) = 0 and a mod b = a when a < b, and
    floor((g*L + s)/b) = floor(L/(b/g)) when 0 <= s < g divides b (likewise for mod)."""
    # keyed by symbol name: printing each symbol to sort the ranges cost more than the simplification it saved
    return _simplify_cached(sympy.sympify(expr), tuple(sorted(ranges.items(), key=lambda kv: kv[0].name)))


@functools.lru_cache(maxsize=65536)
def _simplify_cached(expr: Expr, range_items: tuple) -> Expr:
    """Sympy work is the compiler's main cost; the same index is simplified many times per graph."""
    return expand(_rewrite(expr, range_items))


def _rewrite(e: Expr, range_items: tuple) -> Expr:
    return _rewrite_node(e, range_items) if e.args else e


@functools.lru_cache(maxsize=262144)
def _rewrite_node(e: Expr, range_items: tuple) -> Expr:
    """One node of simplify_index, cached by (node, ranges): distinct indexes of a graph share their terms
    (Swin's clamped window indexes: the same Min/Max and FloorDiv under hundreds of different sums)."""
    args = [_rewrite(a, range_items) for a in e.args]
    if any(new is not old for new, old in zip(args, e.args)):  # rebuilt only if an argument changed:
        e = e.func(*args)  # a Min/Max constructor compares its arguments again (0.9 s of Swin's codegen)
    if isinstance(e, (FloorDiv, ModIndex)):
        nested = _nested(e)
        if nested is not None:
            return _rewrite(nested, range_items)
        ranges = dict(range_items)
        a, b = e.args
        if _provably_less(upper_bound(a, ranges), b):
            return sympy.Integer(0) if isinstance(e, FloorDiv) else a
        split = _split_by_granule(a, b, ranges) or _split_by_divisor(a, b, ranges)  # Note [Symbolic divisors]
        if split is not None:
            g, large, small = split
            rest = _exact_quotient(b, g)
            if isinstance(e, FloorDiv):
                return _rewrite(FloorDiv(large, rest), range_items)
            return _rewrite(g * ModIndex(large, rest) + small, range_items)
    if e.is_Add:
        return _recombine(expand(e))
    return e


def product(sizes: Iterable[Expr]) -> Expr:
    result = sympy.Integer(1)
    for s in sizes:
        result = result * s
    return result


def contiguous_strides(sizes: Sequence[Expr]) -> list[Expr]:
    strides, running = [], sympy.Integer(1)
    for size in reversed(sizes):
        strides.append(running)
        running = running * size
    return list(reversed(strides))


def linearize(index: Sequence[Expr], sizes: Sequence[Expr]) -> Expr:
    return expand(sum((i * s for i, s in zip(index, contiguous_strides(sizes))), sympy.Integer(0)))


def unflatten(linear: Expr, sizes: Sequence[Expr]) -> list[Expr]:
    """Index tuple of a contiguous tensor of `sizes` whose flat position is `linear`."""
    strides = contiguous_strides(sizes)
    index = []
    for d, (size, stride) in enumerate(zip(sizes, strides)):
        if size == 1:
            index.append(sympy.Integer(0))
            continue
        value = FloorDiv(linear, stride)
        if d > 0:
            value = ModIndex(value, size)
        index.append(value)
    return index


def offset(index: Sequence[Expr], strides: Sequence[Expr], base: Expr = sympy.Integer(0)) -> Expr:
    """Storage offset of `index` in a strided layout."""
    return expand(base + sum((i * s for i, s in zip(index, strides)), sympy.Integer(0)))


# Note [Index printing]
# C, Python and Triton read an index as integer arithmetic. A power is spelled as a product, and each factor
# needs parentheses when it is a sum: (s0 + 1)**2 is (s0 + 1)*(s0 + 1), never s0 + 1*s0 + 1 (the squared
# output sizes of a pooling layer under dynamic shapes). Every operand of /, % and a power that is a sum, a
# product or a negative number is parenthesized. StrPrinter writes a rational factor or a negative power as a
# division (x/2), which is integer division in C and true division in Python: an index never holds one (floor
# division is FloorDiv), so printing one is an error. tests/test_dynamic.py evaluates each printer's text.


class _IndexPrinter(StrPrinter):
    floordiv = "/"
    max_fn, min_fn = "gb_max_i", "gb_min_i"

    def _print_Max(self, e):
        return self._fold(self.max_fn, e.args)

    def _print_Min(self, e):
        return self._fold(self.min_fn, e.args)

    def _fold(self, fn, args):
        text = self._print(args[0])
        for a in args[1:]:
            text = f"{fn}({text}, {self._print(a)})"
        return text

    def _operand(self, e):
        text = self._print(e)
        return f"({text})" if e.is_Add or e.is_Mul or (e.is_Number and e < 0) else text

    def _print_FloorDiv(self, e):
        return f"({self._operand(e.args[0])} {self.floordiv} {self._operand(e.args[1])})"

    def _print_ModIndex(self, e):
        return f"({self._operand(e.args[0])} % {self._operand(e.args[1])})"

    def _print_Bounded(self, e):  # C reads every lane's address: clamp it (Note [Bounded positions])
        # printed directly: building sympy's Min would compare e with n - 1 first, which nested Bounded
        # positions (a chain of slice writes under dynamic sizes) made the costliest step of codegen
        value, top = e.args
        return f"{self.max_fn}(0, {self.min_fn}({self._print(value)}, {self._print(top - 1)}))"

    def _print_Pow(self, e, rational=False):
        base, exp = e.args
        if exp.is_Integer and exp > 0:
            return "(" + "*".join([self._operand(base)] * int(exp)) + ")"
        raise ValueError(f"index expression {e} has a negative or non-integer power")

    def _print_Mul(self, e):
        for factor in e.args:
            if factor.is_Rational and not factor.is_Integer or factor.is_Pow and not factor.exp.is_positive:
                raise ValueError(f"index expression {e} has a fraction (floor division is FloorDiv)")
        return super()._print_Mul(e)

    def _print_Rational(self, e):
        if not e.is_Integer:
            raise ValueError(f"index expression has a fraction {e} (floor division is FloorDiv)")
        return super()._print_Rational(e)


class PythonIndexPrinter(_IndexPrinter):  # also the base of the Triton index printer (codegen/triton/printer.py)
    floordiv = "//"
    max_fn, min_fn = "max", "min"

    def _print_Bounded(self, e):  # the masked read's own guard keeps an unused position unread
        return self._operand(e.args[0])  # parenthesized as a factor would be: 256*(x - 2048)


_C_PRINTER = _IndexPrinter()
_PY_PRINTER = PythonIndexPrinter()


def c_index(expr: Expr) -> str:
    return _C_PRINTER.doprint(expr)


def py_index(expr: Expr) -> str:
    return _PY_PRINTER.doprint(expr)


def sympify_size(value) -> Expr:
    """A torch size (int or SymInt) as a sympy expression."""
    if isinstance(value, int):
        return sympy.Integer(value)
    node = getattr(value, "node", None)
    if node is not None and hasattr(node, "expr"):
        return node.expr
    return sympy.sympify(value)
