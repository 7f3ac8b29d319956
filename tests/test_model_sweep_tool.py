"""The model sweep (engine/tools/sweep_models.py): its catalogue, its table's verdicts, and one real model run
end to end through the tool as a user runs it (Note [Sweep method])."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.tools import sweep_models
from engine.tools.model_catalog import catalog

ROOT = Path(__file__).resolve().parents[1]


def test_catalogue_is_held_out_and_broad():
    from engine.tools.zoo import zoo_cases

    names = [entry.name for entry in catalog()]
    assert len(names) == len(set(names)) >= 40
    assert {entry.library for entry in catalog()} == {"transformers", "torchvision", "timm"}
    zoo = {case.name for case in zoo_cases()}
    assert not zoo & set(names), "the sweep checks us on models we did not tune on"
    assert any(entry.dynamic_inputs for entry in catalog()), "a dynamic-shape row"


def _row(name, **fields):
    return dict({"name": name, "mode": "default", "status": "ok", "graph_fallbacks": [], "eager_ops": [],
                 "ours_ok": True, "times": [{"eager": 2.0, "ours": 1.0, "inductor": 1.0}]}, **fields)


def test_a_fallback_fails_the_sweep_and_is_named():
    fine = _row("fine", ours_over_inductor=1.0, ours_over_eager=0.5)
    fell = _row("fell", status="fell back", graph_fallbacks=["fell back: run stage, RuntimeError: boom"],
                ours_over_inductor=3.0, ours_over_eager=1.5)
    assert not sweep_models.failed([fine])
    assert sweep_models.failed([fine, fell])
    facts = sweep_models.summary([fine, fell])["default"]
    assert facts["whole-graph fallbacks"] == ["fell"]
    assert facts["above 1.15 of inductor"] == ["fell"] and facts["not faster than eager"] == ["fell"]
    table = sweep_models.markdown([fine, fell])
    assert "fell back: run stage, RuntimeError: boom" in table


def test_a_mismatch_or_crash_fails_the_sweep():
    assert sweep_models.failed([_row("wrong", status="mismatch", ours_ok=False)])
    assert sweep_models.failed([{"name": "boom", "status": "crash", "why": "ValueError"}])
    assert not sweep_models.failed([{"name": "lib", "status": "build-error", "why": "timm is not installed"}])


@pytest.mark.slow
def test_sweep_runs_a_real_model_on_the_cpu(tmp_path):
    out_json, out_md = tmp_path / "sweep.json", tmp_path / "sweep.md"
    done = subprocess.run([sys.executable, "-m", "engine.tools.sweep_models", "--device", "cpu", "--only",
                           "hf_distilbert", "--json", str(out_json), "--md", str(out_md), "--timeout", "900"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1000)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out_json.read_text())["rows"]
    assert [r["name"] for r in rows] == ["hf_distilbert"]
    row = rows[0]
    assert row["status"] == "ok" and row["ours_ok"] and row["inductor_ok"]
    assert row["graph_fallbacks"] == [] and row["eager_ops"] == []
    assert all(row["times"][0][k] > 0 for k in ("eager", "ours", "inductor"))
    assert "hf_distilbert" in out_md.read_text()
