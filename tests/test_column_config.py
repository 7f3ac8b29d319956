"""The column form's GPU launch config (Note [Column config]): a column reduction with many outputs runs
64 outputs x 8 reduction steps over 4 warps on a GPU, fewer outputs keep wider steps, and the generated
source gives eager's answer under the Triton interpreter when launched with that config."""
import pytest
import torch

from engine.runtime import triton_build
from engine.codegen.triton.config import MANY_COLUMNS, choose_config
from engine.pipeline import AtenGraph, Options, stage_named
from engine.tools.aten_graphs import capture_aten


def _column_kernel(fn, x):
    (gm, fake_inputs), = capture_aten(fn, x)
    artifact = AtenGraph(gm, list(fake_inputs))
    for stage in ("lower", "schedule", "codegen"):
        artifact = stage_named(stage).fn(artifact, Options(backend="triton"))
    kernel, = [k for k in artifact.module.kernels if k.form == "column"]
    return artifact.module, kernel


def test_many_outputs_take_narrow_steps_and_few_outputs_keep_wide_ones():
    many = choose_config("column", MANY_COLUMNS, 256, interpreter=False)
    assert (many.XBLOCK, many.RBLOCK, many.num_warps) == (64, 8, 4)
    symbolic = choose_config("column", "s0*s1", 256, interpreter=False)  # a symbolic count counts as many
    assert (symbolic.XBLOCK, symbolic.RBLOCK) == (64, 8)
    fewer = choose_config("column", 8192, 8192, interpreter=False)  # column_sum 8192^2: measured, unchanged
    assert (fewer.XBLOCK, fewer.RBLOCK, fewer.num_warps) == (32, 64, 8)


@pytest.mark.parametrize("shape", [(2, 16, 32, 64), (1, 24, 33, 31)], ids=["nchw", "odd_sizes"])
def test_many_outputs_config_runs_the_source_right_under_the_interpreter(shape):
    # the source holds for every config it may launch with (masks, Note [Triton kernel shapes]): launched with
    # the many-outputs config on a smaller tensor (fewer programs for the interpreter), it gives eager's sum
    x = torch.randn(shape)
    module, kernel = _column_kernel(lambda t: t.sum(1), x)
    assert kernel.tiling.choice == "column" and "contiguous along the outputs" in kernel.tiling.reason
    assert "eviction_policy" in kernel.source  # a single read of each element: evict_first
    config = choose_config("column", MANY_COLUMNS, 256, interpreter=False)
    loaded, _ = triton_build.load_source(module.source, interpret=True)
    out = torch.empty(shape[:1] + shape[2:])
    grid = (-(-int(kernel.rows) // config.XBLOCK),)
    getattr(loaded, kernel.name)[grid](x, out, **config.kwargs())
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-4)
