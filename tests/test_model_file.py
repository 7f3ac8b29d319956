"""The model-file loader: what a good file becomes, and that every kind of bad file names the right line."""

import linecache
import textwrap

import pytest
import torch

from engine.tools.model_file import ModelFileError, ModelSpec, load_model_file, load_model_source, run_eager
from samples import DEFAULT_SAMPLE, sample_names, sample_path

GOOD = """\
import torch
from torch import nn

class Net(nn.Module):
    def forward(self, x):
        return x.relu()

model = Net()
example_inputs = (torch.randn(4, 8),)
"""


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def load_error(source: str, filename: str = "<pasted>") -> ModelFileError:
    with pytest.raises(ModelFileError) as info:
        load_model_source(source, filename)
    return info.value


# --- good files --------------------------------------------------------------------------------------------


def test_pasted_source_becomes_a_spec():
    spec = load_model_source(GOOD)
    assert isinstance(spec, ModelSpec)
    assert spec.filename == "<pasted>" and spec.source == GOOD
    assert isinstance(spec.model, torch.nn.Module)
    assert len(spec.example_inputs) == 1 and spec.example_inputs[0].shape == (4, 8)
    assert spec.dynamic_inputs == [] and spec.tolerance is None
    assert torch.equal(run_eager(spec), spec.example_inputs[0].relu())


def test_load_by_path_and_by_sample_name(tmp_path):
    path = tmp_path / "my_net.py"
    path.write_text(GOOD)
    spec = load_model_file(path)
    assert spec.name == "my_net" and spec.filename == str(path)
    assert load_model_file(str(path)).name == "my_net"

    sample = load_model_file(DEFAULT_SAMPLE)
    assert sample.name == DEFAULT_SAMPLE and sample.filename == str(sample_path(DEFAULT_SAMPLE))


def test_inputs_are_normalized():
    # a single tensor is wrapped; a function is called; dynamic_inputs entries become tuples too
    spec = load_model_source(src("""
        import torch
        def model(x):
            return x * 2
        def example_inputs():
            return torch.ones(3)
        dynamic_inputs = [torch.ones(5), [torch.ones(7)]]
        tolerance = dict(atol=1e-3, rtol=1e-3)
    """))
    assert isinstance(spec.example_inputs, tuple) and spec.example_inputs[0].shape == (3,)
    assert [tuple(d[0].shape) for d in spec.dynamic_inputs] == [(5,), (7,)]
    assert all(isinstance(d, tuple) for d in spec.dynamic_inputs)
    assert spec.tolerance == {"atol": 1e-3, "rtol": 1e-3}


def test_description_falls_back_to_the_module_docstring():
    spec = load_model_source('"""Doubles its input."""\nimport torch\nmodel = lambda x: 2 * x\n'
                             "example_inputs = (torch.ones(2),)\n")
    assert spec.description == "Doubles its input."


def test_loading_is_deterministic_and_leaves_the_callers_rng_alone():
    # no manual_seed in this file: the loader seeds for it
    unseeded = "import torch\nmodel = torch.nn.Linear(4, 4)\nexample_inputs = (torch.randn(2, 4),)\n"
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b = load_model_source(unseeded), load_model_source(unseeded)
    assert torch.equal(torch.rand(1), before)
    assert torch.equal(a.example_inputs[0], b.example_inputs[0])
    assert torch.equal(a.model.weight, b.model.weight)


def test_main_block_does_not_run():
    spec = load_model_source(GOOD + 'if __name__ == "__main__":\n    raise SystemExit("ran")\n')
    assert callable(spec.model)


def test_pasted_lines_show_in_tracebacks():
    # the loader puts pasted text into linecache, so tracebacks (and Dynamo's break excerpts) can quote it
    load_model_source(GOOD, "<pasted-linecache>")
    assert linecache.getline("<pasted-linecache>", 6).strip() == "return x.relu()"


# --- bad files: each names the problem and the line ---------------------------------------------------------


def test_syntax_error_names_the_line():
    err = load_error("import torch\nx = 1\ny = = 2\n")
    assert err.lineno == 3
    assert "SyntaxError" in err.message and ":3" in err.message
    assert "y = = 2" in err.message and "^" in err.message


def test_indentation_error_names_the_line():
    err = load_error("import torch\ndef f():\nreturn 1\n")
    assert err.lineno == 3 and "IndentationError" in err.message


def test_exception_while_running_the_file_names_the_deepest_user_line():
    err = load_error(src("""
        import torch


        def helper():
            raise ValueError("weights file is missing")

        helper()
    """))
    assert err.lineno == 5
    assert "ValueError" in err.message and "weights file is missing" in err.message
    assert 'raise ValueError("weights file is missing")' in err.message


def test_torch_error_at_top_level_names_the_line():
    err = load_error("import torch\n\nx = torch.randn(3, 4)\ny = torch.randn(5, 6)\nz = x @ y\n")
    assert err.lineno == 5 and "RuntimeError" in err.message and "x @ y" in err.message


def test_missing_model_lists_what_the_file_defines():
    err = load_error("import torch\nfrom torch import nn\nclass Net(nn.Module):\n    pass\n"
                     "example_inputs = (torch.ones(1),)\n")
    assert "`model`" in err.message
    assert "Net" in err.message and "example_inputs" in err.message
    assert "Net()" in err.message  # the hint suggests instantiating the module the file defines


def test_missing_example_inputs():
    err = load_error("import torch\nmodel = torch.nn.ReLU()\n")
    assert "example_inputs" in err.message and "model" in err.message


def test_model_not_callable():
    err = load_error("import torch\n\nmodel = 42\nexample_inputs = (torch.ones(1),)\n")
    assert err.lineno == 3 and "model" in err.message and "int" in err.message


def test_model_is_a_class_not_an_instance():
    err = load_error("import torch\nmodel = torch.nn.ReLU\nexample_inputs = (torch.ones(1),)\n")
    assert err.lineno == 2 and "instance" in err.message and "ReLU(" in err.message


@pytest.mark.parametrize("value", ["(torch.ones(2), 3)", "3", "'x'", "{'x': torch.ones(2)}"])
def test_example_inputs_must_be_tensors(value):
    err = load_error(f"import torch\nmodel = torch.nn.ReLU()\n\nexample_inputs = {value}\n")
    assert err.lineno == 4 and "example_inputs" in err.message and "tensor" in err.message


def test_example_inputs_function_that_fails_names_its_line():
    err = load_error(src("""
        import torch
        model = torch.nn.ReLU()
        def example_inputs():
            return (torch.randn(2, 3) @ torch.randn(4, 5),)
    """))
    assert err.lineno == 4 and "example_inputs()" in err.message and "RuntimeError" in err.message


@pytest.mark.parametrize("value, words", [
    ("5", ["dynamic_inputs", "int"]),
    ("[('not a tensor',)]", ["dynamic_inputs[0]", "str"]),
    ("[(torch.ones(2), torch.ones(2))]", ["dynamic_inputs", "2 tensors"]),  # wrong number of arguments
])
def test_wrong_dynamic_inputs(value, words):
    err = load_error(f"import torch\nmodel = torch.nn.ReLU()\nexample_inputs = (torch.ones(1),)\n"
                     f"dynamic_inputs = {value}\n")
    assert err.lineno == 4 and all(w in err.message for w in words)


def test_wrong_tolerance():
    err = load_error("import torch\nmodel = torch.nn.ReLU()\nexample_inputs = (torch.ones(1),)\ntolerance = 1e-3\n")
    assert err.lineno == 4 and "tolerance" in err.message


def test_unknown_sample_lists_the_samples():
    with pytest.raises(ModelFileError) as info:
        load_model_file("no_such_sample")
    assert "no_such_sample" in info.value.message
    assert all(name in info.value.message for name in sample_names())


def test_missing_file_lists_the_samples(tmp_path):
    with pytest.raises(ModelFileError) as info:
        load_model_file(tmp_path / "absent.py")
    assert "absent.py" in info.value.message and DEFAULT_SAMPLE in info.value.message


# --- run_eager: errors inside the model point at the user's line ---------------------------------------------


FORWARD_FAILS = src("""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            y = x * 2
            return self.fc(y)

    model = Net()
    example_inputs = (torch.randn(3, 5),)
""")


def test_error_inside_forward_names_the_user_line_not_torch(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(FORWARD_FAILS)
    spec = load_model_file(path)  # loading is fine: the error only shows when the model runs
    with pytest.raises(ModelFileError) as info:
        run_eager(spec)
    err = info.value
    assert err.lineno == 11  # `return self.fc(y)`, not a line inside torch.nn.Linear
    assert "RuntimeError" in err.message and "broken.py:11" in err.message and "self.fc(y)" in err.message


def test_error_in_a_plain_function_model():
    spec = load_model_source("import torch\n\ndef model(x):\n    return x.view(7)\n\nexample_inputs = (torch.ones(4),)\n")
    with pytest.raises(ModelFileError) as info:
        run_eager(spec)
    assert info.value.lineno == 4 and "x.view(7)" in info.value.message


def test_run_eager_accepts_other_inputs_and_disables_autograd():
    spec = load_model_source(GOOD)
    out = run_eager(spec, (torch.randn(2, 8, requires_grad=True),))
    assert out.shape == (2, 8) and not out.requires_grad


def test_wrong_number_of_inputs_is_reported_without_a_line():
    spec = load_model_source("import torch\nmodel = torch.nn.ReLU()\nexample_inputs = (torch.ones(1), torch.ones(1))\n")
    with pytest.raises(ModelFileError) as info:
        run_eager(spec)
    assert info.value.lineno is None and "TypeError" in info.value.message and "inputs" in info.value.message
