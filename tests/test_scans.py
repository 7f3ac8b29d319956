"""Scans as generated kernels (Note [Scans] in engine/ir/nodes.py, Note [Scan kernels] in policy.py, Note
[Scan accumulation in C++], Note [Scans in Triton]): cumsum, cumprod, logcumsumexp, cummax and cummin over any
dim, fused with elementwise producers and consumers, matching eager through both backends (Triton under the
interpreter), with empty and size-1 dims, NaN and infinities, non-contiguous inputs, long scans, dtypes and
dynamic sizes."""
import pytest
import torch

import engine
from engine.ir.evaluator import evaluate_graph
from explored_kernels import without_fallbacks
from tests.lowered_graphs import lowered

BACKENDS = ["cpp", "triton"]


def _check(fn, inputs, backend, dynamic=False):
    """Our compiled result equals eager's, exactly in shape, dtype and NaN positions, within tolerance."""
    _, kernels = without_fallbacks(fn, inputs, backend, "scan", dynamic)
    torch._dynamo.reset()
    compiled = engine.compile(fn, backend=backend, dynamic=dynamic)
    got, expected = compiled(*inputs), fn(*inputs)
    for g, e in zip(got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)):
        assert g.dtype == e.dtype and g.shape == e.shape
        half = e.dtype in (torch.float16, torch.bfloat16)  # one rounding step of the half type apart at most
        torch.testing.assert_close(g, e, equal_nan=True, atol=2e-2 if half else 1e-4, rtol=1.6e-2 if half else 1e-4)
    return kernels


OPS = {
    "cumsum": lambda x, d: x.cumsum(d),
    "cumprod": lambda x, d: x.cumprod(d),
    "logcumsumexp": lambda x, d: x.logcumsumexp(d),
    "cummax": lambda x, d: torch.cummax(x, d),
    "cummin": lambda x, d: torch.cummin(x, d),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_every_scan_over_every_dim(backend, op, dim):
    x = torch.randn(5, 7, 3) * 0.9
    _check(lambda t: OPS[op](t, dim), (x,), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cumsum_with_producer_and_consumer_is_one_kernel(backend):
    kernels = _check(lambda x: (x * 3 + 1).cumsum(-1) * 0.5, (torch.randn(64, 300),), backend)
    assert len(kernels) == 1, [k.name for k in kernels]
    assert kernels[0].tiling.choice == "scan"


@pytest.mark.parametrize("backend", BACKENDS)
def test_cummax_values_and_indices_with_consumers(backend):
    def fn(x):
        values, indices = torch.cummax(x.abs(), 1)
        return values * 2, indices + 1
    _check(fn, (torch.randn(6, 40),), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_special_values(backend):
    x = torch.randn(6, 50)
    x[0, 3] = float("nan")
    x[1, 10] = float("inf")
    x[2, 0] = float("-inf")
    x[3, :] = float("-inf")
    x[4, 7] = float("inf")
    x[4, 9] = float("-inf")
    x[5, ::2] = 2.5  # ties: cummax moves to the later equal value
    for op in OPS:
        _check(lambda t, op=op: OPS[op](t, 1), (x,), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,dim", [((0, 5), 1), ((4, 0), 1), ((3, 1), 1), ((1, 9), 0), ((), 0)])
def test_empty_and_size_one_dims(backend, shape, dim):
    x = torch.randn(shape)
    _check(lambda t: t.cumsum(dim) + 1, (x,), backend)
    _check(lambda t: torch.cummin(t, dim)[1], (x,), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_inputs(backend):
    x = torch.randn(20, 30)
    _check(lambda t: t.t().cumsum(1), (x,), backend)
    _check(lambda t: t[:, ::3].logcumsumexp(1), (x,), backend)
    _check(lambda t: torch.cummax(t.t()[2:], 0)[1], (x,), backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_long_scans_stay_exact(backend):
    """Longer than a tile (Triton's looped form) and long enough that a float32 running sum of ones stops
    growing at 2^24 if it were kept in float (C++ keeps eager's double, Note [Scan accumulation in C++])."""
    x = torch.randn(3, 20000)
    kernels = _check(lambda t: t.cumsum(1) * 2, (x,), backend)
    assert len(kernels) == 1
    _check(lambda t: torch.cummax(t, 1)[1], (x,), backend)
    if backend == "cpp":
        ones = torch.ones(1, (1 << 24) + 64)
        _check(lambda t: t.cumsum(1), (ones,), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool])
def test_dtypes(backend, dtype):
    if dtype.is_floating_point:
        x = torch.randn(4, 33).to(dtype)
        _check(lambda t: t.cumsum(1) * 2, (x,), backend)
        _check(lambda t: torch.cummax(t, 1), (x,), backend)
    else:
        x = torch.randint(-3, 4, (4, 33)).to(dtype) if dtype != torch.bool else torch.rand(4, 33) > 0.5
        _check(lambda t: t.cumsum(1), (x,), backend)  # int64, as eager
        if dtype != torch.bool:
            _check(lambda t: t.cumprod(0), (x,), backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_sizes(backend):
    fn = lambda t: (t * 2).cumsum(1) + 1
    _check(fn, (torch.randn(5, 37),), backend, dynamic=True)
    _check(fn, (torch.randn(3, 9001),), backend, dynamic=True)


def test_the_evaluator_runs_scans():
    x = torch.randn(4, 9)
    fn = lambda t: (t.cumsum(0), t.logcumsumexp(1), torch.cummax(t, 1)[1], t.cumprod(1))
    for got, expected in zip(evaluate_graph(lowered(fn, x), [x]), fn(x)):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cumsum_after_a_recompile_for_a_new_length(backend):
    # a decoder's position ids from its padding mask: the second length recompiles (automatic dynamic) into a
    # graph whose cumsum runs over a symbolic length; it is a generated scan there too, not an eager op
    fn = lambda mask: mask.cumsum(-1) * mask - 1
    gen = torch.Generator().manual_seed(0)
    first, *rest = [(torch.randint(0, 2, (2, n), generator=gen),) for n in (9, 13, 21)]
    torch._dynamo.reset()
    exploration = engine.explore(fn, first, backend=backend, name="scan", dynamic=None, dynamic_inputs=rest)
    assert not exploration.errors and all(g.fallback is None for g in exploration.graphs)
    assert exploration.verify.ok and all(run.verify.ok for run in exploration.runs), exploration.runs
    assert [run.new_graphs for run in exploration.runs] == [1, 0]  # one recompile, then the dynamic graph serves
    assert not [k.reason for g in exploration.graphs for k in g.kernels if k.kind == "fallback"]
    assert [k for k in exploration.graphs[-1].kernels if k.kind in ("pointwise", "reduction")]
