"""Training under mode="reduce-overhead" (Note [Training under CUDA graphs] in codegen/triton_build.py), on the CPU.

The whole pipeline runs with the C++ backend, and torch.cuda's graph capture is replaced by a stand-in that
behaves like one: a call made while a graph is being captured runs once (its outputs are allocated as the
capture would allocate them, in memory the graph keeps) and is recorded as work; replay runs that work again on
the very tensors it was given and writes the results into the very outputs it returned, as a CUDA graph replays
its kernels on the recorded addresses. So whatever a real replay would read or overwrite, this one reads or
overwrites too, and eager PyTorch checks the loss and every gradient after each step.
"""
from __future__ import annotations

import copy

import pytest
import torch

import engine.pipeline as pipeline
from engine.codegen import triton_build
from engine.tools.model_file import load_model_file
from test_cuda_graph_replay import FakeGraph, fake_capture  # the stand-in capture of CudaGraphCall's own tests


def capturable(call):
    """A compiled graph's call that a FakeGraph can record and replay."""
    def run(args: list):
        inputs = list(args)
        outputs = call(args)
        graph = FakeGraph.capturing
        if graph is not None:
            def work():
                for out, new in zip(outputs, call(list(inputs))):
                    if isinstance(out, torch.Tensor):
                        out.data.copy_(new)  # .data: a replay's writes bump no version counter either
            graph.work.append(work)
        return outputs

    run._boxed_call = True
    return run


@pytest.fixture
def fake_reduce_overhead(monkeypatch):
    """compile(..., mode="reduce-overhead") on the CPU, with the stand-in capture; yields the CudaGraphCalls."""
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", fake_capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(pipeline.Options, "__post_init__", lambda self: None)  # reduce-overhead needs cuda there
    made = []

    def graph_call(call, *args, **kwargs):
        made.append(triton_build.CudaGraphCall(capturable(call), *args, **kwargs))
        return made[-1]

    monkeypatch.setattr(pipeline, "CudaGraphCall", graph_call)
    yield made
    torch._dynamo.reset()


def _grads(model):
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _check(model, reference, loss, ref_loss):
    """Loss and every gradient as eager's, each within 1e-4 of its tensor's largest value (float32 sums)."""
    torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-5)
    for name, grad in _grads(reference).items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, rtol=1e-4,
                                   atol=1e-4 * float(grad.abs().max()), msg=lambda m: f"{name}: {m}")


def _pair(sample: str):
    spec = load_model_file(sample)
    model = copy.deepcopy(spec.model).train()
    return model, copy.deepcopy(model), spec.example_inputs


def test_training_steps_replay_and_match_eager(fake_reduce_overhead):
    model, reference, (x,) = _pair("transformer_block")
    compiled = pipeline.compile(model, mode="reduce-overhead")
    for step in range(5):
        xs = x + step  # a new activation each step, as a training loop has
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
        loss = compiled(xs).float().sum()
        loss.backward()
        ref_loss = reference(xs).float().sum()
        ref_loss.backward()
        _check(model, reference, loss, ref_loss)
    forward, backward = fake_reduce_overhead
    assert all(len(c.graphs) == 1 and c.plain_calls == 0 for c in (forward, backward))  # recorded once, replayed
    assert forward.graphs[()]["graph"].replays == backward.graphs[()]["graph"].replays == 4
    # the forward copies only its activation in; the backward reads every saved tensor where the forward's
    # replay left it, and copies only the incoming gradient of the block's one output
    (fw,), (bw,) = forward.graphs.values(), backward.graphs.values()
    assert [tuple(fw["inputs"][i].shape) for i in fw["copied"]] == [tuple(x.shape)]
    assert [tuple(bw["inputs"][i].shape) for i in bw["copied"]] == [tuple(x.shape)]
    saved = [i for i, t in enumerate(bw["inputs"]) if t.data_ptr() in forward.output_pointers]
    assert len(saved) >= 10 and set(saved) <= set(bw["fixed"])


def test_two_forwards_before_one_backward(fake_reduce_overhead):
    """Gradient accumulation: the first forward's saved tensors must survive the second forward."""
    model, reference, (x,) = _pair("transformer_block")
    compiled = pipeline.compile(model, mode="reduce-overhead")
    for step in range(4):
        a, b = x + step, x * 0.5 - step
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
        loss = compiled(a).float().sum() + (compiled(b).float() ** 2).sum()
        loss.backward()
        ref_loss = reference(a).float().sum() + (reference(b).float() ** 2).sum()
        ref_loss.backward()
        _check(model, reference, loss, ref_loss)
    forward, backward = fake_reduce_overhead
    # after the recording step, each step's second forward (the first one's saved tensors still held) and
    # first backward (its gradients held until the second's are added) ran plainly; the others replayed
    assert forward.plain_calls == backward.plain_calls == 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_real_cuda_graphs_train_and_accumulate():
    """The same two loops with torch.cuda's own capture: ordinary steps, then two forwards per backward."""
    model, reference, (x,) = _pair("transformer_block")
    model, reference, x = model.cuda(), reference.cuda(), x.cuda()
    compiled = pipeline.compile(model, backend="triton", device="cuda", mode="reduce-overhead")
    for step in range(8):
        a, b = x + step, x * 0.5 - step
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
        if step < 4:
            loss, ref_loss = compiled(a).float().sum(), reference(a).float().sum()
        else:
            loss = compiled(a).float().sum() + (compiled(b).float() ** 2).sum()
            ref_loss = reference(a).float().sum() + (reference(b).float() ** 2).sum()
        loss.backward()
        ref_loss.backward()
        _check(model, reference, loss.detach(), ref_loss.detach())
    torch._dynamo.reset()
