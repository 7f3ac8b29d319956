"""Graph breaks carry Dynamo's own explanation and hints, and a suggested rewrite of the user's line
(engine/capture.py Note [Dynamo's explanations], engine/break_fixes.py Note [Suggested rewrites])."""
import textwrap

import torch

import engine
from engine.break_fixes import suggest
from engine.capture import dynamo_explanation
from engine.tools.model_file import load_model_file


def test_dynamo_message_is_split_into_type_explanation_and_hints():
    message = ("Unsupported Tensor.item() call with capture_scalar_outputs=False\n  Explanation: Dynamo does not "
               "support tracing `Tensor.item()`.\n  Hint: Set `torch._dynamo.config.capture_scalar_outputs = True`.\n"
               "  Hint: Please report an issue to PyTorch.\n\n  Developer debug context: call_method item\n\n"
               " For more details about this graph break, please visit: https://x/gb/gb0124.html")
    explained = dynamo_explanation(message)
    assert explained["gb_type"].startswith("Unsupported Tensor.item()")
    assert explained["gb_id"] == "GB0124" and "Tensor.item()" in explained["explanation"]
    assert explained["hints"] == ["Set `torch._dynamo.config.capture_scalar_outputs = True`."]


def test_bare_data_dependent_jump_is_looked_up_in_dynamos_registry():
    explained = dynamo_explanation("generic_jump TensorVariable()")
    assert explained["gb_type"] == "Data-dependent branching"
    assert any("torch.cond" in hint for hint in explained["hints"])


def test_suggestions_for_known_patterns():
    assert "# print(" in suggest("print", "Failed to trace builtin operator", 'print("x")  # log').after
    item = suggest("Unsupported Tensor.item() call", "Unsupported Tensor.item()", "n = x.sum().item()")
    assert item.after.startswith("n = x.sum()  #") and "capture_scalar_outputs" in item.after
    numpy = suggest("numpy", "", "y = np.exp(x.numpy())")
    assert numpy.after == "y = torch.exp(x)"
    jump = suggest("generic_jump", "Data-dependent branching", "if x.sum() > 0:")
    assert "torch.where(x.sum() > 0" in jump.after and "torch.cond" in jump.after
    assert suggest("something else", "Unknown", "y = f(x)") is None


def test_if_with_one_assignment_per_branch_becomes_one_torch_where():
    source = textwrap.dedent("""
        def f(x, flag):
            if flag.sum() > 0:
                z = torch.relu(x)
            else:
                z = torch.sigmoid(x)
            return z
    """)
    fix = suggest("generic_jump", "Data-dependent branching", "    if flag.sum() > 0:", source, 3)
    assert fix.after == "z = torch.where(flag.sum() > 0, torch.relu(x), torch.sigmoid(x))"
    assert fix.before.startswith("if flag.sum() > 0:")


def test_sample_breaks_have_hints_and_the_suggested_rewrite_removes_the_break(tmp_path):
    spec = load_model_file("graph_break")
    record = engine.explore(spec.model, spec.example_inputs, name=spec.name).to_json()
    branch, printed = record["graph_breaks"]
    assert branch["gb_type"] == "Data-dependent branching" and branch["hints"]
    assert printed["hints"] and printed["suggestion"]["pattern"] == "print"
    fix = branch["suggestion"]
    rewritten = spec.source.replace(textwrap.indent(fix["before"], "    ").lstrip(" "), fix["after"])
    rewritten = rewritten.replace(printed["suggestion"]["before"], printed["suggestion"]["after"])
    assert rewritten != spec.source
    path = tmp_path / "fixed.py"
    path.write_text(rewritten)
    fixed = load_model_file(str(path))
    again = engine.explore(fixed.model, fixed.example_inputs, name="fixed").to_json()
    assert again["graph_breaks"] == [] and len(again["graphs"]) == 1 and again["verify"]["ok"]
    torch.testing.assert_close(fixed.model(*spec.example_inputs), spec.model(*spec.example_inputs))


def test_guards_have_no_stray_colon_and_dynamic_seq_names_only_symbols_it_shows():
    import re

    spec = load_model_file("dynamic_seq")
    record = engine.explore(spec.model, spec.example_inputs, dynamic_inputs=spec.dynamic_inputs,
                            name=spec.name).to_json()
    assert record["guards"] and not [g for g in record["guards"] if g.startswith(":")]
    shown = set(re.findall(r"\bs\d+\b", " ".join(g["ir"]["text"] for g in record["graphs"])))
    promised = set(re.findall(r"\bs\d+\b", spec.description))  # a symbol the description names must be shown
    assert shown and promised <= shown, (promised, shown)
