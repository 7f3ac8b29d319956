"""Take a kernel away (Note [Kernel reproducers] in engine/reproducer.py): a written reproducer runs in a fresh
process, from another directory, and its kernel matches the eager reference computed from the same ATen ops;
a broken reference is caught; the CLI says why when there is nothing to reproduce."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from engine.tools.model_file import load_model_file
from engine.tools.repro_file import ReproError, repro_text
from samples import sample_path

ROOT = Path(__file__).resolve().parents[1]


def explored(sample: str, backend: str) -> dict:
    spec = load_model_file(str(sample_path(sample)))
    return engine.explore(spec.model, spec.example_inputs, backend=backend, name=spec.name).to_json()


def run_file(path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, str(path), *args], cwd=path.parent, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("sample,backend", [("softmax", "cpp"), ("layernorm", "triton"), ("gelu_chain", "cpp")])
def test_a_written_reproducer_runs_standalone_and_matches(tmp_path, sample, backend):
    record = explored(sample, backend)
    kernel = next(k for g in record["graphs"] for k in g["kernels"] if k["kind"] in ("pointwise", "reduction"))
    path = tmp_path / "repro.py"
    path.write_text(repro_text(record, None, kernel["name"]))
    result = run_file(path, "--iters", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ": ok," in result.stdout, "at least one output was checked against eager"
    assert "ms per launch" in result.stdout


@pytest.mark.slow
def test_a_graph_reproducer_has_every_generated_kernel(tmp_path):
    record = explored("layernorm", "cpp")
    generated = [k["name"] for g in record["graphs"] for k in g["kernels"] if k["kind"] in ("pointwise", "reduction")]
    path = tmp_path / "graph.py"
    path.write_text(repro_text(record, 0, None))
    result = run_file(path, "--iters", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(f" {name} (cpp" in result.stdout for name in generated)


@pytest.mark.slow
def test_a_wrong_reference_is_a_mismatch(tmp_path):
    # the check can fail: the same kernel against a reference that computes something else
    record = explored("softmax", "cpp")
    repro = record["graphs"][0]["kernels"][0]["repro"]
    assert "torch.ops.aten.exp.default" in repro["reference"]["code"]
    repro["reference"]["code"] = repro["reference"]["code"].replace("aten.exp.default", "aten.expm1.default")
    path = tmp_path / "wrong.py"
    path.write_text(repro_text(record, 0, "kernel_0"))
    result = run_file(path, "--iters", "0")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MISMATCH" in result.stdout


def test_library_calls_and_unknown_kernels_say_why():
    record = explored("matmul", "cpp")
    extern = next(k["name"] for g in record["graphs"] for k in g["kernels"] if k["kind"] in ("extern", "template"))
    with pytest.raises(ReproError, match="no reproducer"):
        repro_text(record, None, extern)
    with pytest.raises(ReproError, match="no kernel 'nope'"):
        repro_text(record, None, "nope")


@pytest.mark.slow
def test_the_cli_writes_it_from_a_sample_and_from_a_record(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "r.py"
    result = subprocess.run([sys.executable, "-m", "engine", "repro", "softmax", "--kernel", "kernel_0", "--out",
                             str(out), "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["repro"] == str(out)
    assert run_file(out, "--iters", "1").returncode == 0
    record_path = tmp_path / "record.json"
    record_path.write_text(json.dumps(explored("softmax", "cpp")))
    result = subprocess.run([sys.executable, "-m", "engine", "repro", str(record_path), "--kernel", "nope"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2 and "kernel_0" in result.stderr
