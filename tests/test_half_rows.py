"""fp16 rows converted whole (Note [Vector half conversions] in cpp/prelude.h) and whole tiles (Note [Whole
tiles] in codegen/cpp/module.py), through the C++ backend: a cast-add-cast computes in float and rounds once, so the
results are eager's bit for bit, for fp16 and bf16, in 2D tiles (whole and partial) and in 1D kernels (rows
longer than a chunk, rows that are not a multiple of a vector, broadcasts, dynamic sizes)."""
import pytest
import torch

import engine
from explored_kernels import explored_kernels

HALVES = [torch.float16, torch.bfloat16]


def _same_bits(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Equal bit patterns, except that any NaN matches any NaN (an arithmetic op may change a payload)."""
    same = actual.view(torch.int16) == expected.view(torch.int16)
    return bool((same | (actual.isnan() & expected.isnan())).all())


def _compiled(fn):
    torch._dynamo.reset()
    return engine.compile(fn, backend="cpp")


def _random_half(shape, dtype):
    return (torch.randn(*shape) * 8).to(dtype)


PERMUTES = {
    "whole_tiles": ((2, 64, 8, 8), (0, 2, 3, 1)),
    "partial_tiles": ((3, 40, 5, 7), (0, 2, 3, 1)),
    "transpose": ((96, 70), (1, 0)),
}


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("case", list(PERMUTES))
def test_permuted_add_is_bit_exact(dtype, case):
    shape, order = PERMUTES[case]
    x = _random_half(shape, dtype)
    y = _random_half([shape[d] for d in order], dtype)
    fn = lambda a, b: a.permute(*order) + b  # noqa: E731
    (kernel,) = explored_kernels(fn, (x, y), "cpp", name="permute_add")
    assert kernel.tiling.choice == "2d", kernel.tiling
    with torch.no_grad():
        assert _same_bits(_compiled(fn)(x, y), fn(x, y))


def test_every_half_through_a_tile_is_exact():
    """All 65536 fp16 bit patterns transposed and added to zero in 2D tiles: the staged row and the stored row
    both go through the whole-row conversions."""
    every_half = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16).view(256, 256)
    zeros = torch.zeros(256, 256, dtype=torch.float16)
    fn = lambda a, b: a.t() + b  # noqa: E731
    with torch.no_grad():
        assert _same_bits(_compiled(fn)(every_half, zeros), fn(every_half, zeros))


ROWS = {
    "longer_than_a_chunk": ((3, 2500), (3, 2500)),
    "not_a_multiple_of_a_vector": ((5, 67), (5, 67)),
    "broadcast_column": ((64, 1), (64, 300)),
    "broadcast_row": ((300,), (64, 300)),
}


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("case", list(ROWS))
def test_rows_of_1d_kernels_are_bit_exact(dtype, case):
    a_shape, b_shape = ROWS[case]
    a, b = _random_half(a_shape, dtype), _random_half(b_shape, dtype)
    fn = lambda p, q: p * q + q  # noqa: E731
    with torch.no_grad():
        assert _same_bits(_compiled(fn)(a, b), fn(a, b))


def test_half_rows_of_dynamic_sizes_match_eager():
    fn = lambda p, q: p.permute(1, 0) + q  # noqa: E731
    inputs = lambda n: (_random_half((n, 40), torch.float16), _random_half((40, n), torch.float16))  # noqa: E731
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs(48), dynamic=True, dynamic_inputs=[inputs(n) for n in (17, 1100)])
    assert exploration.verify.ok, exploration.verify
    assert all(run.verify.ok for run in exploration.runs), exploration.runs
    compiled = _compiled(fn)
    with torch.no_grad():
        for n in (33, 2049):
            a, b = inputs(n)
            assert _same_bits(compiled(a, b), fn(a, b))
