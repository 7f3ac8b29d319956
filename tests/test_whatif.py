"""Recompile what-if (Note [Recompile what-if] in engine/tools/whatif.py): Dynamo's guards, asked before the
inputs run, predict the recompile that then happens, and predict none when none happens."""
import textwrap

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
