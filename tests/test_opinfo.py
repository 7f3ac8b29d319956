"""A fixed, fast subset of the OpInfo sweep (engine/tools/sweep_opinfo.py): the first float32 sample of ops spanning
unary, binary, reductions, views, indexing, creation and library calls. No sample may be wrong or crash, and
the core ops listed in MUST_GENERATE must run fully generated code (no eager fallback).
The full sweep and its report: `python -m engine sweep opinfo` -> reports/opinfo_sweep.md."""
import pytest

pytest.importorskip("expecttest")  # torch's OpInfo database imports it

from pathlib import Path  # noqa: E402

from engine.tools import sweep_opinfo as opinfo_sweep  # noqa: E402 - after the skip: OpInfo needs expecttest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # a subset of the OpInfo sweep (Note [Two lanes], tests/conftest.py)

UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfinv", "exp", "expm1", "floor", "log",
         "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan",
         "tanh", "trunc", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
         "nn.functional.leaky_relu", "nn.functional.hardtanh", "isnan", "logical_not", "nan_to_num"]
BINARY = ["add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "div.trunc_rounding", "pow",
          "maximum", "minimum", "atan2", "fmod", "remainder", "eq", "ne", "lt", "ge", "where", "clamp", "lerp",
          "hypot", "copysign", "addcmul"]
REDUCTIONS = ["sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "var", "std", "any", "all",
              "max.reduction_with_dim", "softmax", "log_softmax", "nn.functional.layer_norm", "logsumexp"]
VIEWS = ["permute", "transpose", "expand", "view", "reshape", "squeeze", "unsqueeze", "select", "narrow",
         "flatten", "t", "split", "chunk", "unbind"]
INDEXING = ["gather", "index_select", "cat", "stack", "nn.functional.embedding", "full_like", "zeros_like",
            "arange", "constant_pad_nd", "flip", "tril", "triu", "roll", "repeat"]
LIBRARY = ["mm", "bmm", "addmm"]
SCANS = ["cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"]  # Note [Scans] in engine/ir/nodes.py
FALLBACK_OK = ["sort"]  # an unstable sort runs eagerly (Note [Sorting runs eagerly]): it must match, never be wrong
SUBSET = UNARY + BINARY + REDUCTIONS + VIEWS + INDEXING + LIBRARY + SCANS + FALLBACK_OK

# core ops whose first float32 sample must be fully generated (no Fallback node)
MUST_GENERATE = (["abs", "ceil", "cos", "exp", "floor", "log", "neg", "reciprocal", "rsqrt", "sigmoid", "sin",
                  "sqrt", "tanh", "nn.functional.relu", "nn.functional.gelu", "isnan", "add", "sub", "mul",
                  "div.no_rounding_mode", "pow", "maximum", "minimum", "eq", "ne", "lt", "ge", "where", "clamp",
                  "fmod", "remainder", "sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "var", "any",
                  "max.reduction_with_dim", "permute", "expand", "view", "squeeze", "unsqueeze", "select",
                  "gather", "index_select", "cat", "full_like", "arange", "constant_pad_nd", "flip", "mm", "bmm",
                  "addmm", "nn.functional.embedding"] + SCANS)


@pytest.fixture(scope="module")
def ops_by_label():
    ops = opinfo_sweep.load_ops(SUBSET)
    return {opinfo_sweep.op_label(op): op for op in ops}


@pytest.mark.parametrize("label", SUBSET)
def test_first_float32_sample(label, ops_by_label):
    import torch

    op = ops_by_label.get(label)
    assert op is not None, f"{label} is not in this torch's OpInfo database"
    samples = list(opinfo_sweep.iter_samples(op, torch.float32, 1))
    assert samples, f"{label} has no float32 sample"
    _, sample = samples[0]
    result = opinfo_sweep.run_sample(op, sample, "cpp", timeout=120)
    assert result["status"] not in ("wrong", "crash"), result
    if label in MUST_GENERATE:
        assert result["status"] == "generated", result


def test_the_sweep_verb_runs_workers_and_writes_its_reports(tmp_path):
    """`python -m engine sweep opinfo`: worker processes, the CSV and markdown reports, the summary as JSON."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "sweep"
    result = subprocess.run([sys.executable, "-m", "engine", "sweep", "opinfo", "--ops", "abs,add", "--dtypes",
                             "float32", "--max-samples", "1", "--jobs", "1", "--out", str(out), "--json"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)  # stdout holds the summary alone; progress went to stderr
    assert summary["samples"] == 2 and summary["counts"]["generated"] == 2, summary
    assert "2/2 ops" in result.stderr
    assert out.with_suffix(".csv").read_text().count("\nabs,") == 1
    assert "add" in out.with_suffix(".md").read_text()


# -- Note [Tolerance policy] (engine/run.py): the verdict the sweep relies on ------------------------------------
def test_fp64_reference_accepts_an_answer_more_accurate_than_eager():
    import torch

    from engine.run import verify

    x = torch.tensor([1e8, 1.0, -1e8, 1.0] * 256)  # float32 sums of this cancel badly; the true sum is 512
    model = lambda t: t.sum()  # noqa: E731
    exact = torch.tensor(512.0)
    if torch.equal(model(x), exact):
        pytest.skip("this build's float32 sum happens to be exact")
    result = verify(model, (x,), exact)
    output = result["outputs"][0]
    assert result["ok"] and not output["close_to_eager"] and output["judged_by"] == "fp64", output
    assert output["fp64"]["ours_rmse"] == 0.0 and output["fp64"]["eager_rmse"] > 0
    assert not verify(model, (x,), torch.tensor(-5000.0))["ok"]


def test_every_output_reports_error_vs_eager_and_vs_fp64():
    import torch

    from engine.run import verify

    class LinearAndArgmax(torch.nn.Module):  # the fp64 run upcasts a module's parameters too
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x):
            y = self.linear(x)
            return y, y.argmax(-1)

    torch.manual_seed(0)
    model = LinearAndArgmax()
    x = torch.randn(2, 4)
    with torch.no_grad():
        y, index = model(x)
    result = verify(model, (x,), (y, index))
    floating, integer = result["outputs"]
    assert result["ok"] and floating["judged_by"] == "eager"
    assert {"ours_rmse", "eager_rmse", "ours_max_abs", "eager_max_abs"} <= set(floating["fp64"])
    assert "fp64" not in integer and integer["atol"] == 0.0
    wrong = verify(model, (x,), (y + 1, index))
    assert not wrong["ok"] and not wrong["outputs"][0]["fp64"]["ok"]
