"""Runs of an axis (Note [Runs of an axis]): column reductions and 2D tiles whose flat loop variable reaches
memory through divisions walk it as runs inside which every index is affine. Each case matches eager through
both backends (Triton under the interpreter) and records the run; the C++ inner loops index without a division."""
import pytest
import torch

from explored_kernels import explored_kernels

BACKENDS = ["cpp", "triton"]


def _inner_reads_are_affine(source: str) -> bool:
    """Every read of an input in the C++ kernel indexes without / or %."""
    reads = [line for line in source.splitlines() if "= arg" in line or "(arg" in line]
    return bool(reads) and all("/" not in line and "%" not in line for line in reads)


COLUMN_CASES = {
    "sum_dim1": (lambda a: a.sum(1), (torch.randn(2, 32, 8, 8),), "64"),
    "run_shorter_than_a_tile": (lambda a: a.sum(1), (torch.randn(3, 16, 7, 7),), "49"),
    "keepdim_mean": (lambda a: a.mean(1, keepdim=True), (torch.randn(2, 24, 4, 16),), "64"),
    "sum_and_amax_with_nan": (lambda a: (a.sum(1), a.amax(1)),
                              (torch.randn(2, 20, 5, 6).index_put_((torch.tensor([1]), torch.tensor([3]),
                                                                    torch.tensor([2]), torch.tensor([4])),
                                                                   torch.tensor(float("nan"))),), "30"),
    "epilogue_reads_a_broadcast": (lambda a, b: a.sum(1) * b, (torch.randn(2, 16, 4, 8), torch.randn(4, 8)), "32"),
    "sum_over_batch_and_height": (lambda a: a.sum((0, 2)), (torch.randn(3, 5, 6, 40),), "40"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(COLUMN_CASES))
def test_column_reductions_walk_runs(backend, case):
    fn, inputs, run = COLUMN_CASES[case]
    kernels = explored_kernels(fn, inputs, backend)
    column = [k for k in kernels if k.tiling.choice == "column"]
    assert column, [k.tiling for k in kernels]
    assert column[0].tiling.run == run, column[0].tiling
    if run is not None:
        assert "runs of" in column[0].tiling.reason
        if backend == "cpp":
            assert _inner_reads_are_affine(column[0].source), column[0].source


def test_no_run_when_the_inner_dims_are_too_short():
    """H*W = 15 (< TILE_MIN): runs would be shorter than a vector's worth of tiles; the flat walk stays."""
    (kernel,) = explored_kernels(lambda a: a.sum(1), (torch.randn(2, 32, 3, 5),), "cpp")
    assert kernel.tiling.choice == "column" and kernel.tiling.run is None


PERMUTE_CASES = {
    "nchw_to_nhwc_add": (lambda a, b: (a.permute(0, 2, 3, 1) + b).contiguous(), (torch.randn(2, 32, 8, 8), torch.randn(2, 8, 8, 32))),
    "nchw_to_nhwc_add_fp16": (lambda a, b: (a.permute(0, 2, 3, 1) + b).contiguous(),
                              (torch.randn(3, 16, 6, 6).half(), torch.randn(3, 6, 6, 16).half())),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(PERMUTE_CASES))
def test_2d_tiles_walk_runs_of_y(backend, case):
    fn, inputs = PERMUTE_CASES[case]
    (kernel,) = explored_kernels(fn, inputs, backend)
    tiling = kernel.tiling
    assert tiling.choice == "2d" and tiling.run == str(inputs[0].shape[2] * inputs[0].shape[3]), tiling
    if backend == "cpp":
        assert _inner_reads_are_affine(kernel.source), kernel.source
