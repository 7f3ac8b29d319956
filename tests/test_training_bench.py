"""`python -m engine bench SAMPLE --train` and engine/tools/train_bench.py (Note [Training-step bench]): a
training step timed for eager and Glassbox (Inductor's cold compile of two graphs is left to the browser test
and the scripts), its gradients checked, and the activations each keeps for the backward."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.tools.model_file import ModelSpec
from engine.tools.train_bench import bench_train

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_train_cli_times_a_step_and_measures_saved_activations(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLASSBOX_CACHE_DIR=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "engine", "bench", "mlp", "--train", "--json", "--no-inductor",
                             "--threads", "1", "--min-time", "0.05"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    case = json.loads(result.stdout)["cases"][0]
    assert case["train"] and case["name"] == "mlp"
    assert case["verify"]["glassbox"]["ok"], case["verify"]
    assert case["eager_ms"] > 0 and case["glassbox_ms"] > 0
    assert case["speedup_vs_eager"] == case["eager_ms"] / case["glassbox_ms"]
    saved = case["saved_bytes"]
    assert 0 < saved["glassbox"] <= saved["eager"]  # our partition saves relu's output, eager autograd no less
    assert "load_avg_1m" in case and case["inductor_ms"] is None


def test_bench_train_table_names_the_saved_bytes():
    from engine.tools.cli_format import bench_table

    case = {"name": "m", "train": True, "eager_ms": 2.0, "glassbox_ms": 1.0, "inductor_ms": None,
            "saved_bytes": {"eager": 2048, "glassbox": 1024}, "verify": {"glassbox": {"ok": True}}}
    text = bench_table([case])
    assert "activations saved for the backward: eager 2.0 KiB, glassbox 1.0 KiB" in text


def test_a_function_without_parameters_differentiates_its_inputs():
    def gelu_mul(x, y):
        return torch.nn.functional.gelu(x) * y

    spec = ModelSpec(name="gelu_mul", filename=__file__, source="", model=gelu_mul,
                     example_inputs=(torch.randn(64, 32), torch.randn(64, 32)))
    report = bench_train(spec, threads=1, with_inductor=False, min_run_time=0.02)
    assert report["verify"]["glassbox"]["ok"] and report["verify"]["glassbox"]["max_rel_err"] < 1e-5
    # eager autograd keeps gelu(x) for mul's backward; our partition recomputes it from x, which is alive anyway
    assert report["saved_bytes"]["glassbox"] == 0 < report["saved_bytes"]["eager"]
    assert report["ratio_vs_inductor"] is None



def test_eager_repeats_rerun_the_step_and_move_it_by_rounding_alone():
    """Note [Eager's own spread]: the rerun is eager's step exactly; each repeat (inputs and parameters one ulp up,
    then down, then one more thread) moves the gradients by rounding alone here, on copies of the model."""
    from engine.tools.train_bench import _eager_repeats, _own_copy, _step_tensors, _trained, step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    inputs = (torch.randn(8, 16),)
    before = [p.clone() for p in model.parameters()]
    spec = ModelSpec(name="mlp", filename=__file__, source="", model=model, example_inputs=inputs)
    own, own_inputs = _own_copy(model, inputs)
    loss = step(own, own, own_inputs)
    eager = _step_tensors([t.grad for t in _trained(own, own_inputs)], loss)
    rerun, repeats = _eager_repeats(model, inputs, spec, "cpu")
    assert all(name == n and torch.equal(t, u) for (name, t), (n, u) in zip(eager, rerun))
    assert len(repeats) == 3 and all([n for n, _ in run] == [n for n, _ in eager] for run in repeats)
    for run in repeats:
        assert all(torch.allclose(t, u, rtol=1e-5, atol=1e-6) for (_, t), (_, u) in zip(eager, run))
    assert any(not torch.equal(t, u) for (_, t), (_, u) in zip(eager, repeats[0]))  # it did move
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))

@pytest.mark.slow
def test_dumped_code_carries_each_forward_partition(tmp_path):
    """`bench train --dump-code` writes beside every graph's code the forward's partition: what this
    device's cut saves and recomputes, with bytes and reasons (the H200 block's saved set, read offline)."""
    from engine.tools import bench_train as script

    sample = script.cases("cpu", True)[0]  # the tiny transformer block
    script._dump_our_code(sample, "default", "cpu", tmp_path)
    text = (tmp_path / "graph0.partition.txt").read_text()
    assert text.startswith("saved ") and "policy min-memory" in text.splitlines()[0]
    assert any(line.startswith("saved ") and "cheapest cut" in line for line in text.splitlines()[1:])
    assert any(line.startswith("recomputed ") and "gelu" in line for line in text.splitlines())
    assert (tmp_path / "graph0.forward.py").exists() and (tmp_path / "graph1.backward.py").exists()
