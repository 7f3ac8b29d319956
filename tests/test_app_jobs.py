"""The app's bench and Inductor jobs report failures as data: the CLI's `bench --record-out` and
app/inductor_worker.py write the record's ErrorRecord (kind, message, the user's line), and app/worker.py turns
that into the Problem the page shows, without reading the worker's stderr."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import worker
from engine.record import ErrorRecord

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app" / "streamlit_app.py")

# Explores fine (a handful of calls) and fails in the bench's timing loop, at line 10: the model's own error.
TIRED_CODE = textwrap.dedent('''\
    import torch

    calls = [0]


    @torch._dynamo.disable
    def count():
        calls[0] += 1
        if calls[0] > 40:
            raise RuntimeError("this model stops working after 40 calls")


    def model(x):
        count()
        return torch.relu(x) + 1


    example_inputs = (torch.randn(8),)
''')
RAISE_LINE = 10


@pytest.mark.slow
def test_bench_record_out_carries_the_error_as_data(tmp_path):
    path, out = tmp_path / "tired.py", tmp_path / "bench.json"
    path.write_text(TIRED_CODE)
    result = subprocess.run([sys.executable, "-m", "engine", "bench", str(path), "--json", "--record-out", str(out),
                             "--no-inductor", "--min-time", "0.05"], cwd=ROOT, capture_output=True, text=True,
                            timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stderr[-2000:]
    document = json.loads(out.read_text())
    (error,) = [ErrorRecord.from_json(e) for e in document["errors"]]
    assert error.kind == "model" and error.lineno == RAISE_LINE and "40 calls" in error.message
    assert document["cases"] == []


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_a_failing_bench_job_shows_its_structured_error_in_the_app(monkeypatch):
    messages = []
    real_failed_with = worker.failed_with

    def spy(errors, finished):  # which error the Problem came from: the document's, not the stderr
        found = real_failed_with(errors, finished)
        messages.append(found.message if found else None)
        return found

    monkeypatch.setattr(worker, "failed_with", spy)
    at = AppTest.from_file(APP, default_timeout=420)
    at.run()
    at.switch_page("views/model.py").run()
    at.toggle(key="plain_editor").set_value(True).run()  # AppTest cannot type into the code editor
    at.text_area(key="editor").input(TIRED_CODE)
    at.button(key="explore_button").click().run()
    assert not at.exception, at.exception
    at.switch_page("views/explorer.py").run()
    at.button_group(key="stage_left").set_value("bench").run()
    at.button(key="L_bench").click().run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert any("There is a problem in the model code" in e for e in errors), errors
    assert messages and messages[-1] and "40 calls" in messages[-1]
    page = "\n".join(str(h.proto.body) for h in at.get("html"))
    assert "40 calls" in page and f"line {RAISE_LINE}" in page  # the message, and the user's line highlighted


def test_the_inductor_job_writes_a_structured_error(tmp_path):
    from app import inductor_worker

    path, out = tmp_path / "broken.py", tmp_path / "inductor.json"
    path.write_text("import torch\n\n\ndef model(x):\n    return x.nope()\n\n\nexample_inputs = (torch.randn(4),)\n")
    assert inductor_worker.main([str(path), "--out", str(out)]) == 2
    document = json.loads(out.read_text())
    (error,) = [ErrorRecord.from_json(e) for e in document["errors"]]
    assert document["ok"] is False and error.kind == "model" and error.lineno == 5 and "nope" in error.message


@pytest.mark.slow  # the app's sandboxed worker processes (Note [Two lanes], tests/conftest.py)
def test_the_profile_job_draws_its_typed_record():
    # the profile page reads the profile job's record typed (app/worker.py explore_outcome): charts per kernel,
    # the memory plan per graph, the record to download as JSON
    at = AppTest.from_file(APP, default_timeout=420)
    at.run()
    at.switch_page("views/profile.py").run()
    at.button(key="profile_run").click().run()
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert any("Memory plan, graph 0" in m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) >= 2


@pytest.mark.slow
def test_outputs_that_differ_are_told_from_the_records_verify(tmp_path):
    # the verify is judged outside the job, from the outputs it returned as data (Note [Judged outside the job]);
    # the problem shown is that verify's words, not stderr's
    import torch

    from engine import verdict
    from engine.tools.sandbox import SandboxResult

    record = {"model": "m", "backend": "cpp", "device": "cpu",
              "verify": {"ok": True, "problem": "the job's own words, which nobody believes"}}
    evidence = tmp_path / "evidence.pt"
    verdict.save_evidence([verdict.Evidence([("output", torch.tensor([1.0, 2.0]))], [("output", torch.tensor([1.0, 5.0]))],
                                            again=[("output", torch.tensor([1.0, 2.0]))])], evidence)
    finished = worker.Finished(SandboxResult(returncode=worker.EXIT_OK, stdout="", wall_s=1.0, peak_rss_mb=1.0,
                                             stderr="something the model printed\n\nan unrelated last paragraph"),
                               {"record.json": json.dumps(record), worker.EVIDENCE_NAME: evidence.read_bytes()},
                               completed=True, workdir="/nowhere")
    outcome = worker.explore_outcome(finished, "m.py")
    assert outcome.record is not None and outcome.record.verify.ok is False
    assert outcome.record.verify.judged_in == "a separate process the model never ran in"
    assert outcome.problem.title == "Glassbox's output differs from eager PyTorch"
    assert outcome.problem.message == outcome.record.verify.problem and "max abs err 3" in outcome.problem.message


def test_a_record_that_claims_ok_without_evidence_is_no_pass():
    from engine.tools.sandbox import SandboxResult

    record = {"model": "m", "backend": "cpp", "device": "cpu", "verify": {"ok": True, "verdict": "ok"}}
    finished = worker.Finished(SandboxResult(returncode=worker.EXIT_OK, stdout="", wall_s=1.0, peak_rss_mb=1.0,
                                             stderr=""), {"record.json": json.dumps(record)}, completed=True,
                               workdir="/nowhere")
    outcome = worker.explore_outcome(finished, "m.py")
    assert outcome.problem is not None and outcome.record.verify.ok is False
    assert "could not be judged outside" in outcome.record.verify.problem
