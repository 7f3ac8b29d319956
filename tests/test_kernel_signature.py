"""Kernel signatures come from what the printer used (Note [Signature from the printer]): the buffers the body
loads, those it stores, the size symbols its indexes and loop bounds name; both backends, against eager."""
import pytest
import torch

import engine
from engine.pipeline import AtenGraph, Options, stage_named
from engine.tools.aten_graphs import capture_aten


def _generated(fn, inputs, backend):
    (gm, fake_inputs), = capture_aten(fn, *inputs)
    artifact = AtenGraph(gm, list(fake_inputs))
    for stage in ("lower", "schedule", "codegen"):
        artifact = stage_named(stage).fn(artifact, Options(backend=backend))
    return artifact.scheduled.lowered.graph, artifact.module.kernels


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_fused_producer_is_no_argument(backend):
    # exp(x) is computed inside the sum's kernel: the kernel reads x and writes the sum, nothing else
    graph, kernels = _generated(lambda x: torch.exp(x).sum(1), (torch.randn(8, 32),), backend)
    kernel, = kernels
    inputs = {b.name for b in graph.inputs if b is not None}
    assert len(kernel.args) == 2 and kernel.args[0] in inputs and kernel.args[1] not in inputs
    assert kernel.size_args == []


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("fn", [lambda x: x.sum(0), lambda x: x - x.mean(0), lambda x: x.t() + 1,
                                lambda x: torch.softmax(x, -1)], ids=["column_sum", "centre", "transpose", "softmax"])
def test_dynamic_sizes_reach_the_signature(backend, fn):
    torch._dynamo.reset()
    exploration = engine.explore(fn, (torch.randn(8, 12),), backend=backend, dynamic=True,
                                 dynamic_inputs=[(torch.randn(16, 20),), (torch.randn(5, 3),)])
    assert exploration.verify.ok, exploration.verify
    assert not exploration.errors  # a missing size argument would not compile, and fall back to eager
    assert [run.new_graphs for run in exploration.runs] == [0, 0], exploration.runs
    assert all(run.verify.ok for run in exploration.runs), exploration.runs
