"""Training under mode="reduce-overhead" (Note [Training under CUDA graphs] in runtime/cuda_graphs.py), on the CPU.

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
from engine.runtime import cuda_graphs
from engine.tools.model_file import load_model_file
from test_cuda_graph_replay import FakeGraph, fake_capture, fake_cuda  # noqa: F401 - the stand-in capture of CudaGraphCall's own tests


REPLAY = "stand-in replay"  # the profiler's name for a replay's work (its copies are the graph's, not the step's)


def capturable(call):
    """A compiled graph's call that a FakeGraph can record and replay."""
    def run(args: list):
        inputs = list(args)
        outputs = call(args)
        graph = FakeGraph.capturing
        if graph is not None:
            def work():
                with torch.profiler.record_function(REPLAY):  # what a real replay does on the device
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
    checked = pipeline.Options.__post_init__

    def as_if_on_cuda(self):  # reduce-overhead needs device="cuda" there; every other check and default stays
        device = self.device
        object.__setattr__(self, "device", "cuda")
        try:
            checked(self)
        finally:
            object.__setattr__(self, "device", device)
    monkeypatch.setattr(pipeline.Options, "__post_init__", as_if_on_cuda)
    made = []

    def graph_call(call, *args, **kwargs):
        made.append(cuda_graphs.CudaGraphCall(capturable(call), *args, **kwargs))
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


def _fresh(x, seed: int):
    """Another activation like x. Not x + c: the block's layernorms make its gradients blind to a shift."""
    return torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))


def test_training_steps_replay_and_match_eager(fake_reduce_overhead):
    model, reference, (x,) = _pair("transformer_block")
    compiled = pipeline.compile(model, mode="reduce-overhead")
    for step in range(5):
        xs = _fresh(x, step)  # a new activation each step, as a training loop has
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
        loss = compiled(xs).float().sum()
        loss.backward()
        ref_loss = reference(xs).float().sum()
        ref_loss.backward()
        _check(model, reference, loss, ref_loss)
    forward, backward = fake_reduce_overhead
    assert all(len(c.graphs) == 1 and c.plain_calls == 0 for c in (forward, backward))  # recorded once, replayed
    assert forward.graphs[()].graph.replays == backward.graphs[()].graph.replays == 4
    # the forward copies only its activation in; the backward reads every saved tensor where the forward's
    # replay left it, and copies only the incoming gradient of the block's one output
    (fw,), (bw,) = forward.graphs.values(), backward.graphs.values()
    assert [tuple(fw.inputs[i].shape) for i in fw.copied] == [tuple(x.shape)]
    assert [tuple(bw.inputs[i].shape) for i in bw.copied] == [tuple(x.shape)]
    saved = [i for i, t in enumerate(bw.inputs) if t.data_ptr() in forward.output_pointers]
    assert len(saved) >= 10 and set(saved) <= set(bw.fixed)


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
    # after the recording step, each step's second forward (the first one's saved tensors still held) ran
    # plainly; so did one backward a step (the other's gradients held until both are added), except that the
    # first such call also gave the backward's recording up (Note [Gradients a replay hands over]) and the
    # next step recorded it again: a warm-up call and a recording instead of a plain call and a replay
    assert forward.plain_calls == 3 and backward.plain_calls == 2
    assert not backward.hand_over_outputs and len(backward.graphs) == 1


def test_backward_hands_its_gradients_over(fake_reduce_overhead):
    """Note [Gradients a replay hands over]: each parameter's .grad is the backward recording's own output, not
    AccumulateGrad's clone of it, and the next step's replay (grads cleared first) still matches eager."""
    from engine.tools import train_profile
    from engine.tools.train_bench import step

    model, reference, (x,) = _pair("transformer_block")
    compiled = pipeline.compile(model, mode="reduce-overhead")
    for _ in range(3):
        loss = step(compiled, model, (x,))
    _, backward = fake_reduce_overhead
    assert all(p.grad.data_ptr() in backward.output_pointers for p in model.parameters())
    profile = train_profile.profile_step(lambda: step(compiled, model, (x,)), device="cpu", steps=2, warmup=0)
    assert not [r for r in profile["copies"] if "AccumulateGrad" in r["caller"]]
    recordings = train_profile.recordings(fake_reduce_overhead)  # as the profile's summary lists them
    assert sorted((r["copied"], r["hands_over"]) for r in recordings) == [([list(x.shape)], False),
                                                                         ([list(x.shape)], True)]
    ref_loss = step(reference, reference, (x,))
    _check(model, reference, step(compiled, model, (x,)), ref_loss)
    assert backward.plain_calls == 0 and backward.graphs[()].graph.replays == 5  # all but the warm-up


def _saved_storages(fn, model, x) -> dict[int, int]:
    """Storage address -> bytes of every tensor autograd saves in one forward of fn, the model's parameters
    left out (each model has its own: their addresses say nothing across two models)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    model.zero_grad(set_to_none=True)  # as a step does: a replayed backward's last gradients are free again
    saved: dict[int, int] = {}

    def pack(tensor):
        if tensor.untyped_storage().data_ptr() not in params:
            saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = fn(x).float().sum()
    loss.backward()
    return saved


def test_a_replayed_step_does_only_what_cuda_graph_trees_do(fake_reduce_overhead, monkeypatch):
    """Note [What a replayed training step does]: outside its two replays a step copies the activation into
    the forward's recording and the incoming gradient into the backward's, one foreach copy each, and does
    nothing else: no parameter copied, no gradient cloned, no sync, no second recording. The forward saves
    what the default mode's forward saves, but reads (and so saves) its static copy of the activation
    instead of the caller's tensor: that copy is the whole difference between the two modes' saved bytes
    (the +16 MiB of `bench train`'s transformer block on the H200, Inductor's as ours)."""
    from engine.tools import train_profile
    from engine.tools.train_bench import step

    model, reference, (x,) = _pair("transformer_block")
    plain = copy.deepcopy(model)
    compiled, default = pipeline.compile(model, mode="reduce-overhead"), pipeline.compile(plain)
    for _ in range(3):  # a warm-up call, the recording, a replay
        step(compiled, model, (x,))
        step(default, plain, (x,))
    forward, backward = fake_reduce_overhead
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: syncs.append(a))
    profile = train_profile.profile_step(lambda: step(compiled, model, (x,)), device="cpu", steps=2, warmup=0)
    compiled_side = [(r["caller"], r["op"], r["shape"], r["per_step"]) for r in profile["copies"]
                     if r["caller"] != REPLAY and r["caller"] != "(top level)"]  # top level: the loss's own
    copy_in = [("aten::_foreach_copy_", "", 1.0), ("aten::copy_ in aten::_foreach_copy_", str(list(x.shape)), 1.0)]
    # and AOTAutograd's own copy: in float32 .float() is the identity, so the loss's gradient reaches the block
    # as an expand (strides 0), which AOTAutograd makes contiguous before any compiler sees it (in bf16 the
    # loss's ToCopyBackward hands over a dense gradient and there is no such copy; Inductor gets the same)
    contiguous_tangent = ("CompiledFunctionBackward", "aten::copy_", str(list(x.shape)), 1.0)
    assert sorted(compiled_side) == sorted([("CompiledFunction", *c) for c in copy_in] +
                                           [("CompiledFunctionBackward", *c) for c in copy_in] + [contiguous_tangent])
    assert not syncs and [len(c.graphs) for c in (forward, backward)] == [1, 1]
    assert forward.plain_calls == backward.plain_calls == 0
    assert forward.graphs[()].graph.replays == backward.graphs[()].graph.replays == 4

    ours, default_saved = _saved_storages(compiled, model, x), _saved_storages(default, plain, x)
    (static,) = forward.graphs[()].statics
    # the default forward saves the caller's tensor (the bench leaves inputs out: alive anyway), the replayed
    # one its static copy of it, which the bench counts; the rest is the same set
    assert x.untyped_storage().data_ptr() not in ours and default_saved.pop(x.untyped_storage().data_ptr())
    assert ours.pop(static.untyped_storage().data_ptr()) == x.nbytes
    assert sorted(ours.values()) == sorted(default_saved.values()) and len(ours) >= 8
    ref_loss = step(reference, reference, (x,))
    _check(model, reference, step(compiled, model, (x,)), ref_loss)


def test_gradient_accumulation_over_micro_batches(fake_reduce_overhead):
    """Gradients cleared, then two backwards add up into them (micro-batches): once the gradients are the
    recording's own outputs, the second backward finds a .grad holding one, runs plainly, gives the recording
    up (the .grad keeps it) and records again later without handing over. Every sum matches eager's."""
    model, reference, (x,) = _pair("transformer_block")
    compiled = pipeline.compile(model, mode="reduce-overhead")
    for step in range(5):
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
        for micro in range(2):
            xs = _fresh(x, 2 * step + micro)
            compiled(xs).float().sum().backward()
            reference(xs).float().sum().backward()
        _check(model, reference, torch.zeros(()), torch.zeros(()))
    _, backward = fake_reduce_overhead
    assert not backward.hand_over_outputs and backward.plain_calls == 1
    assert backward.graphs[()].graph.replays == 5  # recorded again in step 2 (its run counts), replayed after


def test_a_kept_alias_of_a_handed_over_output_stops_the_replay(fake_cuda):
    """Note [Gradients a replay hands over], by hand: a graph returning one tensor as two outputs; an alias of
    it kept (as .grad keeps one) makes the next call run plainly and give the recording up, the alias intact."""
    def double(args: list):
        (x,) = args
        args.clear()
        out = torch.empty_like(x)

        def work():
            torch.mul(x, 2, out=out)

        if FakeGraph.capturing is not None:
            FakeGraph.capturing.work.append(work)
        else:
            work()
        return [out, out]

    double._boxed_call = True
    call = cuda_graphs.CudaGraphCall(double, static_inputs=frozenset(),
                                     policy=cuda_graphs.ReplayPolicy(keep_live_outputs=True, hand_over_outputs=True))
    x = torch.randn(8)
    for _ in range(3):  # warm-up, recording, replay
        first, second = call([x])
        assert first is second and torch.equal(first, x * 2)
    kept = first.detach()
    del first, second
    y = torch.randn(8)
    first, _ = call([y])
    assert call.plain_calls == 1 and not call.graphs and not call.hand_over_outputs
    assert torch.equal(kept, x * 2) and torch.equal(first, y * 2)


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


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_real_replayed_step_does_only_what_cuda_graph_trees_do():
    """Note [What a replayed training step does] with torch.cuda's own capture, in bf16 as the H200 bench: per
    step two graph launches and, outside them, one foreach copy a graph (the activation, the incoming gradient),
    no copy under AccumulateGrad, no capture, no sync of the step's own; the saved set is the default mode's
    plus the forward's static copy of the activation; gradients as eager's within bf16's tolerance."""
    from engine.tools import train_profile
    from engine.tools.train_bench import step

    block = type(load_model_file("transformer_block").model)
    torch.manual_seed(0)
    model = block(256, 4).cuda().to(torch.bfloat16).train()
    plain, reference = copy.deepcopy(model), copy.deepcopy(model)
    x = torch.randn(4, 128, 256, device="cuda", dtype=torch.bfloat16)
    before = set(cuda_graphs._recorders)
    compiled = pipeline.compile(model, backend="triton", device="cuda", mode="reduce-overhead")
    default = pipeline.compile(plain, backend="triton", device="cuda")
    for _ in range(3):  # a warm-up call, the recording, a replay
        step(compiled, model, (x,))
        step(default, plain, (x,))
    steps = 4
    profile = train_profile.profile_step(lambda: step(compiled, model, (x,)), device="cuda", steps=steps, warmup=1)
    # the compiled step's own copies and AccumulateGrad's (the loss's .float() and its backward are eager's)
    rows = [r for r in profile["copies"]
            if r["caller"] in ("CompiledFunction", "CompiledFunctionBackward") or "AccumulateGrad" in r["caller"]]
    assert sorted((r["caller"], r["op"], r["per_step"]) for r in rows if "in aten::_foreach" not in r["op"]) == [
        ("CompiledFunction", "aten::_foreach_copy_", 1.0), ("CompiledFunctionBackward", "aten::_foreach_copy_", 1.0)]
    host = profile["host_events_per_step"]
    assert host.get("cudaGraphLaunch") == 2 and not host.get("cudaStreamBeginCapture")
    # the profiler's own syncs (Kineto's start and stop, profile_step's last): those of profiling an empty step
    idle = train_profile.profile_step(lambda: None, device="cuda", steps=steps, warmup=0)["host_events_per_step"]
    syncs = host.get("cudaDeviceSynchronize", 0)
    assert not host.get("cudaGraphInstantiate") and syncs <= idle.get("cudaDeviceSynchronize", 0), (syncs, idle)
    recorders = [r for r in cuda_graphs._recorders if r not in before]
    assert len(recorders) == 2 and all(len(r.graphs) == 1 and r.plain_calls == 0 for r in recorders)
    (forward,) = [r for r in recorders if not r.hand_over_outputs]  # the backward hands its gradients over

    ours, default_saved = _saved_storages(compiled, model, x), _saved_storages(default, plain, x)
    (static,) = forward.graphs[()].statics
    assert default_saved.pop(x.untyped_storage().data_ptr()) and ours.pop(static.untyped_storage().data_ptr())
    assert sorted(ours.values()) == sorted(default_saved.values())
    for m in (model, reference):
        m.zero_grad(set_to_none=True)
    loss, ref_loss = compiled(x).float().sum(), reference(x).float().sum()
    loss.backward()
    ref_loss.backward()
    torch.testing.assert_close(loss.detach(), ref_loss.detach(), rtol=2e-2, atol=1e-1)
    for name, grad in {n: p.grad for n, p in reference.named_parameters()}.items():
        ours_grad = dict(model.named_parameters())[name].grad
        assert float((ours_grad.float() - grad.float()).abs().max()) <= 5e-2 * float(grad.float().abs().max()), name
    torch._dynamo.reset()
