"""Every sample loads, runs eagerly and is what it claims to be (before any compiler touches it)."""

import dataclasses

import pytest
import torch
import torch._dynamo

from engine.tools.model_file import load_model_file, run_eager
from samples import DEFAULT_SAMPLE, sample_names

# Samples run through the Triton interpreter in other tests, which is slow: keep every input small.
MAX_INPUT_ELEMENTS = 64 * 1024


def output_tensors(out) -> list[torch.Tensor]:
    """The tensors in a model's output: a tensor, or tuples/lists/dicts/dataclasses of them, nested."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in output_tensors(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in output_tensors(item)]
    if dataclasses.is_dataclass(out):
        return [t for f in dataclasses.fields(out) for t in output_tensors(getattr(out, f.name))]
    raise AssertionError(f"a model output holds {type(out).__name__}, not tensors")


def test_samples_are_discovered():
    names = sample_names()
    assert DEFAULT_SAMPLE in names and "graph_break" in names
    assert names == sorted(names) and not any(n.startswith("_") for n in names)


@pytest.mark.parametrize("name", sample_names())
def test_sample_loads_and_runs_eagerly(name):
    spec = load_model_file(name)
    assert spec.description, "every sample teaches something: give it a description"
    for inputs in [spec.example_inputs, *spec.dynamic_inputs]:
        assert all(t.numel() <= MAX_INPUT_ELEMENTS for t in inputs)
        outputs = output_tensors(run_eager(spec, inputs))
        assert outputs
        for t in outputs:
            assert not (t.is_floating_point() and t.isnan().any()), f"{name} produced NaN"


@pytest.mark.parametrize("name", sample_names())
def test_sample_inputs_are_deterministic(name):
    first, second = load_model_file(name), load_model_file(name)
    for a, b in zip(first.example_inputs, second.example_inputs, strict=True):
        assert torch.equal(a, b)


def test_dynamic_samples_vary_a_size():
    for name in ("dynamic_seq", "bucketing"):
        spec = load_model_file(name)
        shapes = {tuple(inputs[0].shape) for inputs in [spec.example_inputs, *spec.dynamic_inputs]}
        assert len(shapes) >= 2, name


@pytest.mark.parametrize("name", sample_names())
def test_graph_breaks_only_where_intended(name):
    # graph_break exists to show breaks; every other sample should be captured whole, or a compiler could not
    # fuse across the break and the sample would no longer show what its description says.
    spec = load_model_file(name)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(spec.model)(*spec.example_inputs)
    if name == "graph_break":
        assert explained.graph_break_count >= 1
    else:
        assert explained.graph_break_count == 0, [str(r.reason) for r in explained.break_reasons]
