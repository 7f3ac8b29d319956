"""Per-kernel profile (engine/runtime/profile.py): times, rates and estimates in the record; the compiled model is
unchanged by being profiled; the CLI's --profile."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import engine
from engine.runtime.profile import machine_roofs
from engine.tools.model_file import load_model_file

ROOT = Path(__file__).resolve().parents[1]


def explore_profiled(sample: str, **options):
    spec = load_model_file(sample)
    return spec, engine.explore(spec.model, spec.example_inputs, name=spec.name, profile=True, **options)


def test_every_kernel_gets_a_time_rate_and_share():
    _, record = explore_profiled("softmax")
    kernels = record.kernels
    assert kernels
    for kernel in kernels:
        assert kernel.time_ms > 0 and kernel.time_iqr_ms >= 0
        assert kernel.gbps > 0 and kernel.flops > 0 and kernel.gflops > 0
        assert 0 < kernel.share <= 1
    profile = record.graphs[0].profile
    assert profile.call_ms > 0 and profile.repeats >= 5
    assert abs(profile.kernels_ms - sum(k.time_ms for k in kernels)) < 1e-9
    assert record.machine.copy_gbps > 0 and record.machine.matmul_gflops > 0
    json.dumps(record.to_json())  # still plain data


def test_flop_estimates_count_elementwise_ops_and_matmuls():
    _, record = explore_profiled("scale_bias_relu")
    (kernel,) = record.kernels
    assert kernel.flops == 3 * 64 * 1024  # mul, add, relu per element
    _, record = explore_profiled("mlp")
    # default mode: two library GEMMs and the relu between them (Note [When a C++ template pays])
    assert sorted(k.flops for k in record.kernels if k.kind == "extern") == [2 * 32 * 256 * 10,
                                                                                  2 * 32 * 128 * 256]
    assert [k.flops for k in record.kernels if k.kind == "pointwise"] == [32 * 256]
    _, record = explore_profiled("mlp", templates="on")
    # the first Linear as a GEMM template with relu as its epilogue (one op per output element)
    matmuls = [k for k in record.kernels if k.kind in ("extern", "template")]
    assert sorted(k.flops for k in matmuls) == sorted([2 * 32 * 128 * 256 + 32 * 256, 2 * 32 * 256 * 10])


def test_profiling_leaves_the_compiled_model_as_it_was():
    spec = load_model_file("mlp")
    torch._dynamo.reset()
    from engine.pipeline import Options, capture, make_backend
    from engine.runtime.profile import Profiler
    from engine.record import Exploration

    exploration = Exploration(model="mlp", backend="cpp", device="cpu")
    profiler = Profiler("cpu", min_time=0.01)
    compiled = capture.dynamo_compile(spec.model, make_backend(Options(), exploration, profiler), None, None)
    with torch.no_grad():
        first = compiled(*spec.example_inputs)
        profiler.measure(exploration)
        again = compiled(*spec.example_inputs)  # the wrapper's namespace has its kernels back
        expected = spec.model(*spec.example_inputs)
    torch.testing.assert_close(again, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(first, expected, atol=1e-4, rtol=1e-4)
    assert exploration.graphs and all(k.time_ms for k in exploration.kernels)


def test_machine_roofs_are_measured_once():
    assert machine_roofs("cpu") is machine_roofs("cpu")


@pytest.mark.slow
def test_cli_explore_profile_json():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "engine", "explore", "scale_bias_relu", "--profile", "--json"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    kernel = record["graphs"][0]["kernels"][0]
    assert kernel["time_ms"] > 0 and kernel["gbps"] > 0 and kernel["flops"] > 0
    assert record["machine"]["copy_gbps"] > 0
