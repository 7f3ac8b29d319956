"""Explanations anchored to generated lines (visualizers/anchors.py): each kernel's sentence names the lines of
the module that hold it, and a generated line traces back to its IR node and the user's line."""
import engine
from engine.tools.model_file import load_model_file
from samples import sample_path
from visualizers import anchors, code


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


def test_ir_sentences_point_at_their_nodes_lines_and_lines_at_their_origin():
    spec = load_model_file(str(sample_path("softmax")))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name,
                            source={"filename": spec.filename, "text": spec.source})
    graph = record.graphs[0]
    listing = code.ir_listing(graph)[0].splitlines()
    sentences = anchors.ir_sentences(graph)
    assert {s["node"] for s in sentences} == {n.name for n in graph.ir.nodes}
    for sentence in sentences:
        first, last = sentence["lines"]
        assert listing[first - 1].startswith(sentence["node"])  # the first line is the node's own header
        assert f"lines {first}–{last}" in sentence["text"]
        for buffer_line in [int(p.split("(line ")[1].rstrip(")")) for p in sentence["text"].split("reads ")[-1]
                            .split("; it runs")[0].split(", ") if "(line " in p]:
            assert first < buffer_line <= last and "load " in listing[buffer_line - 1]  # a read, at its line
    reduction = next(s for s in sentences if "reduction: max over 512" in s["text"])
    assert "amax" in reduction["text"] and "your line" in reduction["text"]
    origin = anchors.ir_line_origin(graph, reduction["lines"][0] + 1)
    assert origin["ir_node"] == reduction["node"] and origin["kernel"] == graph.kernels[0].name
    user_line = int(next(iter(origin["user_text"])))
    assert spec.source.splitlines()[user_line - 1].strip() == origin["user_text"][str(user_line)]
    assert anchors.ir_line_origin(graph, 1) is None  # the inputs comment belongs to no node


def test_the_report_links_each_explanation_to_its_lines():
    from visualizers.html_report import report_html

    spec = load_model_file(str(sample_path("softmax")))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name,
                            source={"filename": spec.filename, "text": spec.source})
    page = report_html(record)
    graph = record.graphs[0]
    for sentence in anchors.ir_sentences(graph):
        first = sentence["lines"][0]
        assert f'href="#g0-ir-{first}"' in page and f'id="g0-ir-{first}"' in page  # the link lands on its line
    kernel = anchors.kernel_sentences(graph)[0]
    assert f'href="#g0-code-{kernel["lines"][0]}"' in page and f'id="g0-code-{kernel["lines"][0]}"' in page


def test_a_library_line_is_named_by_its_file_not_as_yours():
    spec = load_model_file(str(sample_path("softmax")))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name,
                            source={"filename": spec.filename, "text": spec.source})
    sentence = anchors.ir_sentences(record.graphs[0], "/elsewhere/model.py")[0]["text"]
    assert "your line" not in sentence and "line 14" in sentence  # the sample's file, by its name
