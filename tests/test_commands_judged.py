"""bench and compare judged outside the job (issue 33, item 6; Note [Bench and compare judged outside the job] in
engine/tools/judged_commands.py): a model compiled wrong by construction that patches the verifier,
torch.allclose, json.dumps and exits 0 at exit gets no passing check from `bench --sandbox`, `compare --sandbox`,
the app's bench or the app's compare; without --sandbox they say on stderr that the check is judged where the
model runs. And "random" is said as random, by explore's exit code and words and by bench's."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.tools import judged
from engine.tools.judged_commands import apply_bench_verdicts, apply_compare_verdicts, document_code
from engine.tools.step_verdict import StepEvidence, judge_step

ROOT = Path(__file__).resolve().parents[1]

# every patch of tests/test_verdict_outside.py at once, but for run.verify itself (so the job still writes its
# evidence, and the honest verdict can say by how much the compiled program is wrong)
FORGER = """
import atexit, json, os
import torch
import engine.run, engine.verdict, engine.tools.step_verdict

def _ok(*args, **kwargs):
    return {"ok": True, "verdict": "ok", "max_abs_err": 0.0, "max_rel_err": 0.0, "outputs": [],
            "judged_by": "eager", "close_to_eager": True, "shape": [], "dtype": "float32", "atol": 0, "rtol": 0}

engine.run.compare_tensor = engine.verdict.compare_tensor = engine.verdict.judge = engine.run.judge = _ok
import engine.tools.train_bench
engine.tools.step_verdict.judge_step = engine.tools.train_bench.judge_step = _ok
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
_dumps = json.dumps
json.dumps = lambda *a, **k: _dumps(*a, **k).replace('"ok": false', '"ok": true').replace('"mismatch"', '"ok"')
atexit.register(lambda: os._exit(0))

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4))

    def forward(self, x):
        if torch.compiler.is_compiling():
            return x * self.weight * 2 + 1000  # wrong by construction, in the compiled program only
        return x * self.weight * 2

model = Model()
example_inputs = (torch.randn(4, 4),)
"""

QUICK_BENCH = ["--no-inductor", "--quick", "--min-time", "0.02", "--threads", "1"]


def _cli(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    finished = subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)
    return finished, json.loads(finished.stdout) if finished.stdout.strip() else {}


def _forger(tmp_path: Path) -> Path:
    path = tmp_path / "forger.py"
    path.write_text(FORGER)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("train", [False, True], ids=["inference", "training step"])
def test_bench_sandboxed_gives_a_forger_no_passing_check(tmp_path, train):
    finished, document = _cli("bench", str(_forger(tmp_path)), "--sandbox", "--json", *QUICK_BENCH,
                              *(["--train"] if train else []))
    assert finished.returncode == 1, (finished.returncode, finished.stderr[-2000:])
    check = document["cases"][0]["verify"]["glassbox"]
    assert check["ok"] is False and check["verdict"] == "mismatch", check
    assert check["judged_in"] == judged.OUTSIDE
    if not train:
        assert check["max_abs_err"] == pytest.approx(1000.0), check
    else:  # the step's loss is off by 16000 (1000 on each of 16 elements); the gradients are right
        assert check["max_abs_err"] == pytest.approx(16000.0), check


@pytest.mark.slow
def test_compare_sandboxed_gives_a_forger_no_passing_check(tmp_path):
    finished, document = _cli("compare", str(_forger(tmp_path)), "--a", "fusion=on", "--b", "fusion=off",
                              "--sandbox", "--json")
    assert finished.returncode == 1, (finished.returncode, finished.stderr[-2000:])
    assert document["verify"] == {"a": False, "b": False}, document["verify"]
    for side in ("a", "b"):
        verify = document[side]["record"]["verify"]
        assert verify["verdict"] == "mismatch" and verify["judged_in"] == judged.OUTSIDE, verify
        assert verify["max_abs_err"] == pytest.approx(1000.0)


@pytest.mark.slow
def test_the_apps_bench_and_compare_give_a_forger_no_passing_check():
    from app import worker
    from engine.options import Options

    outcome = worker.bench(FORGER, "forger", Options(), min_time=0.02, with_inductor=False)
    check = outcome.document["cases"][0]["verify"]["glassbox"]
    assert check["ok"] is False and check["judged_in"] == judged.OUTSIDE, check
    assert outcome.problem is not None
    outcome = worker.compare(FORGER, "forger", ["fusion=on"], ["fusion=off"])
    assert outcome.document["verify"] == {"a": False, "b": False}, outcome.document.get("verify")
    assert outcome.document["a"]["record"]["verify"]["judged_in"] == judged.OUTSIDE


@pytest.mark.slow
def test_an_honest_model_passes_bench_sandboxed(tmp_path):
    path = tmp_path / "honest.py"
    path.write_text("import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())\n"
                    "example_inputs = (torch.randn(4, 8),)\n")
    finished, document = _cli("bench", str(path), "--sandbox", "--json", *QUICK_BENCH)
    assert finished.returncode == 0, finished.stderr[-2000:]
    check = document["cases"][0]["verify"]["glassbox"]
    assert check["ok"] is True and check["judged_in"] == judged.OUTSIDE and check["reference"], check


def test_unsandboxed_bench_and_compare_say_where_the_check_is_judged():
    from engine.__main__ import warn_unsandboxed

    import contextlib
    import io
    for command in ("bench", "compare"):
        said = io.StringIO()
        with contextlib.redirect_stderr(said):
            warn_unsandboxed(command, sandbox_flag=True)
        assert "forge" in said.getvalue() and f"{command} --sandbox" in said.getvalue()


# --- the parent's side, from data ------------------------------------------------------------------------------

def test_a_bench_check_without_evidence_is_no_pass():
    document = {"cases": [{"name": "m", "mode": "default", "verify": {"glassbox": {"ok": True},
                                                                       "inductor": {"ok": True}}}], "errors": []}
    apply_bench_verdicts(document, None, "the job wrote no evidence")
    assert all(check["ok"] is False and "no evidence" in check["problem"]
               for check in document["cases"][0]["verify"].values())
    assert document_code(document) == 1


def test_bench_verdicts_land_on_their_case_and_templates_rows_share_inductors():
    ok = {"ok": True, "verdict": "ok", "max_abs_err": 0.0, "max_rel_err": 0.0, "reference": "eager"}
    wrong = {**ok, "ok": False, "verdict": "mismatch", "max_abs_err": 3.0}
    document = {"cases": [{"name": "m", "mode": "default", "verify": {"glassbox": {"ok": True}, "inductor": {}}},
                          {"name": "m", "mode": "default", "verify": {"glassbox": {"ok": True}, "inductor": {}}}]}
    verdicts = [{**ok, "role": "bench:0:glassbox"}, {**ok, "role": "bench:0:glassbox"},
                {**ok, "role": "bench:0:inductor"}, {**ok, "role": "bench:1:glassbox"},
                {**wrong, "role": "bench:1:glassbox"}]  # row 1's warm compile is wrong: the row is
    apply_bench_verdicts(document, verdicts)
    first, second = (case["verify"] for case in document["cases"])
    assert first["glassbox"]["ok"] and first["inductor"]["ok"] and second["inductor"]["ok"]
    assert second["glassbox"]["ok"] is False and second["glassbox"]["max_abs_err"] == 3.0
    assert all(check["judged_in"] == judged.OUTSIDE for case in (first, second) for check in case.values())
    assert document_code(document) == 1


def test_compare_verdicts_replace_each_sides():
    document = {"a": {"record": {"verify": {"ok": True}, "errors": []}},
                "b": {"record": {"verify": {"ok": True}, "errors": []}}, "verify": {"a": True, "b": True}}
    apply_compare_verdicts(document, [{"ok": True, "verdict": "ok", "role": "a"},
                                      {"ok": False, "verdict": "mismatch", "role": "b"}])
    assert document["verify"] == {"a": True, "b": False}
    assert document_code(document) == 1
    apply_compare_verdicts(document, None, "the job wrote no evidence")
    assert document["verify"] == {"a": False, "b": False}


def test_a_training_steps_check_from_data():
    eager = [("loss", torch.tensor(2.0)), ("gradient[0]", torch.ones(8)), ("gradient[1]", None)]
    assert judge_step(StepEvidence(eager, [("loss", torch.tensor(2.0)), ("gradient[0]", torch.ones(8)),
                                           ("gradient[1]", None)]))["ok"]
    off = judge_step(StepEvidence(eager, [("loss", torch.tensor(2.0)), ("gradient[0]", torch.ones(8) * 1.01),
                                          ("gradient[1]", None)]))
    assert off["ok"] is False and off["max_rel_err"] == pytest.approx(0.01, rel=1e-3)
    missing = judge_step(StepEvidence(eager[:2] + [("gradient[1]", torch.ones(2))], eager))
    assert missing["ok"] is False and "missing" in missing["problem"]
    half = [("loss", torch.tensor(2.0)), ("gradient[0]", torch.ones(8).half())]
    assert judge_step(StepEvidence(half, [("loss", torch.tensor(2.0)), ("gradient[0]", torch.ones(8).half() * 1.01)]))["ok"]


# --- "random" said as random (issue 33, item 2) ---------------------------------------------------------------

@pytest.mark.slow
def test_random_is_said_as_random_by_explores_exit_code_and_words(tmp_path):
    path = tmp_path / "dice.py"
    path.write_text("import torch\ndef model(x):\n    return x + torch.rand(x.shape)\n"
                    "example_inputs = (torch.zeros(64),)\n")
    finished, record = _cli("explore", str(path), "--json")
    assert finished.returncode == 2, finished.stderr[-2000:]
    assert record["verify"]["verdict"] == "random"
    assert "random" in finished.stderr and "differs from eager" not in finished.stderr
    finished = subprocess.run([sys.executable, "-m", "engine", "explore", str(path)], cwd=ROOT, capture_output=True,
                              text=True, timeout=600)
    assert "RANDOM" in finished.stdout and "FAILED" not in finished.stdout


def test_a_random_training_step_is_said_as_random():
    record = {"verify": {"ok": False, "verdict": "random", "problem": "the training step is random: two eager "
                                                                       "steps from the same RNG state disagree"}}
    code, words = judged.verdict_code(record, "dice")
    assert code == 2 and "random" in words[-1] and "differs" not in " ".join(words)


def test_random_is_said_as_random_by_bench():
    from engine.tools import cli_format

    case = {"name": "dice", "eager_ms": 1.0, "glassbox_ms": 1.0,
            "verify": {"glassbox": {"ok": False, "verdict": "random", "max_abs_err": 0.5}}}
    document = {"cases": [case], "errors": []}
    assert document_code(document) == 2
    text = cli_format.bench_table([case])
    assert "random" in text and "differs from eager" not in text


@pytest.mark.slow
def test_report_sandboxed_of_a_forger_says_it_differs(tmp_path):
    out = tmp_path / "report.html"
    finished, _ = _cli("report", str(_forger(tmp_path)), "--sandbox", "--out", str(out))
    assert finished.returncode == 1, finished.stderr[-2000:]
    assert "differs from eager" in finished.stderr and "unsandboxed" not in finished.stderr
    assert out.is_file()
