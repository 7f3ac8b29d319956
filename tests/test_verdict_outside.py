"""The verdict out of the model's reach (issue 33; Note [Judged outside the job] in engine/tools/judged.py): a
model compiled wrong by construction (+1000 when traced) that patches the verifier, torch.allclose/equal or the
record writer, and exits 0 at exit, gets an honest verdict from `explore --sandbox`; an honest model still
passes there."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from engine import verdict
from engine.tools import judged
from engine.options import Options

ROOT = Path(__file__).resolve().parents[1]

WRONG_WHEN_COMPILED = """
import atexit, json, os
import torch
import engine.run, engine.verdict

def _ok(*args, **kwargs):
    return {"ok": True, "verdict": "ok", "max_abs_err": 0.0, "max_rel_err": 0.0, "outputs": [],
            "judged_by": "eager", "close_to_eager": True, "shape": [], "dtype": "float32", "atol": 0, "rtol": 0}

PATCH

class Model(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_compiling():
            return x * 2 + 1000  # wrong by construction, in the compiled program only
        return x * 2

model = Model()
example_inputs = (torch.randn(4, 4),)
"""

PATCHES = {
    "verifier": "engine.run.compare_tensor = engine.verdict.compare_tensor = engine.verdict.judge = _ok",
    "allclose": "torch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True",
    "record writer": ("_dumps = json.dumps\njson.dumps = lambda *a, **k: _dumps(*a, **k).replace("
                      "'\"ok\": false', '\"ok\": true').replace('\"mismatch\"', '\"ok\"')"),
    "all at once, exit 0": ("engine.run.verify = lambda *a, **k: _ok()\ntorch.allclose = lambda *a, **k: True\n"
                            "_dumps = json.dumps\njson.dumps = lambda *a, **k: _dumps(*a, **k).replace("
                            "'\"ok\": false', '\"ok\": true')\natexit.register(lambda: os._exit(0))"),
}


def _explore_sandboxed(path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    finished = subprocess.run([sys.executable, "-m", "engine", "explore", str(path), "--sandbox", "--json"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
    return finished, json.loads(finished.stdout) if finished.stdout.strip() else {}


@pytest.mark.slow
@pytest.mark.parametrize("patch", list(PATCHES))
def test_a_model_that_forges_its_verdict_gets_an_honest_one_sandboxed(tmp_path, patch):
    path = tmp_path / "forger.py"
    path.write_text(WRONG_WHEN_COMPILED.replace("PATCH", PATCHES[patch]))
    finished, record = _explore_sandboxed(path)
    verify = record.get("verify") or {}
    assert finished.returncode == 1, (finished.returncode, finished.stderr[-2000:])
    assert verify.get("ok") is False and verify.get("verdict") == "mismatch", verify
    assert verify.get("judged_in") == judged.OUTSIDE
    assert "differs from eager" in finished.stderr
    if patch != "all at once, exit 0":  # (that one also replaced run.verify: no evidence, which is no pass)
        assert verify["max_abs_err"] == pytest.approx(1000.0), verify


@pytest.mark.slow
def test_an_honest_model_passes_sandboxed_judged_outside(tmp_path):
    path = tmp_path / "honest.py"
    path.write_text(textwrap.dedent("""
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
        example_inputs = (torch.randn(4, 8),)
    """))
    finished, record = _explore_sandboxed(path)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert record["verify"]["ok"] is True and record["verify"]["judged_in"] == judged.OUTSIDE
    assert record["verify"]["outputs"][0]["judged_by"] == "eager"


def test_no_evidence_is_no_pass():
    record = {"verify": {"ok": True, "verdict": "ok"}, "runs": [{"verify": {"ok": True}}]}
    judged.apply_verdicts(record, None, "the job wrote no evidence")
    assert record["verify"]["ok"] is False and record["runs"][0]["verify"]["ok"] is False
    assert "no evidence" in record["verify"]["problem"]
    assert judged.verdict_code(record)[0] == 1


def test_evidence_is_loaded_as_data_only(tmp_path):
    path = tmp_path / "evidence.pt"

    class Payload:
        def __reduce__(self):
            return (print, ("code ran",))

    torch.save([Payload()], path)
    with pytest.raises(Exception):
        verdict.load_evidence(path)  # weights_only: no object of the model's making is rebuilt
    torch.save({"not": "a list"}, path)
    with pytest.raises(ValueError):
        verdict.load_evidence(path)


@pytest.mark.slow
def test_a_training_step_that_forges_its_verdict_gets_an_honest_one_sandboxed(tmp_path):
    # Note [Training verdict from data]: the step's tensors are judged outside the job too
    path = tmp_path / "trainer.py"
    path.write_text(WRONG_WHEN_COMPILED.replace("PATCH", "import engine.train_verdict\n"
                                                "engine.train_verdict.judge = lambda *a, **k: _ok()\n"
                                                "engine.verdict.compare_tensor = _ok"))
    finished = subprocess.run([sys.executable, "-m", "engine", "explore", str(path), "--sandbox", "--train",
                               "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    verify = json.loads(finished.stdout)["verify"] if finished.stdout.strip() else {}
    assert finished.returncode == 1, (finished.returncode, finished.stderr[-2000:])
    assert verify.get("verdict") == "mismatch" and verify.get("judged_in") == judged.OUTSIDE, verify
    assert verify["loss"]["ok"] is False and all(g["ok"] for g in verify["gradients"]), verify


@pytest.mark.slow
def test_inductors_check_is_judged_outside_the_job_too(tmp_path):
    # the is_compiling() branch makes Inductor's program wrong as well: its column must say so, whatever the
    # job's patched verifier says, from explore --sandbox --inductor and from the app's Inductor job
    source = WRONG_WHEN_COMPILED.replace("PATCH", PATCHES["verifier"])
    path = tmp_path / "forger.py"
    path.write_text(source)
    finished = subprocess.run([sys.executable, "-m", "engine", "explore", str(path), "--sandbox", "--inductor",
                               "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    inductor = (json.loads(finished.stdout) if finished.stdout.strip() else {}).get("inductor") or {}
    assert inductor.get("verify", {}).get("verdict") == "mismatch", (inductor, finished.stderr[-2000:])
    assert inductor["verify"]["judged_in"] == judged.OUTSIDE
    assert inductor["verify"]["max_abs_err"] == pytest.approx(1000.0)

    from app import worker
    outcome = worker.inductor(source, "forger", Options())
    assert outcome.document["verify"]["verdict"] == "mismatch", outcome.document.get("verify")
    assert outcome.document["verify"]["judged_in"] == judged.OUTSIDE


STEERS_ITS_FLOAT64_RUN = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_compiling() or x.dtype == torch.float64:
            return x * 2 + 1  # 1.0 off when compiled, and in a float64 run of the model
        return x * 2

model = Model()
example_inputs = (torch.randn(64, 64),)
"""


@pytest.mark.slow
@pytest.mark.parametrize("forger", ["verifier", "allclose", "record writer", "steers its float64 run"])
def test_a_shared_link_of_a_forger_says_the_same(tmp_path, monkeypatch, forger):
    # Note [Shareable URL]: a link carries the code's hash and the view, never a verdict; opening it explores
    # the code again in the app's worker, whose verdict is judged outside the job
    from app import share, worker

    monkeypatch.setenv("GLASSBOX_SHARE_DIR", str(tmp_path / "shared"))
    source = (STEERS_ITS_FLOAT64_RUN if forger == "steers its float64 run"
              else WRONG_WHEN_COMPILED.replace("PATCH", PATCHES[forger]))
    link = share.url_from_session({"sample": "", "backend": "cpp"}, code=share.store_code(source))
    forged = {**link, "verdict": "ok", "verify": json.dumps({"ok": True})}  # what a forged link would add
    opened = share.session_from_url(forged, [], [])
    assert opened["code"] == source and not {"verdict", "verify"} & set(opened)
    outcome = worker.explore(opened["code"], "shared", Options())
    verify = outcome.record.verify
    assert verify.ok is False and verify.verdict == "mismatch" and verify.judged_in == judged.OUTSIDE, verify
    assert verify.max_abs_err >= 0.99  # the wrong output is seen as wrong: +1000, or 1.0 off
    assert outcome.problem is not None
