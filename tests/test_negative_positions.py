"""Negative slice starts under dynamic shapes (Note [Negative symbolic positions] in engine/lowering/views.py):
a start such as -(w + 1), a SymInt when w is a size, counts from the end of its dim as a number does. Longformer's
sliding-chunk attention reads and writes such slices; they were taken as positions before the dim's start."""
from types import SimpleNamespace

import pytest
import sympy
import torch

import engine
from engine.ir.indexing import FloorDiv, size_symbol
from engine.lowering.registry import Unsupported, set_current
from engine.lowering.views import symbolic_position


def _chunk_diagonals(x):
    """Longformer's diagonal scores: zeros, then four slice writes, two of them read from negative starts."""
    b, chunks, two_w, _ = x.shape
    w = two_w // 2
    d = x.new_zeros((b, chunks + 1, w, 2 * w + 1))
    d[:, :-1, :, w:] = x[:, :, :w, : w + 1]
    d[:, -1, :, w:] = x[:, -1, w:, : w + 1]
    d[:, 1:, :, :w] = x[:, :, -(w + 1):-1, w + 1:]
    d[:, 0, 1:w, 1:w] = x[:, 0, : w - 1, 1 - w:]
    return d * 2


def _tail_read(x):
    n = x.shape[1] - 2
    return x[:, -(n + 1):-1] * 3 + x[:, -n:-n + 1]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("model", [_chunk_diagonals, _tail_read])
def test_negative_symbolic_starts_match_eager_at_every_size(backend, model):
    shapes = [(4, 3, 8, 9), (6, 2, 10, 11), (2, 1, 6, 7)]
    inputs = [(torch.randn(*shape),) for shape in shapes]
    exploration = engine.explore(model, inputs[0], dynamic=True, dynamic_inputs=inputs[1:], backend=backend)
    assert exploration.verify.ok, exploration.verify
    for run in exploration.runs:
        assert run.verify.ok, run
    assert not any(g.fallback for g in exploration.graphs)


@pytest.fixture
def lowering_without_derived_sizes():
    previous = set_current(SimpleNamespace(derived_sizes={}))
    yield
    set_current(previous)


def test_a_position_is_read_from_the_size_symbols_signs(lowering_without_derived_sizes):
    s0, s1 = size_symbol(0), size_symbol(1)
    length = 2 * s0
    assert symbolic_position(s0 - 1, length) == s0 - 1  # nonnegative: as it is
    assert symbolic_position(-(s0 + 1), length) == s0 - 1  # negative: from the end
    assert symbolic_position(-(3 * s0), length) == sympy.Max(0, -s0)  # before the start: clamped to it
    with pytest.raises(Unsupported, match="sign"):
        symbolic_position(s0 - s1, length)
    with pytest.raises(Unsupported, match="nonnegative"):  # floor of a negative: C's `/` rounds toward zero
        symbolic_position(FloorDiv(-s0 - 1, 2), length)


def test_a_negative_floor_division_runs_eagerly_and_matches():
    def halves(x):
        return x[:, -(x.shape[1] + 1) // 2:] * 3
    exploration = engine.explore(halves, (torch.randn(4, 6, 5),), dynamic=True,
                                 dynamic_inputs=[(torch.randn(3, 9, 5),)])
    assert exploration.verify.ok and all(run.verify.ok for run in exploration.runs), exploration.verify
