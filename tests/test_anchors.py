"""Explanations anchored to generated lines (visualizers/anchors.py): each kernel's sentence names the lines of
the module that hold it, and a generated line traces back to its IR node and the user's line."""
import engine
from engine.tools.model_file import load_model_file
from samples import sample_path
from visualizers import anchors


def test_sentences_point_at_their_kernels_lines_and_lines_at_their_origin():
    spec = load_model_file(str(sample_path("gelu_chain")))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name,
                            source={"filename": spec.filename, "text": spec.source})
    graph = record.graphs[0]
    sentences = anchors.kernel_sentences(graph)
    assert sentences
    module = graph.code.source.splitlines()
    for sentence in sentences:
        first, last = sentence["lines"]
        assert sentence["kernel"] in module[first - 1]  # the sentence's first line is its kernel's signature
        assert f"lines {first}" in sentence["text"]
    traced = [p.line for p in graph.code.provenance if p.user_lines]
    origin = anchors.line_origin(graph, traced[0])
    assert origin["ir_node"] and origin["user_text"]
    user_line = int(next(iter(origin["user_text"])))
    assert spec.source.splitlines()[user_line - 1].strip() == origin["user_text"][str(user_line)]
    assert anchors.line_origin(graph, 1) is None  # the prelude comes from no node
