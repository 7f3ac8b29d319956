"""`python -m engine bench MODEL --templates on,off`: one row per templates choice, side by side in one run,
with Inductor timed once per model and mode and shared by the rows."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.tools import cli_format
from engine.tools.bench import share_inductor

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_templates_on_and_off_side_by_side():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "engine", "bench", "swiglu_mlp", "--templates", "on,off", "--json",
                             "--no-inductor", "--min-time", "0.05", "--threads", "1"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    cases = json.loads(result.stdout)["cases"]
    assert [c["templates"] for c in cases] == ["on", "off"]
    assert all(c["glassbox_ms"] and c["verify"]["glassbox"]["ok"] for c in cases), cases
    table = cli_format.bench_table(cases)
    assert "(templates on)" in table and "(templates off)" in table


def test_rows_share_one_inductor_measurement():
    measured = {"inductor_ms": 2.0, "inductor_iqr_ms": 0.1, "inductor_compile_s": 9.0,
                "verify": {"glassbox": {"ok": True}, "inductor": {"ok": True}}}
    report = {"glassbox_ms": 1.0, "inductor_ms": None, "verify": {"glassbox": {"ok": True}}}
    share_inductor(report, measured)
    assert report["inductor_ms"] == 2.0 and report["ratio_vs_inductor"] == 0.5
    assert report["verify"]["inductor"] == {"ok": True}
