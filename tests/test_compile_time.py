"""Compile-time rules, checked as behaviour rather than timed: index expansions are remembered across the passes
that trace a kernel again (Note [Sympy's cache is small] in engine/ir/indexing.py), and a run of an axis is
tried on the offsets that can fail it only (Note [Affine offsets stay so] in engine/schedule/tiling.py)."""
import sympy

from engine.ir import indexing
from engine.ir.indexing import FloorDiv, ModIndex, linearize, loop_var, offset, simplify_index, unflatten
from engine.schedule import tiling


def _counting_expand(monkeypatch) -> list:
    """Every call that reaches sympy.expand, from a cold index cache."""
    calls = []
    real = sympy.expand
    monkeypatch.setattr(sympy, "expand",
                        lambda expr, *args, **kwargs: calls.append(expr) or real(expr, *args, **kwargs))
    indexing.expand.cache_clear()
    return calls


def _trace_a_reshaped_read() -> sympy.Expr:
    """What one pass does per load of a reshape of a permuted tensor: the view's index, simplified over the
    kernel's loop, as a storage offset."""
    x = loop_var("x", 0)
    size, source = [sympy.Integer(n) for n in (8, 48)], [sympy.Integer(n) for n in (8, 6, 8)]
    index = [FloorDiv(x, 48), ModIndex(x, 48)]
    view = unflatten(linearize(index, size), source)
    permuted = [view[0], view[2], view[1]]
    return simplify_index(offset(permuted, [48, 1, 8]), {x: sympy.Integer(384)})


def test_a_second_trace_expands_nothing_anew(monkeypatch):
    calls = _counting_expand(monkeypatch)
    first = _trace_a_reshaped_read()
    assert calls, "the first trace expands its indexes"
    calls.clear()
    indexing._simplify_cached.cache_clear()  # the pass-level caches too: only the expansions are remembered
    indexing._rewrite_node.cache_clear()
    assert _trace_a_reshaped_read() == first
    assert calls == []


def test_a_run_is_tried_on_the_offsets_with_floors_only(monkeypatch):
    x = loop_var("x", 0)
    contiguous = [7 * x + k for k in range(50)]  # affine in x: affine in any run of it
    nchw = 200704 * FloorDiv(x, 3136) + ModIndex(x, 3136)  # a sum over dim 1 of (2, C, 56, 56), walked flat
    simplified = []
    real = tiling.simplify_index
    monkeypatch.setattr(tiling, "simplify_index", lambda expr, ranges: simplified.append(expr) or real(expr, ranges))
    assert tiling.contiguous_run(contiguous + [nchw], x, [2, 56, 56], {}) == 3136
    assert len(simplified) == 1  # the first run tried fits, and only nchw was substituted into it
    assert tiling.contiguous_run(contiguous, x, [2, 56, 56], {}) is None  # affine already: no run needed


def test_a_run_that_does_not_fit_any_offset_is_refused():
    x = loop_var("x", 0)
    odd = FloorDiv(x, 3) + ModIndex(x, 5)  # no product of the inner dims makes both affine
    assert tiling.contiguous_run([x, odd], x, [2, 56, 56], {}) is None
