"""Numerics bisect (Note [Numerics bisect] in engine/divergence.py): a kernel planted wrong by a test-only hook is
named as the first culprit, with its user line, while what it feeds is marked as diverging downstream, and the
CLI's words and the offline report name it too; a model that matches shows a clean graph."""
import re

import torch

import engine
from engine.__main__ import cli_bisect_lines
from engine.record import Exploration
from engine.tools.model_file import load_model_file
from planted_kernel import plant_wrong_kernel
from samples import sample_path
from visualizers.html_report import report_html


def explored(sample: str):
    spec = load_model_file(str(sample_path(sample)))
    return engine.explore(spec.model, spec.example_inputs, name=spec.name,
                          source={"filename": spec.filename, "text": spec.source}).to_json()


def test_the_bisect_names_a_planted_wrong_kernel(monkeypatch):
    record_clean = explored("transformer_block")
    generated = [k["name"] for k in record_clean["graphs"][0]["kernels"] if k["kind"] in ("pointwise", "reduction")]
    planted = generated[0]
    torch._dynamo.reset()
    plant_wrong_kernel(planted, monkeypatch.setattr)
    record = explored("transformer_block")
    assert not record["verify"]["ok"]
    bisect = record["graphs"][0]["bisect"]
    assert bisect["status"] == "diverges"
    culprit = bisect["culprit"]
    assert culprit["kernel"] == planted
    assert culprit["input_max_abs_err"] < 1e-3 and culprit["max_abs_err"] >= 0.5
    assert culprit["user_line"] and culprit["user_line"]["lineno"] > 0  # the user's line it came from
    statuses = {k["kernel"]: k for k in bisect["kernels"]}
    downstream = [k for k in bisect["kernels"] if k["status"] == "diverging" and k["kernel"] != planted]
    assert downstream and all(k["input_status"] == "diverging" for k in downstream)  # it grows from there
    assert statuses[planted]["input_status"] != "diverging"
    assert set(bisect["nodes"].values()) >= {"diverging"}
    # ... and both ends say so: the CLI's words and the offline report's bisect section name the culprit
    named = re.compile(rf"\b{re.escape(planted)}\b")
    others = [k["kernel"] for k in bisect["kernels"] if k["kernel"] != planted]
    words = cli_bisect_lines(record)
    assert len(words) == 1 and "diverges" in words[0] and named.search(words[0])
    assert not any(re.search(rf"\b{re.escape(other)}\b", words[0]) for other in others)
    assert str(culprit["user_line"]["lineno"]) in words[0]
    page = report_html(Exploration.from_json(record))
    section = re.search(r"<h3>Numerics bisect, graph 0</h3><p>(.*?)</p>", page, re.S)
    assert section and "diverges" in section.group(1) and named.search(section.group(1))
    assert not any(re.search(rf"\b{re.escape(other)}\b", section.group(1)) for other in others)
    assert str(culprit["user_line"]["lineno"]) in section.group(1)


def test_a_matching_model_shows_a_clean_graph():
    record = explored("transformer_block")
    assert record["verify"]["ok"]
    bisect = record["graphs"][0]["bisect"]
    if record["verify"]["max_abs_err"] == 0:  # exactly eager's: nothing to bisect
        assert bisect == {}
        assert cli_bisect_lines(record) == []
        return
    assert bisect["status"] == "clean" and bisect["culprit"] is None and bisect["compared"] > 0
    words = cli_bisect_lines(record)
    assert len(words) == 1 and "clean" in words[0] and "diverges" not in words[0]
    assert set(bisect["nodes"].values()) <= {"exact", "within tolerance"}
