"""Note [Convolution bias in the epilogue]: on CUDA a convolution's bias is a pointwise add of ours, which
fusion puts into the next kernel, instead of ATen's separate add_ kernel; on the CPU it stays in the library
call. Lowered for CUDA here without a GPU and run by the IR's reference evaluator, against eager."""
import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from engine.ir.evaluator import evaluate_graph
from engine.ir.nodes import Extern, Pointwise
from engine.lowering.graph import lower
from engine.schedule.fusion import node_reads

aten = torch.ops.aten


def squeeze_excite(x, w1, b1, w2, b2):
    scale = torch.sigmoid(F.conv2d(torch.relu(F.conv2d(x.mean((2, 3), keepdim=True), w1, b1)), w2, b2))
    return x * scale


def _inputs(dtype=torch.float32):
    torch.manual_seed(0)
    shapes = [(2, 16, 5, 6), (4, 16, 1, 1), (4,), (16, 4, 1, 1), (16,)]
    return [torch.randn(*s, dtype=dtype) for s in shapes]


def _convolutions(graph):
    return [n for n in graph.nodes if isinstance(n, Extern) and n.target is aten.convolution.default]


@pytest.mark.parametrize("layout", ["channels_last", "contiguous"])
def test_cuda_convolutions_take_no_bias_and_an_add_reads_it(layout):
    inputs = _inputs()
    graph = lower(make_fx(squeeze_excite, tracing_mode="fake")(*inputs), "cuda", layout)
    convolutions = _convolutions(graph)
    assert len(convolutions) == 2 and all(c.args[2] is None for c in convolutions)
    bias_names = {b.name for b in graph.inputs if b is not None and b.position in (2, 4)}
    readers = [n for n in graph.nodes if isinstance(n, Pointwise) and bias_names & set(node_reads(n, graph.buffers))]
    assert len(readers) == 2, readers
    (out,) = evaluate_graph(graph, list(inputs))
    torch.testing.assert_close(out, squeeze_excite(*inputs), atol=1e-5, rtol=1e-5)


def test_half_precision_rounds_as_eager_does():
    inputs = _inputs(torch.float16)
    graph = lower(make_fx(squeeze_excite, tracing_mode="fake")(*inputs), "cuda", "contiguous")
    (out,) = evaluate_graph(graph, list(inputs))
    expected = squeeze_excite(*[t.double() for t in inputs])
    assert (out.double() - expected).abs().max() <= (squeeze_excite(*inputs).double() - expected).abs().max() + 2e-3


def test_cpu_convolutions_keep_their_bias():
    inputs = _inputs()
    graph = lower(make_fx(squeeze_excite, tracing_mode="fake")(*inputs), "cpu")
    assert all(c.args[2] is not None for c in _convolutions(graph))
