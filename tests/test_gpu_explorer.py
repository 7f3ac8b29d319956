"""The explorer's answers on the GPU (issue 31): heat from profiled Triton kernels lands on the graph and the
user's lines under the device's roofs, and the numerics bisect names a planted wrong Triton kernel."""
import math

import pytest
import torch

import engine
from engine.tools.model_file import load_model_file
from planted_kernel import plant_wrong_kernel
from samples import sample_path
from visualizers import heat

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _explore_on_gpu(sample: str, **options):
    spec = load_model_file(str(sample_path(sample)))
    model = spec.model.cuda() if isinstance(spec.model, torch.nn.Module) else spec.model
    inputs = tuple(x.cuda() if isinstance(x, torch.Tensor) else x for x in spec.example_inputs)
    record = engine.explore(model, inputs, name=spec.name, backend="triton", device="cuda",
                            source={"filename": spec.filename, "text": spec.source}, **options)
    return spec, record


def test_heat_of_triton_kernels_lands_on_the_graph_and_the_lines():
    spec, record = _explore_on_gpu("transformer_block", profile=True)
    assert record.verify.ok
    peaks = record.machine.peaks
    assert peaks.gbps > 0 and peaks.tensor_gflops and peaks.part  # the GPU's datasheet roofs
    graph = record.graphs[0]
    timed = [k for k in graph.kernels if k.time_ms]
    assert timed and all(k.roofline.bound in ("memory", "compute") for k in timed if k.kind != "fallback")
    assert all(k.roofline.pct > 0 for k in timed if k.kind in ("pointwise", "reduction"))
    nodes = heat.node_heat(graph)
    assert nodes and all(h["ms"] > 0 for h in nodes.values())
    lines = heat.line_heat(record)
    on_lines = sum(k.time_ms for k in graph.kernels if heat.kernel_lines(graph, k, spec.filename))
    assert lines and math.isclose(sum(e["ms"] for e in lines.values()), on_lines, rel_tol=1e-9)


def test_the_bisect_names_a_planted_wrong_triton_kernel(monkeypatch):
    _, clean = _explore_on_gpu("transformer_block")
    generated = [k.name for k in clean.graphs[0].kernels if k.kind in ("pointwise", "reduction")]
    torch._dynamo.reset()
    plant_wrong_kernel(generated[0], monkeypatch.setattr)
    _, record = _explore_on_gpu("transformer_block")
    assert not record.verify.ok
    bisect = record.graphs[0].bisect
    assert bisect.status == "diverges" and bisect.culprit.kernel == generated[0], (generated, bisect.to_json())
    assert bisect.culprit.user_line and bisect.culprit.user_line.lineno > 0
    assert "diverging" in set(bisect.nodes.values())
