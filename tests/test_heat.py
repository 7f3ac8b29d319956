"""Metrics where the code is (Note [Time on lines] in visualizers/heat.py): a profiled sample's kernel times
appear as heat on its graph's nodes and on its source lines, and the lines' figures sum to the kernels'."""
import math

import engine
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
