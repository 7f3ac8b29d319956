"""Bounded positions (Note [Bounded positions] in engine/ir/indexing.py): a promise made twice is the narrower
promise, so a chain of slice writes under dynamic sizes reads one index per element, not one per write; and C
prints the promise as a clamp into the tensor."""
import sympy

from engine.ir.indexing import Bounded, FloorDiv, c_index, loop_var, size_symbol


def test_a_promise_made_twice_is_the_narrower_one():
    x, s = loop_var("x", 0), size_symbol(0)
    e = FloorDiv(x, 192)
    assert Bounded(Bounded(e, s), s) == Bounded(e, s)
    assert Bounded(Bounded(Bounded(e, s), s), s) == Bounded(e, s)
    assert Bounded(Bounded(e, 3), 5) == Bounded(e, 3)
    assert Bounded(Bounded(e, 5), 3) == Bounded(e, 3)
    assert Bounded(Bounded(e, s), s + 2) == Bounded(e, s)
    other = size_symbol(1)  # neither promise provably narrower: both kept
    assert Bounded(Bounded(e, s), other).args[0] == Bounded(e, s)


def test_c_clamps_a_bounded_position_into_the_tensor():
    x, s = loop_var("x", 0), size_symbol(0)
    text = c_index(Bounded(x - 2, s))

    def gb_max_i(a, b):
        return max(a, b)

    def gb_min_i(a, b):
        return min(a, b)
    for value in (0, 1, 5, 9, 30):
        assert eval(text, {"gb_max_i": gb_max_i, "gb_min_i": gb_min_i, "x0": value, "s0": 10}) == \
            max(0, min(value - 2, 9))
    assert sympy.Integer(4) == Bounded(sympy.Integer(4), s)
