"""Tiling chosen from strides (Note [Tiling from strides]) and recorded with its reason; every tiled shape
matches eager through both backends (Triton under the interpreter, so sizes stay small)."""
import itertools

import pytest
import torch

import engine
from explored_kernels import explored_kernels

BACKENDS = ["cpp", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["transpose_add", "nchw_to_nhwc_add", "nhwc_to_nchw", "odd_transpose",
                                  "wide_transpose"])
def test_transposed_and_permuted_pointwise_are_2d_tiles(backend, case):
    fn, inputs = {
        "transpose_add": (lambda a, b: a.t() + b, (torch.randn(64, 48), torch.randn(48, 64))),
        "nchw_to_nhwc_add": (lambda a, b: a.permute(0, 2, 3, 1) + b, (torch.randn(2, 32, 8, 8), torch.randn(2, 8, 8, 32))),
        "nhwc_to_nchw": (lambda a: a.permute(0, 3, 1, 2).contiguous() * 2, (torch.randn(2, 8, 8, 33),)),
        "odd_transpose": (lambda a: (a.t() + 1).sin(), (torch.randn(37, 53),)),
        "wide_transpose": (lambda a: a.t() * 3, (torch.randn(1100, 20),)),  # several X blocks a Y block
    }[case]
    (kernel,) = explored_kernels(fn, inputs, backend)
    assert kernel.tiling.choice == "2d" and "contiguous along dim" in kernel.tiling.reason
    if backend == "triton":
        assert kernel.triton.form == "tiled" and "YBLOCK" in kernel.source


@pytest.mark.parametrize("backend", BACKENDS)
def test_contiguous_pointwise_stays_1d(backend):
    (kernel,) = explored_kernels(lambda a: a * 2 + 1, (torch.randn(32, 64),), backend)
    assert kernel.tiling.choice == "1d" and kernel.tiling.reason


SHAPES = [(24, 40), (6, 10, 18), (3, 8, 6, 10)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_reductions_over_every_axis(backend, shape):
    x = torch.randn(shape)
    dims = list(range(len(shape)))
    combos = [(d,) for d in dims] + [c for c in itertools.combinations(dims, 2) if len(shape) > 2]

    def fn(t):
        return [t.sum(c) for c in combos] + [t.amax(dims[0]), t.mean(dims[-1], keepdim=True)]

    kernels = explored_kernels(fn, (x,), backend)
    choices = {k.tiling.choice for k in kernels}
    assert "column" in choices and "row" in choices, choices


@pytest.mark.parametrize("backend", BACKENDS)
def test_column_reduction_with_an_epilogue(backend):
    kernels = explored_kernels(lambda t: t - t.mean(0), (torch.randn(40, 33),), backend)
    assert kernels[0].tiling.choice == "column"


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_reduction_is_recorded(backend):
    kernels = explored_kernels(lambda t: t.sum(), (torch.randn(1 << 16),), backend)
    assert len(kernels) == (2 if backend == "triton" else 1)  # Triton: two stages (tests/test_split_reductions.py)
    assert all(k.tiling.choice == "split" for k in kernels)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("row", [8193, 50257])
def test_long_rows_softmax_and_log_softmax(backend, row):
    """Rows beyond the persistent limit (8192): looped multi-pass reductions."""
    x = torch.randn(3, row)
    kernels = explored_kernels(lambda t: (t.softmax(-1), t.log_softmax(-1)), (x,), backend)
    assert all(k.tiling.choice == "row" for k in kernels)
    if backend == "triton":
        assert {k.triton.form for k in kernels} == {"looped"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_cross_entropy_over_long_rows(backend):
    logits, target = torch.randn(4, 8193), torch.randint(0, 8193, (4,))
    explored_kernels(lambda a, b: torch.nn.functional.cross_entropy(a, b), (logits, target), backend)


@pytest.mark.slow
def test_tiled_column_and_looped_forms_compile_for_sm90_without_a_gpu():
    """The GPU configs of the new forms (2D tiles, column tiles, long looped rows, online softmax, half types)
    compile for an H200's target here, so `bench gpu`'s tiling cases will not fail on the generated source."""
    from engine.tools import assembly
    if not assembly.ptxas_available():
        pytest.skip("ptxas is not in this Triton wheel nor on PATH")
    cases = [
        (lambda a, b: a.t() + b, (torch.randn(64, 64), torch.randn(64, 64))),
        (lambda a: a.sum(0), (torch.randn(64, 96),)),
        (lambda a: a.sum(1), (torch.randn(2, 16, 8, 8),)),
        (lambda a: torch.log_softmax(a, -1), (torch.randn(2, 50257),)),
        (lambda a, b: a.permute(0, 2, 3, 1) + b, (torch.randn(2, 16, 8, 8).half(), torch.randn(2, 8, 8, 16).half())),
        (torch.nn.LayerNorm(320).to(torch.bfloat16), (torch.randn(4, 320, dtype=torch.bfloat16),)),
        # online softmax (tests/test_online_softmax.py): its helpers, eviction hints and GPU config
        (lambda a: torch.softmax(a, -1), (torch.randn(2, 32000),)),
        (lambda a, b: torch.nn.functional.cross_entropy(a, b), (torch.randn(2, 32000), torch.randint(0, 32000, (2,)))),
        (lambda a: torch.softmax(a, -1), (torch.randn(2, 8193, dtype=torch.bfloat16),)),
    ]
    for fn, inputs in cases:
        torch._dynamo.reset()
        exploration = engine.explore(fn, inputs, backend="triton", name="sm90")
        assert assembly.add_assembly(exploration) >= 1
        for kernel in exploration.kernels:
            asm = kernel.asm
            if asm is not None:
                assert not asm.error and ".target sm_90" in asm.ptx, asm.error
