"""The CLI contract (docs/design.md, "The CLI"): what scripts read from `--json`, exit codes, and user-facing errors.

Most tests run `python -m engine` in a subprocess, exactly as a script would; they check structure and exit
codes, not exact wording.
"""
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.tools import cli_format
from engine.tools.bench import bench, load_cases
from engine.tools.model_file import load_model_file
from samples import DEFAULT_SAMPLE, sample_names

ROOT = Path(__file__).resolve().parents[1]
SMALL = "scale_bias_relu"  # one graph, one kernel: the cheapest sample to compile


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def model_file(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


# --- explore -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_explore_json_has_the_keys_scripts_use():
    result = cli("explore", SMALL, "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)  # stdout is the JSON document and nothing else
    assert record["graphs"], "a graph was captured"
    for graph in record["graphs"]:
        assert graph["kernels"]
        for kernel in graph["kernels"]:
            assert kernel["name"]
            assert kernel["kind"] in {"pointwise", "reduction", "extern", "fallback", "template"}
            assert isinstance(kernel["fx_origins"], list)
    assert any(k["fx_origins"] for g in record["graphs"] for k in g["kernels"])
    assert isinstance(record["graph_breaks"], list)
    assert record["verify"]["ok"] is True
    assert isinstance(record["verify"]["max_abs_err"], float)
    assert {"capture", "decompose", "lower", "schedule", "codegen", "build", "run"} <= set(record["timings"])
    assert all(isinstance(v, float) and v >= 0 for v in record["timings"].values())
    assert record["errors"] == []


@pytest.mark.slow
def test_explore_reports_graph_breaks_and_keeps_stdout_json_when_the_model_prints():
    result = cli("explore", "graph_break", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)  # the sample's print() went to stderr
    assert "branch taken" in result.stderr
    breaks = record["graph_breaks"]
    assert len(breaks) >= 1
    assert all(isinstance(b["lineno"], int) and b["filename"].endswith("graph_break.py") for b in breaks)
    assert all(b["reason"] for b in breaks)
    assert len(record["graphs"]) >= 2


@pytest.mark.slow
def test_explore_readable_summary_and_out_dir(tmp_path):
    out = tmp_path / "out"
    result = cli("explore", SMALL, "--out", str(out))
    assert result.returncode == 0, result.stderr
    text = result.stdout.lower()
    assert SMALL in text
    assert "kernel_0" in text and "pointwise" in text and "kernel" in text
    assert "verify" in text and "ok" in text
    assert "graph breaks: 0" in text and "guards" in text and "fusion" in text
    assert "capture" in text and "codegen" in text  # per-stage seconds
    record = json.loads((out / "record.json").read_text())
    assert record["model"] == SMALL
    assert "kernel_0" in (out / "graph0.cpp").read_text()
    assert "def call" in (out / "graph0_wrapper.py").read_text()


@pytest.mark.slow
def test_explore_dynamic_uses_size_symbols():
    result = cli("explore", "softmax", "--dynamic", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["options"]["dynamic"] is True
    assert record["verify"]["ok"] is True
    assert any(not str(size).isdigit() for node in record["graphs"][0]["ir"]["nodes"] for size in node["size"])


# --- user errors: exit 2, one paragraph at the user's line, no traceback -------------------------------------


@pytest.mark.slow
def test_syntax_error_exits_2_with_the_line(tmp_path):
    path = model_file(tmp_path, "broken_syntax.py", """
        import torch

        model = torch.nn.ReLU(
        example_inputs = (torch.randn(2),)
    """)
    result = cli("explore", str(path))
    assert result.returncode == 2
    assert f"{path}:3" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.slow
def test_model_that_raises_exits_2_naming_the_line(tmp_path):
    path = model_file(tmp_path, "raises.py", """
        import torch

        def model(x):
            y = x + 1
            return y @ torch.randn(7, 3)

        example_inputs = (torch.randn(4, 5),)
    """)
    result = cli("explore", str(path), "--json")
    assert result.returncode == 2
    assert f"{path}:5" in result.stderr
    assert "y @ torch.randn(7, 3)" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


@pytest.mark.slow
def test_missing_file_exits_2_listing_samples(tmp_path):
    result = cli("explore", str(tmp_path / "nowhere.py"))
    assert result.returncode == 2
    assert DEFAULT_SAMPLE in result.stderr and "graph_break" in result.stderr
    assert "Traceback" not in result.stderr
    result = cli("explore", "no_such_sample")
    assert result.returncode == 2
    assert all(name in result.stderr for name in sample_names())


@pytest.mark.slow
def test_verbose_shows_the_traceback_of_a_user_error(tmp_path):
    path = model_file(tmp_path, "no_model.py", """
        import torch
        example_inputs = (torch.randn(2),)
    """)
    quiet, verbose = cli("explore", str(path)), cli("explore", str(path), "--verbose")
    assert quiet.returncode == verbose.returncode == 2
    assert "model" in quiet.stderr and "Traceback" not in quiet.stderr
    assert "Traceback" in verbose.stderr


# --- compiler errors: exit 1, the root error in one paragraph ------------------------------------------------


@pytest.mark.slow
def test_compiler_failure_exits_1_with_the_root_error(tmp_path):
    # The model file breaks the compiler it is loaded into: its lower stage raises. The graph falls back to
    # eager (Note [Internal failure falls back to eager]), the record says why, and the CLI reports our failure
    # (exit 1) with the root error in one paragraph.
    path = model_file(tmp_path, "breaks_compiler.py", """
        import dataclasses
        import torch
        import engine.pipeline

        def broken_lower(*args, **kwargs):
            raise RuntimeError("injected compiler failure")

        stages = engine.pipeline.STAGES
        where = [s.name for s in stages].index("lower")
        stages[where] = dataclasses.replace(stages[where], fn=broken_lower)

        def model(x):
            return x.relu() + 1

        example_inputs = (torch.randn(4, 5),)
    """)
    result = cli("explore", str(path))
    assert result.returncode == 1
    assert "Glassbox failed while compiling breaks_compiler" in result.stderr
    assert "RuntimeError: injected compiler failure" in result.stderr
    assert "BackendCompilerFailed" not in result.stderr
    assert "--verbose" in result.stderr and "Traceback" not in result.stderr
    verbose = cli("explore", str(path), "--verbose")
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr
    record = json.loads(cli("explore", str(path), "--json").stdout)
    assert record["verify"]["ok"]  # the graph ran eagerly: the model's results are eager's
    (error,) = record["errors"]
    assert (error["kind"], error["stage"], error["type"]) == ("fallback", "lower", "RuntimeError")
    assert record["graphs"][0]["fallback"]["stage"] == "lower"


# --- bench ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_bench_report_without_inductor():
    before = dict(os.environ)
    report = bench(load_model_file(SMALL), with_inductor=False, min_run_time=0.05)
    for key in ("eager_ms", "glassbox_ms", "compile_s", "compile_warm_s", "speedup_vs_eager"):
        assert isinstance(report[key], float) and report[key] > 0, key
    assert report["inductor_ms"] is None and report["inductor_compile_s"] is None
    assert report["ratio_vs_inductor"] is None
    assert report["name"] == SMALL and report["threads"] >= 1
    assert report["verify"]["glassbox"]["ok"] is True
    fresh = report["compile_fresh"]  # Note [Fresh-process warm compile]: a child process hit the filled cache
    assert 0 < fresh["ours_s"] <= fresh["first_call_s"] and fresh["stages_s"]["build"] < report["compile_s"]
    assert dict(os.environ) == before  # the temporary cache directory was set for the compile only


@pytest.mark.slow
def test_bench_cli_json_without_inductor():
    result = cli("bench", SMALL, "--json", "--no-inductor", "--min-time", "0.05", "--threads", "1")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    (case,) = document["cases"]
    assert {"eager_ms", "glassbox_ms", "inductor_ms", "compile_s"} <= set(case)
    assert case["threads"] == 1 and case["inductor_ms"] is None


@pytest.mark.slow
def test_bench_with_inductor_one_tiny_case():
    # The one test that runs Inductor: its cold compile takes ~20 s on a small CPU.
    result = cli("bench", SMALL, "--json", "--min-time", "0.05", timeout=600)
    assert result.returncode == 0, result.stderr
    (case,) = json.loads(result.stdout)["cases"]
    assert case["inductor_ms"] > 0 and case["inductor_compile_s"] > 0
    assert math.isclose(case["ratio_vs_inductor"], case["glassbox_ms"] / case["inductor_ms"])
    assert case["verify"]["glassbox"]["ok"] and case["verify"]["inductor"]["ok"]


def test_bench_cases_suite_and_lists():
    names = [spec.name for spec in load_cases("suite")]
    assert names == ["scale_bias_relu", "softmax", "layernorm", "rmsnorm", "gelu_chain", "mlp"]
    suite = {spec.name: spec for spec in load_cases("suite")}
    assert suite["scale_bias_relu"].example_inputs[0].numel() == 4 * 1024 * 1024
    assert tuple(suite["softmax"].example_inputs[0].shape) == (2048, 2048)
    assert [spec.name for spec in load_cases("softmax, mlp")] == ["softmax", "mlp"]


def test_bench_table_has_every_case_and_the_geomean():
    cases = [
        {"name": "a", "eager_ms": 2.0, "glassbox_ms": 1.0, "inductor_ms": 0.5, "ratio_vs_inductor": 2.0,
         "compile_s": 1.5, "compile_warm_s": 0.1, "inductor_compile_s": 20.0, "threads": 2,
         "verify": {"glassbox": {"ok": True}, "inductor": {"ok": True}}},
        {"name": "b", "eager_ms": 2.0, "glassbox_ms": 1.0, "inductor_ms": 2.0, "ratio_vs_inductor": 0.5,
         "compile_s": 1.5, "compile_warm_s": 0.1, "inductor_compile_s": 20.0, "threads": 2,
         "verify": {"glassbox": {"ok": False, "max_abs_err": 1.0}}},
        {"name": "c", "error": "Glassbox failed while compiling c: RuntimeError: x."},
    ]
    table = cli_format.bench_table(cases)
    assert "glassbox/inductor" in table and "compile s" in table
    assert "geomean glassbox/inductor: 1.00x" in table  # sqrt(2.0 * 0.5)
    assert "b: glassbox output differs" in table and "c: Glassbox failed" in table


@pytest.mark.slow
def test_explore_with_inductor_adds_its_code_and_kernels():
    result = cli("explore", "scale_bias_relu", "--json", "--inductor")
    assert result.returncode == 0, result.stderr
    inductor = json.loads(result.stdout)["inductor"]
    assert inductor["kernel_count"] >= 1 and inductor["code"] and inductor["verify"]["ok"]
