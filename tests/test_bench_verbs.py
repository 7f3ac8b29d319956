"""The benches as verbs, end to end on the CPU (Note [Tool verbs] in engine/tools/verbs.py): with --json,
stdout is one JSON document and nothing else, and it says what the table says."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # whole benches in subprocesses (Note [Two lanes], tests/conftest.py)


def bench(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLASSBOX_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("OUT", None)
    return subprocess.run([sys.executable, "-m", "engine", "bench", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_bench_train_json_is_the_reports_on_stdout(tmp_path):
    result = bench("train", "--device", "cpu", "--small", "--cases", "transformer", "--no-inductor",
                   "--min-time", "0.05", "--threads", "1", "--json", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = json.loads(result.stdout)
    assert "transformer_block" in report["name"] and report["glassbox_ms"] > 0
    assert all(check["ok"] for check in report["verify"].values()), report["verify"]
    assert "our partition" in result.stderr  # the table went to stderr


def test_bench_train_has_a_decoder_from_its_library_that_trains_like_eager(tmp_path):
    """Issue 27's Qwen2 step (transformers' own code, tiny in float32 here): built, stepped, judged."""
    result = bench("train", "--device", "cpu", "--small", "--cases", "qwen2", "--no-inductor", "--min-time",
                   "0.05", "--threads", "1", "--json", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = json.loads(result.stdout)
    assert report["name"].startswith("qwen2 (Hugging Face") and report["glassbox_ms"] > 0
    assert all(check["ok"] for check in report["verify"].values()), report["verify"]


def test_bench_gpu_dry_run_json_is_the_document_on_stdout(tmp_path):
    result = bench("gpu", "--dry-run", "--skip-tests", "--only", "softmax", "--no-inductor", "--json",
                   tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert {"environment", "bench"} <= set(document) and "tests" not in document
    (case,) = document["bench"]
    assert case["name"] == "softmax" and case["glassbox_ok"] is True and not case.get("fallbacks"), case
