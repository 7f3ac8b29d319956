"""Column reductions decide by bytes (Note [Column splits by bytes], Note [Column config]): a column sum whose
rows are narrower in bytes than the measured-good float32 8192-column sum splits, and its stage 1 keeps at least
that sum's bytes in flight; the measured float32 cases keep their decisions and configs. The decisions are
checked at the H200 shapes by compiling only; the outputs at interpreter-sized shapes that still split by bytes,
through both backends."""
import pytest
import torch

import engine
from engine.pipeline import AtenGraph, Options, stage_named
from engine.tools.aten_graphs import capture_aten

BF16, F32 = torch.bfloat16, torch.float32


def _column_kernels(fn, *inputs) -> list:
    """The Triton column-form kernels of fn's graphs, compiled for a GPU and not run."""
    kernels = []
    for gm, fake_inputs in capture_aten(fn, *inputs):
        artifact = AtenGraph(gm, list(fake_inputs))
        for stage in ("lower", "schedule", "codegen"):
            artifact = stage_named(stage).fn(artifact, Options(backend="triton"))
        kernels += [k for k in artifact.module.kernels if k.form == "column"]
    return kernels


def _gpu(kernel):
    config = kernel.record_fields()["triton"].gpu_config
    return config["XBLOCK"], config["RBLOCK"], config["num_warps"]


def _in_flight(kernel, itemsize: int) -> dict:
    """Bytes a column kernel's GPU config reads: of each row a program steps over, a step of a program, a step
    of all programs together, and one row of all of them."""
    xblock, rblock, _ = _gpu(kernel)
    programs = -(-int(kernel.rows) // xblock)
    return {"program_row": xblock * itemsize, "program_step": xblock * rblock * itemsize,
            "step": programs * xblock * rblock * itemsize, "row": int(kernel.rows) * itemsize, "programs": programs}


def _column_sum(rows: int, columns: int, dtype) -> list:
    return _column_kernels(lambda t: t.sum(0), torch.empty(rows, columns, dtype=dtype))


@pytest.fixture(scope="module")
def good():
    """The measured-good case: x.sum(0) of 8192 x 8192 float32, one column kernel, its config unchanged."""
    (kernel,) = _column_sum(8192, 8192, F32)
    assert not kernel.tiling.reason.startswith("stage") and _gpu(kernel) == (32, 64, 8)
    return _in_flight(kernel, 4)


@pytest.mark.parametrize("columns", [4096, 3072, 1024])
def test_bfloat16_bias_gradients_split_and_stage_1_keeps_the_good_bytes_in_flight(good, columns):
    first, second = _column_sum(8192, columns, BF16)
    assert first.name.endswith("_partials") and first.tiling.columns and second.tiling.columns
    parts = int(first.rows) // columns
    assert parts * int(first.red) == 8192  # the parts divide the rows: no clamped lane
    stage_1 = _in_flight(first, 2)
    for key in ("program_row", "program_step", "step", "row", "programs"):
        assert stage_1[key] >= good[key], (key, stage_1, good)
    assert int(second.rows) == columns and int(second.red) == parts


def test_bfloat16_rows_as_wide_as_the_good_case_do_not_split(good):
    (kernel,) = _column_sum(8192, 16384, BF16)  # 32 KB a row, as 8192 float32
    assert not kernel.tiling.reason.startswith("stage")
    assert _in_flight(kernel, 2) == good


def test_measured_float32_cases_keep_their_decisions_and_configs():
    first, second = _column_sum(1 << 22, 8, F32)  # few_column_sum: 1024 parts, stage 1 as column_sum 8192^2
    assert (int(first.rows), _gpu(first)) == (8192, (32, 64, 8)) and int(second.red) == 1024
    # a layernorm's weight gradient over 1024 channels and 8192 tokens: 8 parts (each of its two float32 reads
    # is its own stream of 4 KB rows), stage 1 again as column_sum 8192^2
    first, second = _column_kernels(lambda g, xhat: (g * xhat).sum(0), torch.empty(8192, 1024), torch.empty(8192, 1024))
    assert (int(first.rows), int(first.red), _gpu(first)) == (8192, 1024, (32, 64, 8))
    (many,) = _column_kernels(lambda t: t.sum(1), torch.empty(32, 256, 56, 56))  # nchw_sum_dim1: 100352 outputs
    assert _gpu(many) == (64, 8, 4)
    (se,) = _column_kernels(lambda t: t * t.mean((2, 3), keepdim=True),  # se_channels_last: 8192 outputs
                            torch.empty(32, 256, 56, 56).to(memory_format=torch.channels_last))
    assert not se.tiling.reason.startswith("stage") and _gpu(se) == (32, 64, 8)


def test_the_narrowest_column_read_decides():
    """A bfloat16 read beside a float32 one: the bfloat16 rows (4 KB for 2048 outputs) set the parts, 8, where
    the float32 rows alone (8 KB) would take 4."""
    first, _ = _column_kernels(lambda g, w: (g.float() * w).sum(0), torch.empty(8192, 2048, dtype=BF16),
                               torch.empty(8192, 2048))
    assert int(first.rows) == 8 * 2048 and _gpu(first)[0] * 2 >= 128


@pytest.mark.parametrize("rows", [1024, 2048, 4096, 8192, 12288, 16384])
def test_the_column_config_counts_bytes(rows):
    """A bfloat16 column kernel with rows of as many bytes as a float32 one's (twice the outputs) reads as many
    bytes of each row and a step, on as many programs and warps: the float32 configs are the measured ones."""
    from engine.codegen.triton.config import choose_config
    f32 = choose_config("column", rows, 8192, interpreter=False, itemsize=4)
    bf16 = choose_config("column", 2 * rows, 8192, interpreter=False, itemsize=2)
    assert (bf16.XBLOCK * 2, bf16.RBLOCK, bf16.num_warps) == (f32.XBLOCK * 4, f32.RBLOCK, f32.num_warps)
    assert -(-2 * rows // bf16.XBLOCK) == -(-rows // f32.XBLOCK)


def _explore(fn, inputs, backend):
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name="column_bytes")
    assert exploration.verify.ok, exploration.verify
    assert not exploration.errors, exploration.errors
    return [k for k in exploration.kernels if k.kind == "reduction"]


CASES = {  # split by bytes, not by outputs: 2048 and more outputs, which the old rule left whole
    "bf16_2048_columns": (lambda t: t.sum(0), lambda: (torch.randn(2048, 2048, dtype=BF16),), 8),
    # 12 KB rows: 3 parts would do, 4 is the first count from there that divides 2048 rows
    "f32_3072_columns": (lambda t: t.sum(0), lambda: (torch.randn(2048, 3072),), 4),
    "bf16_bias_gradient_3d": (lambda t: t.sum((0, 1)), lambda: (torch.randn(2, 1024, 2048, dtype=BF16),), 8),
    "bf16_mixed_reads": (lambda g, w: (g.float() * w).sum(0),
                         lambda: (torch.randn(2048, 2048, dtype=BF16), torch.randn(2048, 2048)), 8),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", list(CASES))
def test_byte_splits_match_eager(backend, case):
    fn, make, parts = CASES[case]
    kernels = _explore(fn, make(), backend)
    if backend == "cpp":  # C++ does not split columns into kernels (Note [Split reductions in C++])
        assert len(kernels) == 1
        return
    first, second = sorted(kernels, key=lambda k: not k.name.endswith("_partials"))
    assert first.triton.form == second.triton.form == "column", (first.tiling, second.tiling)
    assert int(first.triton.rows) == parts * int(second.triton.rows)


def test_byte_split_stages_compile_for_sm90_without_a_gpu():
    """Both stages compile for an H200 with their GPU configs (stage 1 of bfloat16: 64 outputs x 64 steps)."""
    from engine.tools import assembly
    if not assembly.ptxas_available():
        pytest.skip("ptxas is not in this Triton wheel nor on PATH")
    fn, make, _ = CASES["bf16_2048_columns"]
    torch._dynamo.reset()
    exploration = engine.explore(fn, make(), backend="triton", name="column_bytes_sm90")
    assert assembly.add_assembly(exploration) == 2
    for kernel in exploration.kernels:
        asm = kernel.asm
        if asm is not None:
            assert not asm.error and ".target sm_90" in asm.ptx, asm.error
