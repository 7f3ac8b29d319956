"""Column reductions whose kernel also stores a full-size value (Note [Full-size stores of column tiles]): a
squeeze-excitation-style x * x.mean((2, 3)) over a channels-last x, made contiguous, reads along the channels
and stores NCHW, along the reduction (without .contiguous() eager returns the product channels-last, and so do
we: tests/test_output_strides.py). One kernel, eager's outputs, through both backends; C++ keeps column tiles
for it."""
import pytest
import torch

from explored_kernels import explored_kernels


def _channels_last(*shape):
    return torch.randn(*shape).to(memory_format=torch.channels_last)


def _with_nans(*shape):
    x = torch.randn(*shape)
    x[torch.rand(*shape) < 0.02] = float("nan")
    return x.to(memory_format=torch.channels_last)


CASES = {
    "scale_by_mean": (lambda x: (x * x.mean((2, 3), keepdim=True)).contiguous(), lambda: _channels_last(4, 64, 9, 10)),
    "two_reductions": (lambda x: (torch.sigmoid(x - x.amax((2, 3), keepdim=True)) +
                                  x.sum((2, 3), keepdim=True)).contiguous(), lambda: _channels_last(2, 24, 5, 7)),
    "max_with_nans": (lambda x: (x * x.amax((2, 3), keepdim=True)).contiguous(), lambda: _with_nans(3, 40, 9, 11)),
    "stats_and_scaled": (lambda x: ((x * x.mean((2, 3), keepdim=True)).contiguous(), x.sum((2, 3))),
                         lambda: _channels_last(3, 130, 6, 6)),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", list(CASES))
def test_column_kernel_with_full_size_stores_matches_eager(case, backend):
    fn, make = CASES[case]
    kernels = explored_kernels(fn, (make(),), backend, name=case)
    assert len(kernels) == 1, [k.name for k in kernels]
    tiling = kernels[0].tiling
    assert tiling.choice == "column", tiling
    if backend == "cpp":
        assert "full-size stores walk each tile" in tiling.reason, tiling
