"""Merging divisions and remainders (Note [Merging divisions and remainders] in engine/ir/indexing.py): a split
index put back together simplifies to the flat index or one remainder of it. The index function is checked by
evaluating both sides over every value of its loop variable, and kernels built from such indexes match eager."""
import pytest
import sympy
import torch

import engine
from engine.ir.indexing import FloorDiv, ModIndex, loop_var, simplify_index, size_symbol
from explored_kernels import explored_kernels

x = loop_var("x", 0)
s0, s1 = size_symbol(0), size_symbol(1)


def _divisions(expr) -> int:
    return len(expr.atoms(FloorDiv, ModIndex))


def _values(expr, extent: int, sizes: dict | None = None) -> list[int]:
    expr = expr.subs(sizes or {})
    return [int(expr.subs(x, v).doit()) for v in range(extent)]


# (expression, extent of x, FloorDiv/ModIndex nodes left at most)
CASES = {
    "two_digits": (ModIndex(x, 56) + 56 * ModIndex(FloorDiv(x, 56), 56), 8 * 3136, 1),
    "two_digits_and_the_rest": (ModIndex(x, 56) + 56 * ModIndex(FloorDiv(x, 56), 56) + 3136 * FloorDiv(x, 3136),
                                8 * 3136, 0),
    "nchw_sum_dim1_offset": (200704 * FloorDiv(x, 3136) + 56 * ModIndex(FloorDiv(x, 56), 56) + ModIndex(x, 56),
                             3 * 3136, 2),
    "scaled_with_constant": (3 * ModIndex(x, 7) + 21 * ModIndex(FloorDiv(x, 7), 5) + 4, 400, 1),
    "three_digits": (ModIndex(x, 4) + 4 * ModIndex(FloorDiv(x, 4), 5) + 20 * ModIndex(FloorDiv(x, 20), 6), 1000, 1),
    "digits_of_a_quotient": (ModIndex(FloorDiv(x, 4), 6) + 6 * ModIndex(FloorDiv(x, 24), 5), 1000, 2),
    "floor_of_a_remainder": (FloorDiv(ModIndex(x, 60), 6), 500, 2),
    "remainder_of_a_remainder": (ModIndex(ModIndex(x, 60), 12), 500, 1),
    # these two are no merge: left as they are (three nodes), with their values
    "not_adjacent_digits": (ModIndex(x, 4) + 4 * ModIndex(FloorDiv(x, 8), 5), 200, 3),
    "wrong_coefficient": (ModIndex(x, 4) + 8 * ModIndex(FloorDiv(x, 4), 5), 200, 3),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_merged_index_has_the_same_values(case):
    expr, extent, most = CASES[case]
    simplified = simplify_index(expr, {x: sympy.Integer(extent)})
    assert _values(simplified, extent) == _values(expr, extent), (expr, simplified)
    assert _divisions(simplified) <= most, simplified


def test_adjacent_digits_merge_into_one_remainder():
    simplified = simplify_index(ModIndex(x, 56) + 56 * ModIndex(FloorDiv(x, 56), 56), {x: sympy.Integer(25088)})
    assert simplified == ModIndex(x, 3136)
    # a floor of a remainder is written as a remainder of a floor, and a remainder of a remainder is one
    assert simplify_index(FloorDiv(ModIndex(x, 60), 6), {x: sympy.Integer(500)}) == ModIndex(FloorDiv(x, 6), 10)
    assert simplify_index(ModIndex(ModIndex(x, 60), 12), {x: sympy.Integer(500)}) == ModIndex(x, 12)


def test_symbolic_digits_merge():
    expr = ModIndex(x, s0) + s0 * ModIndex(FloorDiv(x, s0), s1) + 5 * s0 * s1 * FloorDiv(x, s0 * s1)
    simplified = simplify_index(expr, {x: 3 * s0 * s1})
    assert _divisions(simplified) == 2, simplified
    for sizes in ({s0: 3, s1: 4}, {s0: 5, s1: 2}):
        extent = 3 * sizes[s0] * sizes[s1]
        assert _values(simplified, extent, sizes) == _values(expr, extent, sizes)


KERNEL_CASES = {
    "nchw_sum_dim1": (lambda a: a.sum(1), (torch.randn(2, 32, 8, 8),)),
    "pixel_shuffle_add": (lambda a: torch.pixel_shuffle(a, 2) + 1, (torch.randn(2, 16, 8, 8),)),
    "flat_view_of_permute": (lambda a: a.permute(0, 2, 3, 1).reshape(2, 64, 32).sum(1), (torch.randn(2, 32, 8, 8),)),
    "sum_over_batch_and_height": (lambda a: a.sum((0, 2)), (torch.randn(3, 5, 6, 40),)),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", list(KERNEL_CASES))
def test_kernels_of_merged_indexes_match_eager(backend, case):
    fn, inputs = KERNEL_CASES[case]
    assert explored_kernels(fn, inputs, backend)  # explored_kernels checks the outputs against eager


def test_dynamic_nchw_sum_dim1_matches_eager():
    torch._dynamo.reset()
    exploration = engine.explore(lambda a: a.sum(1), (torch.randn(2, 16, 6, 5),), dynamic=True,
                                 dynamic_inputs=[(torch.randn(3, 16, 7, 9),), (torch.randn(1, 8, 4, 4),)])
    assert exploration.verify.ok, exploration.verify
    assert all(run.verify.ok for run in exploration.runs), exploration.runs


def test_symbolic_divisors_split_off_whole_multiples():
    # Note [Symbolic divisors]: xo*W + xi over an output of width W = (s0 - 1) // 2 + 1 (a pool under dynamic
    # sizes) divides back into xo and xi, and by W*W into a division of xo alone
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    xo, xi = (sympy.Symbol(n, integer=True, nonnegative=True) for n in ("xo", "xi"))
    width = FloorDiv(s0 - 1, 2) + 1
    flat = sympy.expand(xo * width + xi)
    ranges = {xo: 100 * width, xi: width}
    assert simplify_index(FloorDiv(flat, width), ranges) == xo
    assert simplify_index(ModIndex(flat, width), ranges) == xi
    assert simplify_index(FloorDiv(flat, sympy.expand(width * width)), ranges) == FloorDiv(xo, width)
    # not provably below the divisor: left alone
    assert simplify_index(FloorDiv(flat, width), {xo: 100 * width, xi: width + 1}).has(xi)
    for s, x_o, x_i in [(9, 7, 3), (64, 150, 31), (1, 0, 0)]:  # the identities hold at values too
        w = (s - 1) // 2 + 1
        values = {s0: s, xo: x_o, xi: x_i}
        for expr in (FloorDiv(flat, sympy.expand(width * width)), ModIndex(flat, sympy.expand(width * width))):
            assert simplify_index(expr, ranges).subs(values) == expr.subs(values) == (
                (x_o * w + x_i) // (w * w) if isinstance(expr, FloorDiv) else (x_o * w + x_i) % (w * w))
