"""The C++ row cache (Note [Row cache] in codegen/cpp/reduction.py) takes rows up to 256 KiB: softmax over
vocabulary-wide rows computes exp(x - max) once, keeps it for the division, and matches eager; a row too wide
for the cache in its type (float64 at 50257) recomputes it and matches too."""
import pytest
import torch

from explored_kernels import explored_kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("row", [32000, 50257])
def test_softmax_over_wide_rows_matches_eager(dtype, row):
    x = (torch.randn(3, row) * 4).to(dtype)
    (kernel,) = explored_kernels(lambda t: t.softmax(-1), (x,), "cpp")
    cached = "cache_" in kernel.source
    assert cached == (dtype != torch.float64 or row * 8 <= 256 * 1024), kernel.source[:2000]
