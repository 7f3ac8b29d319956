"""Numerics bisect (Note [Numerics bisect] in engine/divergence.py): a kernel planted wrong by a test-only hook is
named as the first culprit, with its user line, while what it feeds is marked as diverging downstream; a model
that matches shows a clean graph."""
import torch

import engine
from engine.tools.model_file import load_model_file
from planted_kernel import plant_wrong_kernel
from samples import sample_path


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


def test_a_matching_model_shows_a_clean_graph():
    record = explored("transformer_block")
    assert record["verify"]["ok"]
    bisect = record["graphs"][0]["bisect"]
    if record["verify"]["max_abs_err"] == 0:  # exactly eager's: nothing to bisect
        assert bisect == {}
        return
    assert bisect["status"] == "clean" and bisect["culprit"] is None and bisect["compared"] > 0
    assert set(bisect["nodes"].values()) <= {"exact", "within tolerance"}
