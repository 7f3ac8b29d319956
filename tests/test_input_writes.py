"""Inputs a graph changes in place are written back after it in one call (Note [Input writes after the graph] in
engine/decompose.py): batch norm's running statistics in training, an in-place update of a user's tensor."""
import copy
import dataclasses
import warnings

import pytest
import torch

import engine
from engine import pipeline
from engine.tools.cli_format import graph_summary


def _forward_ops(step) -> dict[str, int]:
    """The ATen ops one call of `step` ran directly in the compiled forward (AOTAutograd's runtime and our
    wrapper's library calls), by name, from the profiler (a dispatch mode would not do: under one, Dynamo runs
    the frame eagerly)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        step()
    counts: dict[str, int] = {}
    for event in profile.events():
        if event.cpu_parent is not None and event.cpu_parent.name == "CompiledFunction":
            counts[event.name] = counts.get(event.name, 0) + 1
    return counts


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_running_statistics_are_written_back_in_one_call_and_equal_eager(backend):
    model, twin = _net(), _net()
    compiled = engine.compile(model, backend=backend)
    x = torch.randn(2, 3, 12, 12)
    compiled(x).sum().backward()  # the first step compiles
    ops = _forward_ops(lambda: compiled(x).sum().backward())
    for _ in range(2):
        twin(x).sum().backward()
    assert ops.get("aten::_foreach_copy_") == 1, ops
    if backend == "cpp":  # not one copy_ per statistic (6 here); the Triton interpreter copies its arguments
        assert ops.get("aten::copy_", 0) == 0, ops
    for (name, ours), (_, eager) in zip(model.named_buffers(), twin.named_buffers()):
        torch.testing.assert_close(ours, eager, msg=name)
    for (name, ours), (_, eager) in zip(model.named_parameters(), twin.named_parameters()):
        torch.testing.assert_close(ours.grad, eager.grad, rtol=1e-4, atol=1e-4)  # sums in another order
    model.eval(), twin.eval()
    torch.testing.assert_close(compiled(x), twin(x))


def _bump(x, y):
    x.add_(1)  # a user's tensor changed in place, read again after
    return (x * y).sum(-1)


def test_an_in_place_update_of_an_input_lands_in_the_callers_tensor():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    ours, eager = x.clone(), x.clone()
    out = engine.compile(_bump)(ours, y)
    torch.testing.assert_close(out, _bump(eager, y))
    torch.testing.assert_close(ours, eager)


def test_the_write_back_survives_a_fallback_to_eager(monkeypatch):
    stages = list(pipeline.STAGES)
    where = [s.name for s in stages].index("lower")

    def broken(artifact, options):
        raise RuntimeError("injected failure")

    stages[where] = dataclasses.replace(stages[where], fn=broken)
    monkeypatch.setattr(pipeline, "STAGES", stages)
    model, twin = _net(), _net()
    x = torch.randn(2, 3, 12, 12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine.compile(model)(x).sum().backward()
    twin(x).sum().backward()
    assert any(issubclass(w.category, engine.FallbackWarning) for w in caught)
    for (name, ours), (_, eager) in zip(model.named_buffers(), twin.named_buffers()):
        torch.testing.assert_close(ours, eager, msg=name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_running_statistics_on_the_gpu_replayed_or_not(mode):
    model, twin = _net().cuda(), _net().cuda()
    compiled = engine.compile(model, backend="triton", device="cuda", mode=mode)
    x = torch.randn(2, 3, 12, 12, device="cuda")
    for _ in range(4):  # recorded, then replayed
        compiled(x).sum().backward()
        twin(x).sum().backward()
    for (name, ours), (_, eager) in zip(model.named_buffers(), twin.named_buffers()):
        torch.testing.assert_close(ours, eager, msg=name)
    for ours, eager in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(ours.grad, eager.grad, rtol=1e-3, atol=1e-3)


def test_the_record_names_the_inputs_a_training_graph_writes():
    record = engine.explore(_net(), (torch.randn(2, 3, 12, 12),), train=True)
    assert record.verify.ok
    forward = next(g for g in record.graphs if g.phase == "forward")
    assert len(forward.input_writes) == 6  # two batch norms: running mean, running variance, batches tracked
    aten_inputs = {n.name for n in forward.aten if n.op == "placeholder"}
    assert set(forward.input_writes) <= aten_inputs
    assert all(not g.input_writes for g in record.graphs if g.phase == "backward")
    assert any("in place after the graph" in line for line in graph_summary(forward, verbose=False))
