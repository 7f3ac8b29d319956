"""CudaGraphCall's replay logic (Note [CUDA graph replay], Note [Cheap replay checks]) on the CPU.

torch.cuda's graph capture is replaced by a stand-in that behaves like one for these calls: while a graph is
being captured, the test's compiled call records its work (closures over the tensors it was given) instead
of running it, and replay runs that work again on the very same tensors, as a CUDA graph replays its kernels
on the recorded addresses. The real CUDA path runs in the GPU tests (test_triton.py, `python -m engine bench gpu`).
"""
from __future__ import annotations

import contextlib

import pytest
import torch

from engine.runtime import cuda_graphs
from engine.runtime.cuda_graphs import CudaGraphCall, ReplayPolicy


class FakeGraph:
    capturing = None  # the graph being captured, if any

    def __init__(self):
        self.work = []
        self.replays = 0

    def replay(self):
        self.replays += 1
        for step in self.work:
            step()


@contextlib.contextmanager
def fake_capture(graph):
    FakeGraph.capturing = graph
    try:
        yield
    finally:
        FakeGraph.capturing = None


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", fake_capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)


def affine(args: list):
    """A compiled graph's call: out = x * weight + bias, its output allocated by the call (as a wrapper does)."""
    x, weight, bias = args
    args.clear()
    out = torch.empty_like(x)

    def work():
        torch.add(torch.mul(x, weight), bias, out=out)

    if FakeGraph.capturing is not None:
        FakeGraph.capturing.work.append(work)
    else:
        work()
    return [out]


def test_replays_copy_the_activation_and_read_parameters_in_place(fake_cuda):
    weight, bias = torch.randn(8), torch.randn(8)
    call = CudaGraphCall(affine)
    for step in range(5):
        x = torch.randn(8)
        if step == 3:
            weight.mul_(2)  # a parameter updated in place keeps its address: the replay sees the new value
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
    (entry,) = call.graphs.values()
    assert entry.copied == [0] and entry.fixed == [1, 2]
    assert entry.graph.replays == 4  # calls 2-5: recorded at the second call, which replays once


def test_a_parameter_that_moves_is_recorded_again_and_copied_from_then_on(fake_cuda):
    weight, bias = torch.randn(8), torch.randn(8)
    call = CudaGraphCall(affine)
    for _ in range(3):
        call([torch.randn(8), weight, bias])
    first = call.graphs[()].graph
    weight = torch.randn(8)  # a new tensor: another address
    for _ in range(2):
        x = torch.randn(8)
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
    entry = call.graphs[()]
    assert entry.graph is not first and entry.copied == [0, 1]
    # only the live recording's outputs count as graph memory: the first one's may be handed to a new tensor
    assert call.output_pointers == {out.data_ptr() for out in entry.outputs}


def test_an_activation_that_kept_its_address_by_chance_is_still_copied(fake_cuda):
    """Note [Which inputs a CUDA graph reads in place]: the warm-up and the recording see the activation at one
    address (as an allocator may hand out the same block twice); with the parameters named static it is copied
    all the same, so the next activation, elsewhere, replays the one recording."""
    weight, bias = torch.randn(8), torch.randn(8)
    call = CudaGraphCall(affine, static_inputs=frozenset({1, 2}))
    x = torch.randn(8)
    for step in range(5):
        if step >= 2:
            x = torch.randn(8)  # a new address from here on
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
    (entry,) = call.graphs.values()
    assert entry.copied == [0] and entry.fixed == [1, 2]
    assert entry.graph.replays == 4


def test_without_static_inputs_an_address_kept_through_the_warm_up_counts_as_static(fake_cuda):
    weight, bias, x = torch.randn(8), torch.randn(8), torch.randn(8)
    call = CudaGraphCall(affine)
    for _ in range(2):
        call([x, weight, bias])
    assert call.graphs[()].fixed == [0, 1, 2] and call.graphs[()].copied == []


def test_size_symbols_key_the_recordings(fake_cuda):
    bias = torch.randn(1)
    call = CudaGraphCall(affine, sizes=[(0, 0)])  # the graph's one size symbol: dim 0 of input 0
    for n in (4, 4, 6, 6, 4, 6):
        x, weight = torch.randn(n), torch.randn(n)
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
    assert set(call.graphs) == {(4,), (6,)}


def test_the_python_pointer_check_agrees_with_torchs():
    tensors = [torch.randn(2), 3, torch.randn(2)]
    pointers = [tensors[0].data_ptr(), None, tensors[2].data_ptr()]
    assert cuda_graphs._pointers_equal_python(tensors, pointers, [0, 2])
    assert not cuda_graphs._pointers_equal_python(tensors, [pointers[0], None, 1], [0, 2])
    assert cuda_graphs.pointers_equal(tensors, pointers, [0, 2])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_reduce_overhead_with_dynamic_shapes_replays_each_size():
    import engine

    fn = lambda t, w: torch.relu(t * w + 1).sum(-1)  # noqa: E731
    compiled = engine.compile(fn, backend="triton", device="cuda", mode="reduce-overhead", dynamic=True)
    w = torch.randn(64, device="cuda")
    for rows in (8, 8, 8, 24, 24, 24, 8):
        x = torch.randn(rows, 64, device="cuda")
        torch.testing.assert_close(compiled(x, w).clone(), fn(x, w), atol=1e-5, rtol=1e-5)


def test_max_autotune_replays_cuda_graphs_on_a_gpu_as_inductors_does():
    from engine.runtime.cuda_graphs import replays_cuda_graphs

    assert replays_cuda_graphs("max-autotune", "triton", "cuda")
    assert replays_cuda_graphs("reduce-overhead", "triton", "cuda")
    assert not replays_cuda_graphs("default", "triton", "cuda")
    assert not replays_cuda_graphs("max-autotune", "triton", "cpu")  # the interpreter
    assert not replays_cuda_graphs("max-autotune", "cpp", "cpu")


@pytest.mark.parametrize("replay_ms, plain_ms, replays", [(0.31, 0.29, False), (0.05, 0.40, True),
                                                     (0.3237, 0.3254, False)])
def test_a_timed_graph_keeps_the_faster_of_replay_and_plain_launches(fake_cuda, monkeypatch, replay_ms, plain_ms,
                                                                     replays):
    """Note [Replay or launch, timed]: at the first call that could replay, replays and plain calls are timed
    once; a kernel-bound graph (replays slower: the input copy) launches plainly from then on and drops its
    recording, a launch-bound one keeps replaying, and a tie (the last case, within REPLAY_MARGIN) launches
    plainly. Every call's output is right either way."""
    timed = iter([replay_ms, plain_ms])
    ran = []

    def fake_timer(fn):
        fn()  # the real timer runs the function too: the work must stay right afterwards
        ran.append(fn)
        return next(timed)

    monkeypatch.setattr(cuda_graphs, "device_ms_per_call", fake_timer)
    weight, bias = torch.randn(8), torch.randn(8)
    call = CudaGraphCall(affine, policy=ReplayPolicy(choose_by_timing=True))
    for _ in range(6):
        x = torch.randn(8)
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
    assert len(ran) == 2 and call.choice == {"replay_ms": replay_ms, "plain_ms": plain_ms, "replays": replays}
    if replays:
        assert not call.launch_plainly and next(iter(call.graphs.values())).graph.replays >= 4
    else:
        assert call.launch_plainly and not call.graphs


def test_only_max_autotune_inference_graphs_choose_by_timing(monkeypatch):
    """Note [Replay or launch, timed]: training graphs always replay (their replays hand saved tensors and
    gradients over), and so does reduce-overhead (the user asked for CUDA graphs: the flag needs mode
    max-autotune; a CPU compile refuses reduce-overhead, so only max-autotune is built here)."""
    import engine.pipeline as pipeline

    made = []
    monkeypatch.setattr(pipeline, "replays_cuda_graphs", lambda *where: True)
    monkeypatch.setattr(pipeline, "CudaGraphCall", lambda call, sizes, policy, **kw: made.append(policy) or call)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(4, 8)
    with torch.no_grad():
        pipeline.compile(model, backend="cpp", mode="max-autotune")(x)
    pipeline.compile(model, backend="cpp", mode="max-autotune")(x).sum().backward()
    assert [p.choose_by_timing for p in made] == [True, False, False]  # inference; forward, backward


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_max_autotune_launches_a_kernel_bound_graph_plainly_and_replays_a_launch_bound_one():
    """Note [Replay or launch, timed] with real CUDA graphs: a Linear 2048 x 4096 -> 11008 with SiLU (bf16) is
    bound by its GEMM, so replays only add the copy of its input; 16 dependent tiny GEMMs with a tanh are bound
    by their launches. Outputs match eager both ways."""
    import engine

    torch._dynamo.reset()
    before = set(cuda_graphs._recorders)
    linear = torch.nn.Linear(4096, 11008, bias=False).cuda().to(torch.bfloat16)
    gemm = engine.compile(lambda x: torch.nn.functional.silu(linear(x)), backend="triton", device="cuda",
                          mode="max-autotune")
    with torch.no_grad():
        for _ in range(4):  # a new activation each call: its replay copies it (Note [Inputs that come back])
            x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
            torch.testing.assert_close(gemm(x), torch.nn.functional.silu(linear(x)), atol=2e-2, rtol=2e-2)

    after_gemm = set(cuda_graphs._recorders)
    w = torch.randn(64, 64, device="cuda") / 8

    def chain(t):
        for _ in range(16):
            t = torch.tanh(t @ w)  # a GEMM between each: 16 launches at least, microseconds of work each
        return t

    small = torch.randn(64, 64, device="cuda")
    tiny = engine.compile(chain, backend="triton", device="cuda", mode="max-autotune")
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(tiny(small), chain(small), atol=1e-3, rtol=1e-3)
    # told apart by when they were made, not by time: 16 launches of the chain can take longer plainly than
    # the GEMM (H100: 0.61 against 0.28 ms)
    gemm_choices = [r.choice for r in after_gemm if r not in before]
    chain_choices = [r.choice for r in cuda_graphs._recorders if r not in after_gemm]
    assert len(gemm_choices) == len(chain_choices) == 1, (gemm_choices, chain_choices)
    assert all(c is not None for c in gemm_choices + chain_choices), (gemm_choices, chain_choices)
    assert not gemm_choices[0]["replays"] and chain_choices[0]["replays"], (gemm_choices, chain_choices)


def test_large_inputs_are_refilled_one_by_one_and_small_ones_together(fake_cuda, monkeypatch):
    """Note [Refilling inputs]: a copied input of LARGE_COPY_BYTES or more gets its own copy_, the rest share
    one foreach copy; either way every replay computes with the new call's values."""
    monkeypatch.setattr(cuda_graphs, "LARGE_COPY_BYTES", 64 * 4)  # 64 float32 elements and up are large
    foreach_calls = []
    real_foreach = torch._foreach_copy_
    monkeypatch.setattr(torch, "_foreach_copy_", lambda dst, src: (foreach_calls.append(len(dst)),
                                                                    real_foreach(dst, src)))
    bias = torch.randn(64)
    call = CudaGraphCall(affine, static_inputs=frozenset({2}))
    for step in range(4):
        x, weight = torch.randn(64), torch.randn(1)  # x is large, the broadcast weight small
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
    (entry,) = call.graphs.values()
    assert entry.copied == [0, 1] and entry.fixed == [2]
    assert [i for _, i in entry.large] == [0] and entry.small[1] == [1]
    assert foreach_calls == [1, 1]  # the two replays' small copy, one tensor each


def test_an_inference_graph_called_with_the_same_tensors_reads_them_in_place(fake_cuda, monkeypatch):
    """Note [Inputs that come back]: the same activation at every call (a benchmark or serving loop) is read where
    it is, with no refill; values written into it between calls are seen by the next replay."""
    copies = []
    monkeypatch.setattr(cuda_graphs, "refill", lambda entry, args: copies.append(entry.copied))
    weight, bias, x = torch.randn(8), torch.randn(8), torch.randn(8)
    call = CudaGraphCall(affine, static_inputs=frozenset({1, 2}), policy=ReplayPolicy(guess_in_place=True))
    for step in range(5):
        x.mul_(1.5)  # new values at the same address
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
    (entry,) = call.graphs.values()
    assert entry.guessed and entry.fixed == [0, 1, 2] and entry.copied == []
    assert entry.graph.replays == 4 and copies == [[]] * 3  # replays 3-5 refill nothing


@pytest.mark.parametrize("replay_ms, plain_ms, replays", [(0.0330, 0.0328, True), (0.040, 0.030, False)])
def test_a_copy_free_replay_takes_a_tie(fake_cuda, monkeypatch, replay_ms, plain_ms, replays):
    """Note [Replay or launch, timed]: with nothing to copy, a replay runs the plain call's kernels with less host
    work, so it replays unless it times REPLAY_MARGIN slower."""
    timed = iter([replay_ms, plain_ms])
    monkeypatch.setattr(cuda_graphs, "device_ms_per_call", lambda fn: (fn(), next(timed))[1])
    weight, bias, x = torch.randn(8), torch.randn(8), torch.randn(8)
    call = CudaGraphCall(affine, static_inputs=frozenset({1, 2}),
                         policy=ReplayPolicy(guess_in_place=True, choose_by_timing=True))
    for _ in range(4):
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
    assert call.choice["replays"] is replays and call.launch_plainly is not replays


def test_the_guess_ends_at_the_first_input_that_moves(fake_cuda):
    """Note [Inputs that come back]: an activation that kept its address through the warm-up and then moves drops
    the in-place recording for good; the graph records again copying it, and every output stays right."""
    weight, bias = torch.randn(8), torch.randn(8)
    call = CudaGraphCall(affine, static_inputs=frozenset({1, 2}), policy=ReplayPolicy(guess_in_place=True))
    x = torch.randn(8)
    guessed = None
    for step in range(7):
        if step >= 3:
            x = torch.randn(8)  # a new tensor each call from here on, wherever the allocator puts it
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
        if step == 2:
            guessed = call.graphs[()]
            assert guessed.guessed and guessed.copied == []
    (entry,) = call.graphs.values()
    assert entry is not guessed and not entry.guessed and not call.guess_in_place
    assert entry.copied == [0] and entry.fixed == [1, 2]
    assert guessed.graph.replays == 2 and entry.graph.replays == 4  # recorded at step 3, replayed 4-6


def test_a_timed_choice_is_timed_again_when_the_guess_ends(fake_cuda, monkeypatch):
    timed = iter([0.05, 0.40, 0.05, 0.40])
    monkeypatch.setattr(cuda_graphs, "device_ms_per_call", lambda fn: (fn(), next(timed))[1])
    weight, bias, x = torch.randn(8), torch.randn(8), torch.randn(8)
    call = CudaGraphCall(affine, static_inputs=frozenset({1, 2}),
                         policy=ReplayPolicy(guess_in_place=True, choose_by_timing=True))
    for step in range(6):
        if step == 4:
            x = torch.randn(8)
        (out,) = call([x, weight, bias])
        torch.testing.assert_close(out, x * weight + bias)
    assert call.choice == {"replay_ms": 0.05, "plain_ms": 0.40, "replays": True}
    assert next(timed, None) is None  # timed twice: on the guessed recording and on the copying one


def test_one_replay_policy_per_phase():
    """What each phase's CUDA graph does is chosen once (replay_policy): inference graphs guess that their inputs
    come back and, in max-autotune, time replay against launch; training graphs keep live outputs, and a
    backward hands its gradients over."""
    from engine.runtime.cuda_graphs import replay_policy

    assert replay_policy("inference", "reduce-overhead") == ReplayPolicy(guess_in_place=True)
    assert replay_policy("inference", "max-autotune") == ReplayPolicy(guess_in_place=True, choose_by_timing=True)
    assert replay_policy("forward", "max-autotune") == ReplayPolicy(keep_live_outputs=True)
    assert replay_policy("backward", "reduce-overhead") == ReplayPolicy(keep_live_outputs=True,
                                                                        hand_over_outputs=True)


def test_a_graph_run_at_two_call_sites_keeps_a_recording_for_each(fake_cuda, monkeypatch):
    """Note [Call sites]: one compiled graph run for two layers reads each layer's input from another recording's
    output, at two addresses; it records once per layer and then replays, where it used to record every call."""
    recordings = []
    record = CudaGraphCall._record
    monkeypatch.setattr(CudaGraphCall, "_record", lambda self, *a: recordings.append(self) or record(self, *a))
    x = torch.randn(8)
    weights = [(torch.randn(8), torch.randn(8)) for _ in range(4)]
    first = [CudaGraphCall(affine), CudaGraphCall(affine)]  # each layer's first graph
    # the graph after the break, the same code in both layers, recorded after the first graphs were
    second = CudaGraphCall(affine, warmup_calls=4)
    for step in range(6):
        for layer in range(2):
            (hidden,) = first[layer]([x, *weights[layer]])
            (out,) = second([hidden, *weights[2]])
            torch.testing.assert_close(out, (x * weights[layer][0] + weights[layer][1]) * weights[2][0]
                                       + weights[2][1])
    assert recordings.count(second) == 2 and len(second.graphs) == 2 and second.plain_calls == 0
    assert all(entry.graph.replays >= 3 for entry in second.graphs.values())
