"""Compile cost and the trace (Note [Compile trace] in engine/runtime/spans.py): the trace-event JSON loads, has a span
per stage and the passes inside them, a profiled run's kernels on a timeline, and the build says whether the
cache had its kernels and, when warm, what the cold build cost."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import engine
from engine.record import STAGE_NAMES, Exploration
from engine.tools.model_file import load_model_file
from engine.tools.trace_file import trace_events
from visualizers.compile_cost import compile_cost
from visualizers.html_report import report_html
from samples import sample_path

ROOT = Path(__file__).resolve().parents[1]


def complete_events(document: dict) -> list[dict]:
    events = document["traceEvents"]
    for event in events:  # the trace-event format's required fields
        assert event["ph"] in ("X", "M") and isinstance(event["pid"], int) and isinstance(event["name"], str)
        if event["ph"] == "X":
            assert isinstance(event["ts"], (int, float)) and event["dur"] >= 0 and isinstance(event["tid"], int)
    return [e for e in events if e["ph"] == "X"]


def test_the_trace_has_a_span_per_stage_and_the_run_kernels():
    spec = load_model_file(str(sample_path("layernorm")))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name, profile=True).to_json()
    document = json.loads(json.dumps(trace_events(record)))  # plain JSON, as written to the file
    events = complete_events(document)
    compile_events = [e for e in events if e["pid"] == 1]
    stages = {e["name"].split(" (graph")[0] for e in compile_events if e["cat"] == "stage"}
    assert set(STAGE_NAMES) <= stages
    passes = {e["name"] for e in compile_events if e["cat"] == "pass"}
    assert {"fusion", "memory plan", "kernels", "wrapper", "compile and load kernels"} <= passes
    capture = next(e for e in compile_events if e["name"] == "capture")
    lower = next(e for e in compile_events if e["name"].startswith("lower"))
    assert capture["ts"] <= lower["ts"] and lower["ts"] + lower["dur"] <= capture["ts"] + capture["dur"] + 1
    run_kernels = [e for e in events if e["pid"] == 2 and e["tid"] == 2]
    kernel_names = {k["name"] for g in record["graphs"] for k in g["kernels"]}
    assert run_kernels and {e["name"] for e in run_kernels} <= kernel_names
    call = next(e for e in events if e["pid"] == 2 and e["tid"] == 1)
    assert all(call["ts"] <= e["ts"] and e["ts"] + e["dur"] <= call["ts"] + call["dur"] + 1 for e in run_kernels)
    cost = compile_cost(Exploration.from_json(record))
    assert cost.builds and cost.builds[0].graph == 0 and cost.passes["fusion"] > 0


@pytest.mark.slow
def test_cold_then_warm_cache_says_what_it_saved(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLASSBOX_CACHE_DIR": str(tmp_path / "cache")}
    builds = []
    for run in ("cold", "warm"):
        out = tmp_path / f"{run}.json"
        result = subprocess.run([sys.executable, "-m", "engine", "explore", "softmax", "--trace", str(out), "--json"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        assert "Compile cost" in result.stderr
        complete_events(json.loads(out.read_text()))
        builds.append(compile_cost(Exploration.from_json(json.loads(result.stdout))).builds[0])
    cold, warm = builds
    assert cold.cache_hit is False and warm.cache_hit is True
    assert abs(warm.cold_s - cold.cold_s) < 1e-5 and warm.saved_s >= 0 and warm.seconds < cold.seconds


def test_compile_outside_explore_records_nothing_and_runs():
    compiled = engine.compile(lambda x: torch.relu(x) * 2)
    x = torch.randn(8)
    assert torch.equal(compiled(x), torch.relu(x) * 2)


def test_rewrite_passes_and_a_kernels_autotuning_are_spans_of_their_own():
    spec = load_model_file(str(sample_path("mlp")))
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name, mode="max-autotune",
                            templates="on").to_json()
    cost = compile_cost(Exploration.from_json(record))
    assert any(name.startswith("rewrite ") for name in cost.passes)  # each named rewrite pass, timed
    templates = {k["name"] for g in record["graphs"] for k in g["kernels"] if k["kind"] == "template"}
    tuned = [k for k in cost.kernels if k.what == "autotune"]
    assert templates and sorted(k.kernel for k in tuned) == sorted(templates)  # once each, named
    assert all(k.seconds > 0 for k in tuned)
    spans = [e for e in record["trace"] if e["name"] == "autotune"]
    capture = next(e for e in record["trace"] if e["name"] == "capture")  # the model's first call tuned it
    assert capture["start_s"] <= spans[0]["start_s"] <= capture["start_s"] + capture["dur_s"]
    page = report_html(Exploration.from_json(record))  # the offline report's cost table names them
    assert "Compile cost per stage" in page and f"{sorted(templates)[0]}: autotune" in page
