"""Column splits (Note [Column splits]): column reductions with few outputs split into a part-major stage 1
walked as column tiles and a stage 2 that combines; a full-size output of the reduction's input rides along in
stage 1 when the parts divide the reduction. Every case matches eager through both backends (Triton under the
interpreter); stage 1 and 2 compile for an H200 without a GPU."""
import pytest
import torch

import engine

BACKENDS = ["cpp", "triton"]


def _explore(fn, inputs, backend):
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name="column_split")
    assert exploration.verify.ok, exploration.verify
    assert not exploration.errors, exploration.errors
    return [k for k in exploration.kernels if k.kind in ("pointwise", "reduction")], exploration


def _bn_relu_and_mean(x, scale, shift):
    y = torch.relu(x * scale + shift)
    return y, y.mean((2, 3))


def _channels_last(*shape):
    return torch.randn(*shape).to(memory_format=torch.channels_last)


CASES = {
    # few outputs, a long reduction (wants_split) that reads columns: stage 1 is a column kernel
    "few_columns": (lambda t: t.sum(0), lambda: (torch.randn(1 << 17, 8),), True),
    "few_columns_clamped": (lambda t: t.sum(0), lambda: (torch.randn(3 * 65537, 3),), True),  # 65537 is prime
    "few_columns_max_nan": (lambda t: t.amax(0),
                            lambda: (torch.randn(1 << 16, 4).index_fill(0, torch.tensor([777]), float("nan")),), True),
    # a squeeze-excitation mean after channels-last convolutions: 128 outputs over 64*64, the full-size
    # batch-norm + relu output stored by stage 1
    "se_mean_with_full_store": (_bn_relu_and_mean, lambda: (_channels_last(4, 32, 64, 64), torch.randn(1, 32, 1, 1),
                                                            torch.randn(1, 32, 1, 1)), True),
    "avgpool_half": (lambda t: t.mean((2, 3)), lambda: (_channels_last(2, 64, 48, 48).half(),), True),
    # a layernorm weight gradient's shape: 1024 channels summed over 2048 tokens (the column form: 128 programs)
    "weight_gradient": (lambda g, xhat: (g * xhat).sum(0), lambda: (torch.randn(2048, 1024), torch.randn(2048, 1024)),
                        True),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_column_splits_match_eager(backend, case):
    fn, make, split = CASES[case]
    kernels, _ = _explore(fn, make(), backend)
    reductions = [k for k in kernels if k.kind == "reduction"]
    if backend == "cpp":
        assert len(reductions) == 1
        return
    stages = [k for k in reductions if k.tiling.reason.startswith("stage ")]
    assert len(stages) == (2 if split else 0), [k.tiling for k in reductions]
    for stage in stages:
        assert stage.tiling.columns and stage.triton.form == "column", stage.tiling
        assert "column tiles" in stage.tiling.reason


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_full_store_rides_along_in_stage_1(backend):
    kernels, _ = _explore(_bn_relu_and_mean, (_channels_last(4, 32, 64, 64), torch.randn(1, 32, 1, 1),
                                              torch.randn(1, 32, 1, 1)), backend)
    if backend == "triton":
        first = next(k for k in kernels if k.name.endswith("_partials"))
        assert len(first.writes) == 2, first.writes  # the partial sums and the full-size output


def test_training_batch_norm_statistics_split():
    """Note [Per-output values of a split]: a training batch norm over channels-last activations updates its
    running statistics per channel beside the batch's mean and variance; that update neither reads the input nor
    feeds the sums, so the statistics still split into stages (they ran as one program per 64 channels)."""
    module = torch.nn.BatchNorm2d(32).train()
    kernels, exploration = _explore(module, (_channels_last(4, 32, 64, 64),), "triton")
    stages = [k for k in kernels if k.kind == "reduction" and k.tiling.reason.startswith("stage ")]
    assert len(stages) == 4, [k.tiling.reason for k in kernels if k.kind == "reduction"]  # the mean, the variance
    assert not any("not split" in k.tiling.reason for k in kernels if k.kind == "reduction")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_full_store_takes_a_count_of_parts_below_that_divides(backend):
    """6272 rows of 64 float32 columns: the row-width rule asks 24 parts (capped by 256 rows a part), which do not
    divide 6272; the full-size relu output stored beside the sum rides along in stage 1 on 16 parts of 392."""
    kernels, _ = _explore(lambda x: (torch.relu(x), torch.relu(x).sum((0, 2, 3))),
                          (_channels_last(2, 64, 56, 56),), backend)
    if backend == "triton":
        first = next(k for k in kernels if k.name.endswith("_partials"))
        assert len(first.writes) == 2 and "16 partial results" in first.tiling.reason, first.tiling.reason


@pytest.mark.slow
def test_no_split_when_a_full_store_does_not_divide():
    """H*W = 2053 (a prime): no number of parts divides it, so the full-size store cannot ride along; the
    kernel stays one column kernel and says why."""
    kernels, _ = _explore(lambda x: (torch.relu(x), torch.relu(x).mean((2, 3))),
                          (_channels_last(2, 64, 1, 2053),), "triton")
    (reduction,) = [k for k in kernels if k.kind == "reduction"]
    assert reduction.tiling.choice == "column"
    assert "Triton: not split (it stores a full-size value" in reduction.tiling.reason, reduction.tiling


@pytest.mark.slow
def test_column_split_stages_compile_for_sm90_without_a_gpu():
    from engine.tools import assembly
    if not assembly.ptxas_available():
        pytest.skip("ptxas is not in this Triton wheel nor on PATH")
    for fn, make, _ in (CASES["few_columns_clamped"], CASES["se_mean_with_full_store"], CASES["avgpool_half"]):
        _, exploration = _explore(fn, make(), "triton")
        assert assembly.add_assembly(exploration) >= 2
        for kernel in exploration.kernels:
            asm = kernel.asm
            if asm is not None:
                assert not asm.error and ".target sm_90" in asm.ptx, asm.error
