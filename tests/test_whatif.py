"""Recompile what-if (Note [Recompile what-if] in engine/tools/whatif.py): Dynamo's guards, asked before the
inputs run, predict the recompile that then happens, and predict none when none happens."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from engine.tools.model_file import load_model_file
from engine.tools.whatif import WhatIfError, parse_inputs, summarize_guards, what_if
from samples import sample_path


def mlp():
    return load_model_file(str(sample_path("mlp")))


def test_a_new_batch_size_is_predicted_to_recompile_and_does():
    spec = mlp()
    result = what_if(spec, parse_inputs("float32[16, 128]", tuple(spec.example_inputs)))
    assert result["prediction"]["known"] and result["prediction"]["recompile"] is True
    assert result["prediction"]["failed_kinds"] == ["shape"]
    assert "size mismatch" in result["prediction"]["checked"][0]["failed"][0]
    assert result["outcome"]["recompiled"] is True and result["predicted_right"]
    assert "dynamic=True" in result["prediction"]["dynamic"]


@pytest.mark.slow  # the CLI in a subprocess (Note [Two lanes], tests/conftest.py)
def test_the_cli_says_in_json_whether_other_inputs_recompile():
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "engine", "whatif", "mlp", "--inputs", "float32[16, 128]", "--json"],
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)  # --json: the JSON on stdout and nothing else
    prediction = result["prediction"]
    assert prediction["known"] and prediction["recompile"] is True and prediction["failed_kinds"] == ["shape"]
    assert result["outcome"]["recompiled"] is True and result["predicted_right"] is True
    assert "`whatif` runs the model in this process, unsandboxed" in done.stderr  # said, never silent


def test_the_same_shapes_are_predicted_not_to_recompile_and_do_not():
    spec = mlp()
    result = what_if(spec, parse_inputs("float32[32, 128]", tuple(spec.example_inputs)))
    assert result["prediction"]["recompile"] is False and result["outcome"]["recompiled"] is False
    assert result["predicted_right"]


def test_dynamic_shapes_serve_a_new_batch_without_recompiling():
    spec = mlp()
    result = what_if(spec, parse_inputs("float32[16, 128]", tuple(spec.example_inputs)), dynamic=True)
    assert result["prediction"]["recompile"] is False and result["outcome"]["recompiled"] is False


def test_a_dtype_change_recompiles_a_models_own_forward(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent("""
        import torch

        class Scale(torch.nn.Module):
            def forward(self, x, y):
                return torch.relu(x) * 2 + y

        model = Scale()
        example_inputs = (torch.randn(8, 16), torch.randn(8, 16))
    """))
    spec = load_model_file(str(path))
    result = what_if(spec, parse_inputs("float64[8, 16], float64[8, 16]", tuple(spec.example_inputs)))
    assert result["prediction"]["function"] == "forward"
    assert result["prediction"]["recompile"] is True and "dtype" in result["prediction"]["failed_kinds"]
    assert "would not avoid" in result["prediction"]["dynamic"]
    assert result["outcome"]["recompiled"] is True and result["predicted_right"]
    assert summarize_guards(result["guards"]["all"])  # every guard has a kind


def test_input_specs_must_match_the_tensor_inputs():
    with pytest.raises(WhatIfError, match="1 tensor input"):
        parse_inputs("float32[2], float32[3]", (torch.randn(2),))
    with pytest.raises(WhatIfError, match="unknown dtype"):
        parse_inputs("floaty[2]", (torch.randn(2),))


POINTWISE = """
import torch

class Scale(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2

model = Scale()
example_inputs = (torch.randn(8, 16),)
"""


def pointwise(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(POINTWISE)
    return load_model_file(str(path))


def test_a_dim_marked_dynamic_serves_a_new_size_without_recompiling(tmp_path):
    spec = pointwise(tmp_path)
    result = what_if(spec, parse_inputs("float32[8, 40]", tuple(spec.example_inputs)), dynamic_dims=[(0, 1)])
    assert result["changed_dims"] == [{"input": 0, "dim": 1, "from": 16, "to": 40, "marked": True}]
    assert result["prediction"]["recompile"] is False and result["outcome"]["recompiled"] is False
    assert result["predicted_right"]
    x = next(t for t in result["prediction"]["guards"]["inputs"] if t["source"] == "L['x']")
    assert x["size"] == [8, None] and x["dtype"] == "float32"  # the marked dim is a symbol in the guard
    assert not hasattr(spec.example_inputs[0], "_dynamo_dynamic_indices")  # the model file's tensor unmarked


def test_marking_another_dim_than_the_one_that_changes_still_recompiles(tmp_path):
    spec = pointwise(tmp_path)
    result = what_if(spec, parse_inputs("float32[4, 16]", tuple(spec.example_inputs)), dynamic_dims=[(0, 1)])
    assert result["prediction"]["recompile"] is True and result["outcome"]["recompiled"] is True
    assert result["predicted_right"]
    assert "mark_dynamic on L['x'] dim 0 (8 -> 4)" in result["prediction"]["dynamic"]


def test_a_mark_the_code_contradicts_is_the_answer_not_a_crash():
    spec = mlp()  # Linear(128, ...) specializes the feature dim: marking it dynamic is refused by Dynamo
    result = what_if(spec, parse_inputs("float32[32, 64]", tuple(spec.example_inputs)), dynamic_dims=[(0, 1)])
    assert result["prediction"]["known"] is False and "specialized" in result["prediction"]["contradiction"]


def test_the_guards_that_matter_come_first_and_the_raw_tree_is_kept():
    spec = mlp()
    result = what_if(spec, parse_inputs("float32[16, 128]", tuple(spec.example_inputs)))
    guards = result["prediction"]["guards"]
    assert guards["matters"][0].startswith(result["prediction"]["input_names"][0])  # the input tensor first
    assert "float32[32, 128]" in guards["matters"][0]
    assert list(guards["checks"])[:2] == ["shape", "dtype"] and guards["checks"]["module"] >= 4
    assert len(guards["raw"]) >= sum(guards["checks"].values()) - 4  # every tree line kept for the folded dump


def test_mark_dynamic_pairs_are_checked_before_compiling():
    from engine.tools.whatif import mark_dims, parse_dims
    assert parse_dims("0:0, 1:-1") == [(0, 0), (1, -1)]
    with pytest.raises(WhatIfError, match="INPUT:DIM"):
        parse_dims("x")
    with pytest.raises(WhatIfError, match="no dim 2"):
        mark_dims((torch.randn(2, 3),), [(0, 2)])
