"""Graph-break fixes applied in place (Note [Applying a rewrite] in engine/tools/apply_fix.py): applying a
hint's concrete rewrite removes the break in the graph_break sample, and the outputs still match eager."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.record import Suggestion
from engine.tools.apply_fix import FixError, apply_fix, concrete
from samples import sample_path

ROOT = Path(__file__).resolve().parents[1]


def fix(path: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "engine", "fix", str(path), "--json", *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
def test_applying_the_hints_removes_the_breaks(tmp_path):
    path = tmp_path / "graph_break.py"
    path.write_text(sample_path("graph_break").read_text())
    result = fix(path)
    assert result["before"]["graph_breaks"] == 2 and result["after"]["graph_breaks"] == 0
    assert result["before"]["compile_s"] > 0 and result["after"]["compile_s"] > 0  # what each compile cost
    assert result["after"]["graphs"] == 1 and result["after"]["matches_eager"]
    assert "torch.where(" in Path(result["file"]).read_text()
    for side in (result["before"], result["after"]):  # the whole call timed against eager (Note [Call time])
        assert side["run_ms"] > 0 and side["eager_ms"] > 0 and side["run_iqr_ms"] >= 0, side
        assert "x" in side["speedup"] and side["run_error"] is None


@pytest.mark.slow
def test_applying_one_hint_removes_that_break(tmp_path):
    path = tmp_path / "graph_break.py"
    path.write_text(sample_path("graph_break").read_text())
    result = fix(path, "--break", "1")
    assert result["applied"] == [1]
    assert result["after"]["graph_breaks"] == result["before"]["graph_breaks"] - 1
    assert result["after"]["matches_eager"]


def test_a_rewrite_with_blanks_or_on_changed_code_is_refused():
    blank = Suggestion(pattern="data-dependent if", why="", before="if x.sum() > 0:",
                       after="result = torch.where(x.sum() > 0, <value if true>, <else>)")
    assert not concrete(blank)
    with pytest.raises(FixError, match="blanks"):
        apply_fix("if x.sum() > 0:\n    pass\n", 1, blank)
    rename = Suggestion(pattern="numpy", why="", before="y = np.exp(x)", after="y = torch.exp(x)")
    assert apply_fix("def f(x):\n    y = np.exp(x)  # note\n", 2, rename) == "def f(x):\n    y = torch.exp(x)\n"
    with pytest.raises(FixError, match="no longer reads"):
        apply_fix("def f(x):\n    y = x\n", 2, rename)


def test_a_call_that_would_recompile_says_so_instead_of_a_time():
    """Note [Call time]: the timing never compiles again (a new graph would change the record)."""
    import torch
    from engine.call_time import measure

    calls = {"n": 0}

    def model(x):
        calls["n"] += 1
        return x * calls["n"]  # a constant that changes each call: Dynamo guards on it

    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager")
    inputs = (torch.randn(8),)
    with torch.no_grad():
        compiled(*inputs)
    timed = measure(model, compiled, inputs)
    assert timed.ms is None and "recompile" in timed.error
    steady = torch.compile(lambda x: x.sin() * 2, backend="eager")
    with torch.no_grad():
        steady(*inputs)
    timed = measure(lambda x: x.sin() * 2, steady, inputs)
    assert timed.ms > 0 and timed.eager_ms > 0 and timed.rounds >= 7 and timed.speedup["ratio"] > 0
