"""Generated C++ handles every dtype the issue names; half types compute in float32 and round once."""
import pytest
import torch

import engine


def _check(fn, *inputs, **tol):
    compiled = engine.compile(fn)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), fn(*inputs), equal_nan=True, **tol)


# Eager rounds half types after every op; we round once at the end, so results differ by a few ulps of
# the half type (and ours is the closer one to float64).
HALF_TOLERANCE = {torch.float16: dict(atol=1e-2, rtol=1e-2), torch.bfloat16: dict(atol=6e-2, rtol=6e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_float_dtypes_pointwise_and_softmax(dtype):
    torch.manual_seed(0)
    x = torch.randn(32, 96).to(dtype)
    tol = HALF_TOLERANCE.get(dtype, {})
    _check(lambda t: torch.nn.functional.gelu(t) * 2 + t.exp(), x, **tol)
    _check(lambda t: torch.log_softmax(t, dim=-1), x, **tol)


def test_integer_and_bool_ops():
    a = torch.randint(-50, 50, (16, 40))
    b = torch.randint(1, 7, (16, 40))
    _check(lambda x, y: (x // y, x % y, torch.div(x, y, rounding_mode="trunc"), x * y - 3), a, b)
    _check(lambda x, y: ((x > 0) & (y < 4), (x > 0) | (y == 2), ~(x > 0), (x > 0).sum(-1)), a, b)
    _check(lambda x: x.to(torch.float32) / 3 + x.max(-1, keepdim=True).values, a)


def test_casts_between_dtypes():
    x = torch.randn(8, 64) * 100
    _check(lambda t: (t.to(torch.int64), t.to(torch.float16).to(torch.float32), t.to(torch.bool),
                      t.to(torch.bfloat16)), x)
