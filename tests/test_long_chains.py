"""No recursion limit in code generation (Note [Iterative inlining]): a chain of 2000 pointwise ops is one
kernel and matches eager through both backends. The ATen graph comes from make_fx, so the test times our
stages, not Dynamo's tracing of 2000 Python ops."""
import time

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from engine.pipeline import Options, compile_graph

CHAIN = 2000


def _chain(x):
    for i in range(CHAIN):  # one ATen op each
        x = torch.sin(x) if i % 2 else x * 1.0001
    return x


@pytest.fixture(scope="module")
def traced():
    x = torch.randn(257)
    return x, make_fx(_chain)(x)  # traced once for both backends


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_2000_op_chain_is_one_kernel_and_matches_eager(backend, traced):
    x, graph = traced
    assert len([n for n in graph.graph.nodes if n.op == "call_function"]) >= CHAIN
    start = time.perf_counter()
    compiled = compile_graph(graph, [x], Options(backend=backend))
    elapsed = time.perf_counter() - start
    kernels = [k for k in compiled.schedule.kernels if k.kind == "pointwise"]
    assert len(kernels) == 1, [k.name for k in compiled.schedule.kernels]
    (actual,) = compiled.call([x.clone()])
    torch.testing.assert_close(actual, _chain(x), atol=1e-5, rtol=1e-5)
    print(f"{backend}: {elapsed:.1f} s")
