"""histc as our kernel (Note [Histogram as a reduction per bin] in engine/lowering/histogram.py): a MoE
router's token count per expert and float data with values outside the range, at bin edges, at max itself and
NaN give eager's counts through both backends (Triton under the interpreter), over non-contiguous, size-1 and
empty inputs and float64; a data-dependent range (min == max), too many bins and a library's custom op run
eagerly with their reasons."""
import pytest
import torch

import engine
from explored_kernels import without_fallbacks

BACKENDS = ["cpp", "triton"]


@torch.library.custom_op("glassbox_test::twice", mutates_args=())
def twice(t: torch.Tensor) -> torch.Tensor:
    return t * 2


twice.register_fake(lambda t: torch.empty_like(t))


def _reasons(fn, inputs, backend) -> list[str]:
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name="histc")
    assert not exploration.errors and exploration.verify.ok, exploration.verify
    return [k.reason or "" for k in exploration.kernels if k.kind == "fallback"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_router_counts_tokens_per_expert(backend):
    """transformers' grouped experts: sorted expert ids as floats, one bin per expert."""
    def route(logits):
        _, experts = torch.topk(logits, 2, -1)
        return torch.histc(experts.flatten().float() * 1, bins=8, min=0, max=7)

    torch.manual_seed(0)
    exploration, kernels = without_fallbacks(lambda ids: torch.histc(ids.float(), bins=8, min=0, max=7),
                                             (torch.randint(0, 8, (64, 2)),), backend, "histc")
    assert [k.kind for k in kernels] == ["reduction"], kernels
    reasons = _reasons(route, (torch.randn(32, 8),), backend)
    assert reasons and all("sorting" in r for r in reasons), reasons  # topk runs eagerly, histc does not


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_edges_outside_values_and_nan(backend, dtype):
    torch.manual_seed(0)
    x = torch.randn(7, 9, dtype=dtype) * 2
    x[0, :6] = torch.tensor([-1.0, 1.0, 0.5, -0.5, float("nan"), 1.0 - 1e-7], dtype=dtype)  # edges, max, NaN
    x[1, :3] = torch.linspace(-1, 1, 3, dtype=dtype)
    without_fallbacks(lambda t: torch.histc(t, bins=4, min=-1, max=1), (x,), backend, "histc")
    without_fallbacks(lambda t: torch.histc(t.t() * 3, bins=7, min=-2.5, max=4.1), (x,), backend, "histc")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(1,), (0,), (3, 1, 5)], ids=["size_one", "empty", "three_dims"])
def test_small_and_empty_inputs(backend, shape):
    torch.manual_seed(0)
    without_fallbacks(lambda t: torch.histc(t, bins=5, min=-1, max=1) + 1, (torch.randn(shape),), backend,
                      "histc")


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_runs_eagerly_says_why(backend):
    x = torch.randn(40)
    assert any("min == max" in r for r in _reasons(lambda t: torch.histc(t, bins=4), (x,), backend))
    assert any("65 bins" in r for r in _reasons(lambda t: torch.histc(t, bins=65, min=-1, max=1), (x,), backend))
    reasons = _reasons(lambda t: torch.ops.glassbox_test.twice(t) + 1, (x,), backend)
    assert any("glassbox_test::twice is a custom op" in r for r in reasons), reasons


def test_integer_histc_on_the_cpu_is_eagers_and_says_why():
    """Note [Integer histograms]: eager's CPU kernel raises for integers, and so does the compiled model."""
    ids = torch.randint(0, 8, (64,), dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="histogram_cpu"):
        torch.histc(ids, bins=8, min=0, max=7)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="histogram_cpu"):
        engine.compile(lambda t: torch.histc(t, bins=8, min=0, max=7) + 1)(ids)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_histc_on_the_gpu_counts_as_eager(dtype):
    """A router's int32 expert ids, one bin per expert, and a range that ids fall outside of and whose bins are
    uneven (7 values over 3 bins), with the maximum itself counted in the last bin."""
    torch.manual_seed(0)
    ids = torch.randint(-2, 10, (4096, 2), device="cuda", dtype=dtype)
    for fn in (lambda t: torch.histc(t, bins=8, min=0, max=7), lambda t: torch.histc(t.t(), bins=3, min=1, max=7)):
        torch._dynamo.reset()
        exploration = engine.explore(fn, (ids,), backend="triton", device="cuda", name="histc")
        assert not exploration.errors and exploration.verify.ok, exploration.verify
        assert [k.kind for k in exploration.kernels if k.kind == "fallback"] == [], exploration.kernels


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_mm_is_a_library_call(backend):
    """Note [Grouped GEMMs are library calls]: an MoE layer's grouped GEMM over data-dependent groups is the
    library's kernel, with our kernels around it, not an eager fallback."""
    torch.manual_seed(0)
    tokens = torch.randn(12, 16, dtype=torch.bfloat16)
    weights = torch.randn(3, 16, 8, dtype=torch.bfloat16)
    offs = torch.tensor([4, 9, 12], dtype=torch.int32)
    fn = lambda t, w, o: torch.nn.functional.silu(torch._grouped_mm(t * 2, w, offs=o))  # noqa: E731
    torch._dynamo.reset()
    exploration = engine.explore(fn, (tokens, weights, offs), backend=backend, name="grouped_mm")
    assert not exploration.errors and exploration.verify.ok, exploration.verify
    kinds = [k.kind for k in exploration.kernels]
    assert "fallback" not in kinds and "extern" in kinds, kinds
