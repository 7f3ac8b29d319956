"""Note [Host tensors of a GPU graph]: CPU tensors that a GPU graph returns stay on the CPU, as in eager."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import engine
from engine.ir.evaluator import evaluate_graph
from engine.lowering.graph import lower


def _span_and_scores(x):
    # DeBERTa's compute_attention_span: a CPU tensor built from a size, returned for Python to slice by;
    # a result copied to the host; a CPU scalar that a GPU kernel reads and that is also returned
    span = torch.tensor(min(x.size(-2), 16))
    scale = torch.tensor(3.0)
    return x.relu() * 2, span, x.sum().cpu(), x * scale, scale


def _lowered_for_cuda(fn, x):
    with FakeTensorMode():
        fake = torch.empty(x.shape, device="cuda")
    return lower(make_fx(fn, tracing_mode="fake")(fake), "cuda")


def test_cpu_outputs_of_a_gpu_graph_are_computed_on_the_host():
    # CPU stand-in: lowered for "cuda" from fake CUDA tensors, the two CPU-only outputs are CPU nodes (no
    # kernel), the scalar a kernel reads is computed on the GPU and copied back, and the GPU results stay there
    x = torch.randn(4, 8)
    lowered = _lowered_for_cuda(_span_and_scores, x)
    devices = [v.node.device for v in lowered.outputs]
    assert devices == ["cuda", "cpu", "cpu", "cuda", "cpu"]
    host = lowered.host_nodes()
    assert len(host) == 3 and all(lowered.buffers[n].kind == "extern" for n in host)
    for got, want in zip(evaluate_graph(lowered, [x]), _span_and_scores(x)):
        torch.testing.assert_close(got, want)


def test_a_cpu_graph_has_no_host_nodes():
    x = torch.randn(4, 8)
    lowered = lower(make_fx(_span_and_scores, tracing_mode="fake")(x), "cpu")
    assert lowered.host_nodes() == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_outputs_are_on_eagers_devices(mode):
    x = torch.randn(4, 32, device="cuda")
    compiled = engine.compile(_span_and_scores, backend="triton", device="cuda", mode=mode)
    for _ in range(3):  # reduce-overhead records on a later call
        got = compiled(x)
    want = _span_and_scores(x)
    assert [t.device for t in got] == [t.device for t in want]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def _span_only(x):
    # host work from sizes and constants alone: the same value at every call of these sizes
    span = torch.tensor(min(x.size(-2), 16))
    return x.relu() * 2, span * 2


def test_host_work_from_sizes_and_constants_does_not_read_the_inputs():
    # Note [Host work under CUDA graphs]: only such a graph is replayed; a `.cpu()` of a result reads the GPU
    x = torch.randn(4, 8)
    assert not _lowered_for_cuda(_span_only, x).host_reads_inputs
    assert _lowered_for_cuda(_span_and_scores, x).host_reads_inputs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_constant_host_work_is_replayed_and_handed_out_as_copies():
    from engine.runtime import cuda_graphs
    before = {id(r) for r in cuda_graphs._recorders}
    compiled = engine.compile(_span_only, backend="triton", device="cuda", mode="reduce-overhead")
    x = torch.randn(4, 32, device="cuda")
    for _ in range(4):
        got = compiled(x)
    recorders = [r for r in cuda_graphs._recorders if id(r) not in before]
    entries = [e for r in recorders for e in r.graphs.values()]
    assert entries and all(e.host == [1] for e in entries)  # recorded, its host output among the outputs
    got[1].add_(100)  # a caller that writes into its copy changes no later call
    for _ in range(2):
        again = compiled(x)
        assert again[1].device.type == "cpu" and int(again[1]) == 8
        torch.testing.assert_close(again[0], x.relu() * 2)
