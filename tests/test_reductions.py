"""Reductions keep torch's semantics in generated code: NaN propagation, flags, first index of ties."""
import pytest
import torch

import engine
from engine.codegen.cpp import reduction as cpp


def _check(fn, *inputs):
    compiled = engine.compile(fn)
    with torch.no_grad():
        expected, actual = fn(*inputs), compiled(*inputs)
    torch.testing.assert_close(actual, expected, equal_nan=True, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["amax", "amin", "sum", "argmax", "argmin"])
def test_reduction_with_nan_and_ties(kind):
    x = torch.randn(16, 300)
    x[3, 17] = float("nan")
    x[5, :] = 1.0  # ties: argmax/argmin take the first index
    _check(lambda t: getattr(torch, kind)(t, dim=-1), x)


@pytest.mark.parametrize("kind", ["any", "all"])
def test_flag_reductions(kind):
    x = torch.randn(8, 64) > 1.5
    x[0] = True
    x[1] = False
    _check(lambda t: getattr(torch, kind)(t, dim=-1), x)


def test_reduction_over_leading_dim_and_keepdim():
    x = torch.randn(32, 24, 8)
    _check(lambda t: t.sum(dim=(0, 2), keepdim=True) + t.mean(0).var(-1, keepdim=True).sum(), x)


@pytest.mark.parametrize("kind", ["amax", "amin", "sum", "prod", "any", "all"])
@pytest.mark.parametrize("row", [cpp.SPLIT_MIN_ROW, cpp.SPLIT_MIN_ROW + 3, 2050])
def test_long_rows_with_split_accumulators(kind, row):
    """Rows long enough for split accumulators (Note [Split accumulators]), with a remainder after the blocks
    for the last two; a NaN sits in the remainder of one row and in a block of another."""
    x = torch.rand(6, row) + 0.5 if kind == "prod" else torch.randn(6, row)
    if kind in ("any", "all"):
        x = x > -1.0
        x[0, row - 1] = False  # `all` decided by the last element (in the remainder when there is one)
        x[1] = False
        x[2, row - 1] = True
    else:
        x[0, row - 1] = float("nan")
        x[1, 3] = float("nan")
        if kind == "prod":
            x = x.double()  # a product of 2050 factors is only comparable in float64
    _check(lambda t: getattr(torch, kind)(t, dim=-1), x)
