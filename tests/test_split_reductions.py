"""Split reductions (Note [Split reductions on the GPU]; C++: Note [Split reductions in C++]): few outputs and
a long reduction. On Triton two kernels with partial results between them, each recorded as a stage of the
split; kernels that cannot split say why. Every case matches eager through both backends."""
import pytest
import torch

import engine

BACKENDS = ["cpp", "triton"]
LONG = 1 << 16  # the shortest reduction that splits


def _explore(fn, inputs, backend):
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name="split")
    assert exploration.verify.ok, exploration.verify
    return [k for k in exploration.kernels if k.kind == "reduction"]


CASES = {
    "full_sum": (lambda t: t.sum(), lambda: torch.randn(LONG)),
    "not_divisible": (lambda t: t.sum(), lambda: torch.randn(3 * 65537)),  # lanes past the end: clamped, masked
    "few_columns": (lambda t: t.sum(0), lambda: torch.randn(LONG, 3)),
    "mean_with_epilogue": (lambda t: (t.mean() * 2 + 1, t.amax(), t.amin()), lambda: torch.randn(4, LONG // 4)),
    "four_dims": (lambda t: t.sum(), lambda: torch.randn(4, 8, 32, 64)),
    "nan_max": (lambda t: t.amax(), lambda: torch.randn(LONG).index_fill(0, torch.tensor([40000]), float("nan"))),
    "prod": (lambda t: t.prod(), lambda: 1 + torch.randn(LONG) * 1e-3),
    "flags": (lambda t: ((t > 3.5).any(), (t < 5).all(), (t > 0).sum()), lambda: torch.randn(LONG)),
    "half_sum": (lambda t: t.sum(), lambda: torch.randn(LONG, dtype=torch.bfloat16)),
    "int_sum": (lambda t: t.sum(), lambda: torch.randint(-100, 100, (LONG,))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_split_reductions_match_eager(backend, case):
    fn, make = CASES[case]
    kernels = _explore(fn, (make(),), backend)
    assert {k.tiling.choice for k in kernels} == {"split"}
    if backend == "triton":
        stages = sorted(k.tiling.reason.split(" of ")[0] for k in kernels)
        assert stages == ["stage 1", "stage 2"], [k.tiling.reason for k in kernels]
        partials = next(k for k in kernels if k.name.endswith("_partials"))
        assert "workspace" in partials.tiling.reason


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn,why", [(lambda t: t.argmax(), "an argmax")], ids=["argmax"])
def test_kernels_that_cannot_split_say_why(backend, fn, why):
    (kernel,) = _explore(fn, (torch.randn(LONG),), backend)
    assert kernel.tiling.choice == "split"
    if backend == "triton":
        assert f"Triton: not split ({why}" in kernel.tiling.reason, kernel.tiling.reason


def _two_passes(t):
    return (t - t.mean()).abs().amax()


def _group_norm(x):  # a per-image norm over 64K elements, then elementwise work over all of them
    return torch.nn.functional.group_norm(x, 1) * 2 + x


@pytest.mark.parametrize("fn,make", [(_two_passes, lambda: torch.randn(LONG)),
                                     (_group_norm, lambda: torch.randn(4, 16, 64, 64)),
                                     # Note [Few long rows]: PoolFormer's later stages, under C++'s floor
                                     (_group_norm, lambda: torch.randn(16, 32, 28, 28))],
                         ids=["two_passes", "group_norm", "group_norm_25088"])
def test_few_rows_stay_splittable_on_triton(fn, make):
    # Note [Few rows stay splittable]: a reduction reading another, and elementwise work over every element
    # after one, are not fused into a few-rows reduction on Triton: each pass splits in two stages
    torch._dynamo.reset()
    exploration = engine.explore(fn, (make(),), backend="triton", name="split")
    assert exploration.verify.ok, exploration.verify
    reductions = [k for k in exploration.kernels if k.kind == "reduction"]
    assert len(reductions) == 4 and all(k.tiling.choice == "split" for k in reductions)
    assert sum(k.name.endswith("_partials") for k in reductions) == 2
    refused = [d for g in exploration.graphs for d in g.fusion.decisions if d.rule == "few_rows_stay_splittable"]
    assert refused and not any(d.fused for d in refused)
    # C++ splits inside one kernel over its threads: there the chain stays fused
    torch._dynamo.reset()
    cpp = engine.explore(fn, (make(),), backend="cpp", name="split")
    assert cpp.verify.ok and not [d for g in cpp.graphs for d in g.fusion.decisions
                                  if d.rule == "few_rows_stay_splittable"]


@pytest.mark.slow
def test_split_stages_compile_for_sm90_without_a_gpu():
    """Both stages (a looped stage 1 with clamped, masked lanes; a persistent stage 2) compile for an H200."""
    from engine.tools import assembly
    if not assembly.ptxas_available():
        pytest.skip("ptxas is not in this Triton wheel nor on PATH")
    for fn, inputs in [(lambda t: t.sum(), (torch.randn(1 << 20),)), (lambda t: t.sum(0), (torch.randn(3 * 65537, 8),))]:
        torch._dynamo.reset()
        exploration = engine.explore(fn, inputs, backend="triton", name="sm90")
        assert assembly.add_assembly(exploration) == 2
        for kernel in exploration.kernels:
            asm = kernel.asm
            if asm is not None:
                assert not asm.error and ".target sm_90" in asm.ptx, asm.error


def test_rows_from_16384_elements_split_on_triton_only():
    """Note [Few long rows]: 16 outputs of 16384 elements split in two kernels on Triton; C++ keeps one kernel
    with a thread per row, and 16383 elements stay one kernel on both."""
    from engine.schedule.policy import GPU_SPLIT_MIN_REDUCTION
    fn = lambda t: t.sum(1) * 2  # noqa: E731
    kernels = _explore(fn, (torch.randn(16, GPU_SPLIT_MIN_REDUCTION),), "triton")
    assert sorted(k.tiling.reason.split(" of ")[0] for k in kernels) == ["stage 1", "stage 2"]
    assert [k.tiling.choice for k in _explore(fn, (torch.randn(16, GPU_SPLIT_MIN_REDUCTION),), "cpp")] == ["row"]
    assert len(_explore(fn, (torch.randn(16, GPU_SPLIT_MIN_REDUCTION - 1),), "triton")) == 1
