"""Reductions keep torch's semantics in generated code: NaN propagation, flags, first index of ties."""
import pytest
import torch

import engine


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
