"""The typed record: strict serialization, the JSON Schema shipped with the project, round trips, and the
pipeline's fallback to eager when our own compile of a graph fails (Note [Internal failure falls back to eager])."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest
import sympy
import torch

import engine
from engine import pipeline
from engine.record import (SCHEMA_VERSION, STAGE_NAMES, Exploration, GraphRecord, KernelRecord, json_schema,
                           to_plain)

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "engine" / "record_schema.json"


def _softmax(x):
    return torch.softmax(x * 2, dim=-1)


def _explore(model=_softmax, inputs=None, **kwargs) -> Exploration:
    return engine.explore(model, inputs or (torch.randn(8, 32),), **kwargs)


def test_shipped_schema_is_the_generated_one():
    # regenerate with: python -m engine.record > engine/record_schema.json
    assert json.loads(SCHEMA_FILE.read_text()) == json_schema()


def test_explore_record_validates_and_round_trips():
    exploration = _explore(name="softmax")
    document = json.loads(exploration.dumps())
    jsonschema.validate(document, json.loads(SCHEMA_FILE.read_text()))
    assert document["schema_version"] == SCHEMA_VERSION
    assert list(document["timings"]) == [s for s in STAGE_NAMES if s in document["timings"]]
    back = Exploration.from_json(document)
    assert back == exploration
    assert back.to_json() == document
    graph = back.graphs[0]
    assert isinstance(graph, GraphRecord) and isinstance(graph.kernels[0], KernelRecord)
    # the kernel's line range and the prelude are facts of the record, not parsed from the text
    (kernel,) = [k for k in graph.kernels if k.kind == "reduction"]
    first, last = kernel.lines
    module = graph.code.source.splitlines()
    assert graph.code.prelude_lines < first <= last <= len(module)
    assert kernel.name in "\n".join(module[first - 1:last])


def test_every_stage_is_timed_by_the_runner():
    exploration = _explore()
    assert set(exploration.timings) == set(STAGE_NAMES)
    assert all(seconds >= 0 for seconds in exploration.timings.values())
    assert set(exploration.graphs[0].timings) == set(pipeline.GRAPH_STAGES) | {"decompose"}


def test_unknown_types_and_keys_are_errors():
    with pytest.raises(TypeError, match="sympy"):
        to_plain({"size": sympy.Symbol("s0")})
    with pytest.raises(TypeError, match="torch"):
        to_plain([torch.float32])
    with pytest.raises(TypeError, match="key"):
        to_plain({1: "a"})
    record = Exploration(model="m", backend="cpp", device="cpu")
    record.graphs.append(GraphRecord(index=0, timings={"lower": sympy.Integer(1)}))
    with pytest.raises(TypeError, match="GraphRecord.timings"):
        record.to_json()
    document = Exploration(model="m", backend="cpp", device="cpu").to_json()
    with pytest.raises(ValueError, match="unknown key"):
        Exploration.from_json({**document, "surprise": 1})
    with pytest.raises(TypeError, match="expected int"):
        Exploration.from_json({**document, "schema_version": "2"})
    with pytest.raises(ValueError, match="newer"):
        Exploration.from_json({**document, "schema_version": SCHEMA_VERSION + 1})
    assert to_plain(float("inf")) == "inf"  # JSON has no infinity (an error against a mismatched shape)


def _replace_stage(monkeypatch, name: str, fn) -> None:
    stages = list(pipeline.STAGES)
    where = [s.name for s in stages].index(name)
    stages[where] = dataclasses.replace(stages[where], fn=fn)
    monkeypatch.setattr(pipeline, "STAGES", stages)


@pytest.mark.parametrize("stage", pipeline.GRAPH_STAGES)
def test_an_internal_failure_falls_back_to_eager_and_says_why(monkeypatch, stage):
    def broken(artifact, options):
        raise RuntimeError(f"injected failure in {stage}")

    _replace_stage(monkeypatch, stage, broken)
    x = torch.randn(8, 32)
    exploration = _explore(inputs=(x,))
    assert exploration.verify.ok, exploration.verify
    (error,) = exploration.errors
    assert (error.kind, error.stage, error.type, error.graph) == ("fallback", stage, "RuntimeError", 0)
    assert f"injected failure in {stage}" in error.message and "Traceback" in error.traceback
    graph = exploration.graphs[0]
    assert graph.fallback is not None and graph.fallback.stage == stage and graph.aten
    jsonschema.validate(exploration.to_json(), json.loads(SCHEMA_FILE.read_text()))
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match=f"injected failure in {stage}"):
        compiled = engine.compile(_softmax)
        torch.testing.assert_close(compiled(x), _softmax(x))


def test_a_failing_first_run_falls_back_to_eager(monkeypatch):
    real_build = pipeline.stage_named("build").fn

    def build_a_broken_call(generated, options):
        compiled = real_build(generated, options)

        def call(args):
            args.clear()  # as our wrapper does, before anything can fail
            raise ValueError("injected failure at the first run")

        compiled.call = call
        return compiled

    _replace_stage(monkeypatch, "build", build_a_broken_call)
    exploration = _explore()
    assert exploration.verify.ok
    (error,) = exploration.errors
    assert (error.kind, error.stage, error.type) == ("fallback", "run", "ValueError")
    assert exploration.graphs[0].fallback.stage == "run" and exploration.graphs[0].kernels
