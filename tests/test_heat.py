"""Metrics where the code is (Note [Time on lines] in visualizers/heat.py): a profiled sample's kernel times
appear as heat on its graph's nodes and on its source lines, and the lines' figures sum to the kernels'."""
import math

import pytest
import torch

import engine
from engine.record import KernelRecord
from engine.tools.model_file import load_model_file
from samples import sample_path
from visualizers import heat, overlay
from visualizers.html_report import report_html


def test_heat_appears_on_a_profiled_samples_graph_and_source():
    spec = load_model_file(str(sample_path("gelu_chain")))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name, profile=True,
                            source={"filename": spec.filename, "text": spec.source})
    graph = record.graphs[0]
    nodes = heat.node_heat(graph)
    kernel = graph.kernels[0]
    assert set(kernel.aten_origins) <= set(nodes) and all(h["ms"] > 0 for h in nodes.values())
    paint, notes = heat.graph_paint(graph)
    dot = overlay.overlay_dot(graph, "aten", paint, notes)
    assert heat.heat_colour(1.0) in dot and "ms" in dot  # the hottest kernel's nodes, with their time
    lines = heat.line_heat(record)
    assert lines, "the kernel's time lands on the user's lines"
    timed = sum(k.time_ms for k in graph.kernels if heat.kernel_lines(graph, k, spec.filename))
    assert math.isclose(sum(e["ms"] for e in lines.values()), timed, rel_tol=1e-9)
    page = heat.source_heat_html(spec.source, lines)
    hot = max(lines, key=lambda n: lines[n]["ms"])
    assert f"data-line='{hot}'" in page and heat.heat_colour(1.0) in page
    assert spec.source.splitlines()[hot - 1].strip().split()[0] in page
    report = report_html(record)  # the offline report has the same heat, graph and source
    assert "Where the time goes" in report and f"data-line='{hot}'" in report


def test_an_unprofiled_record_has_no_heat():
    spec = load_model_file(str(sample_path("softmax")))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name)
    assert heat.node_heat(record.graphs[0]) == {} and heat.line_heat(record) == {}


def test_heat_carries_rates_and_roof_on_kernels_and_lines():
    spec = load_model_file(str(sample_path("scale_bias_relu")))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name, profile=True,
                            source={"filename": spec.filename, "text": spec.source})
    peaks = record.machine.peaks
    assert peaks.gbps > 0 and peaks.source.startswith("measured")  # a CPU: the measured roofs
    graph = record.graphs[0]
    (kernel,) = graph.kernels
    roof = kernel.roofline
    # 3 FLOPs per 8 bytes (a float read and written): memory-bound on any machine's measured roofs
    assert roof.bound == "memory"
    attainable = peaks.gbps * kernel.flops / kernel.bytes
    assert math.isclose(roof.pct, 100 * kernel.gflops / attainable, rel_tol=1e-9)
    clusters = heat.graph_clusters(graph)
    label, fill, nodes = clusters[kernel.name]
    assert "GB/s" in label and "% of roof" in label and set(nodes) == set(kernel.aten_origins)
    dot = overlay.overlay_dot(graph, "aten", *heat.graph_paint(graph), clusters=clusters)
    assert "cluster_k0" in dot and all(n in dot.split("cluster_k0", 1)[1] for n in nodes)  # drawn inside its box
    (line,) = heat.line_heat(record).values()  # one line computes the kernel: all of its figures
    assert math.isclose(line["gbps"], kernel.gbps) and math.isclose(line["pct"], roof.pct)
    assert "% roof" in heat.source_heat_html(spec.source, heat.line_heat(record))
    assert "of roof" in report_html(record)


def test_datasheet_roofs_by_device_name_and_the_roof_a_kernel_is_under():
    from engine.runtime import peaks

    h100 = peaks.device_peaks("NVIDIA H100 80GB HBM3", {}, cuda=True)
    assert h100.gbps == 3350 and h100.source.startswith("datasheet")
    assert peaks.device_peaks("NVIDIA H100 PCIe", {}, True).gbps == 2000
    assert peaks.device_peaks("NVIDIA H200", {}, True).gbps == 4800
    unknown = peaks.device_peaks("Some Future GPU", {"copy_gbps": 100.0, "matmul_gflops": 1000.0}, True)
    assert unknown.gbps == 100.0 and unknown.source.startswith("measured")
    # a bf16 GEMM of intensity 100 FLOP/byte on the H100: the memory roof is 335 TFLOP/s, under the tensor peak
    gemm = KernelRecord(name="gemm", kind="template", time_ms=1.0, bytes=10 ** 9, flops=10 ** 11)
    placed = peaks.kernel_roof(gemm, h100, "bfloat16")
    assert placed.bound == "memory" and math.isclose(placed.pct, 100 * 100e3 / (3350 * 100))
    # in fp32 the same GEMM is held by the fp32 units' 66.9 TFLOP/s: compute-bound
    assert peaks.kernel_roof(gemm, h100, "float32").bound == "compute"
    # a library call with no FLOP estimate: against the bandwidth roof alone
    copy = peaks.kernel_roof(KernelRecord(name="mm", kind="extern", time_ms=1.0, bytes=3350 * 10 ** 6), h100,
                             None)
    assert math.isclose(copy.pct, 100.0) and copy.bound == "memory"


@pytest.mark.slow
def test_a_library_models_heat_lands_on_its_modeling_file(tmp_path):
    pytest.importorskip("transformers")
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    net = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)).eval()
    record = engine.explore(lambda ids: net(input_ids=ids).logits, (torch.randint(0, 64, (1, 4)),), name="gpt2",
                            profile=True, source={"filename": __file__, "text": ""})
    files = heat.library_heat(record)
    modeling = [f for f in files if f.endswith("modeling_gpt2.py")]
    assert modeling and all("/torch/" not in f for f in files)  # torch's own modules are no one's lines
    line, entry = files[modeling[0]][0]
    assert entry["ms"] > 0 and entry["text"]  # the modeling file's line, with its code
    timed = sum(k.time_ms for g in record.graphs for k in g.kernels
                if k.time_ms is not None and heat.kernel_places(g, k))
    assert math.isclose(sum(e["ms"] for e in heat.place_heat(record).values()), timed, rel_tol=1e-9)
    page = heat.library_heat_html(record)
    assert "transformers/models/gpt2/modeling_gpt2.py" in page and f"data-line='{line}'" in page
