"""Adding scatters as atomic adds (Note [Accumulating stores] in engine/ir/nodes.py, Note [Search or atomic add]
in engine/lowering/scatters.py, Note [Embedding backward as an atomic add] in engine/lowering/backward.py):
scatter_add, index_put(accumulate=True) and an embedding's weight gradient loop over their entries and add each
at its place; through the IR evaluator, the C++ backend and the Triton interpreter they match eager, with ids
repeated, negative (index_put), out of range (ignored) and padding_idx; small ones stay a search; no reader of
an accumulated buffer shares its kernel; the Triton kernel compiles for an H200 (sm_90)."""
import pytest
import torch
from torch import nn

import engine
from engine.tools import assembly
from engine.ir.evaluator import evaluate_graph
from engine.lowering.scatters import MAX_SCATTER_SEARCH, SEARCH_WORK_LIMIT
from tests.lowered_graphs import lowered

BACKENDS = ["cpp", "triton"]


def _scatter_add(x, index, src):
    return x.scatter_add(0, index, src)


def _large_scatter_add(dtype=torch.float32):
    """More entries than the search is generated for (MAX_SCATTER_SEARCH), each row id hit many times."""
    torch.manual_seed(0)
    entries = MAX_SCATTER_SEARCH + 4464
    x = torch.randn(64, 3).to(dtype)
    index = torch.randint(0, 64, (entries, 3))
    src = torch.randn(entries, 3).to(dtype)
    return x, index, src


def _kinds(graph) -> list[str]:
    return [node.kind for node in graph.nodes]


def _evaluate(graph, inputs) -> list:
    """The IR evaluator's outputs. Dynamo orders a graph's inputs as it meets them, so each input buffer takes
    the one argument of its shape and dtype (the tests' arguments differ in shape)."""
    ordered = [None] * len(graph.inputs)
    for buf in graph.inputs:
        if buf is not None:
            size = tuple(int(s) for s in buf.size)
            (ordered[buf.position],) = [t for t in inputs if tuple(t.shape) == size and t.dtype == buf.dtype]
    return evaluate_graph(graph, ordered)


def test_large_scatter_add_is_an_atomic_add_in_the_evaluator():
    x, index, src = _large_scatter_add()
    graph = lowered(_scatter_add, x, index, src)
    assert "scatter" in _kinds(graph) and "reduction" not in _kinds(graph), _kinds(graph)
    (out,) = _evaluate(graph, [x, index, src])
    torch.testing.assert_close(out, _scatter_add(x, index, src), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_scatter_add_matches_eager(backend):
    x, index, src = _large_scatter_add()
    compiled = engine.compile(_scatter_add, backend=backend)
    torch.testing.assert_close(compiled(x, index, src), _scatter_add(x, index, src), atol=1e-4, rtol=1e-4)


def test_scatter_reduce_sum_and_scatter_add_of_other_dims():
    """scatter_reduce "sum" with self included, along a dim that is not the first, with src larger than index
    (only index's part of it is read)."""
    torch.manual_seed(1)
    x = torch.randn(5, 300)
    index = torch.randint(0, 300, (4, 5000))
    src = torch.randn(5, 5001)

    def fn(x, index, src):
        return x.scatter_reduce(1, index, src, "sum"), x.scatter_add(1, index, src)

    graph = lowered(fn, x, index, src)
    assert _kinds(graph).count("scatter") == 2, _kinds(graph)
    for out, expected in zip(_evaluate(graph, [x, index, src]), fn(x, index, src)):
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    for backend in BACKENDS:
        for out, expected in zip(engine.compile(fn, backend=backend)(x, index, src), fn(x, index, src)):
            torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def _index_put(x, rows, cols, values):
    return torch.index_put(x, (rows, cols), values, accumulate=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_index_put_accumulate_with_negative_and_repeated_ids(dtype):
    """Two index tensors (broadcast against each other), negative ids counting from the end, ids repeated:
    the sums are eager's. Half types add in float32 and round once (eager adds in the half type, rounding at
    each add: the tolerance covers that)."""
    torch.manual_seed(2)
    x = (torch.randn(40, 30, 2) * 4).to(dtype)
    rows = torch.randint(-40, 40, (3000, 1))
    cols = torch.randint(-30, 30, (1, 7))
    values = (torch.randn(3000, 7, 2) * 4).to(dtype)
    exact = _index_put(x.double(), rows, cols, values.double())
    tolerance = {"atol": 0.5, "rtol": 2e-2} if dtype in (torch.bfloat16, torch.float16) else {"atol": 1e-4, "rtol": 1e-4}
    graph = lowered(_index_put, x, rows, cols, values)
    assert "scatter" in _kinds(graph), _kinds(graph)
    (out,) = _evaluate(graph, [x, rows, cols, values])
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), exact, **tolerance)
    for backend in BACKENDS:
        out = engine.compile(_index_put, backend=backend)(x, rows, cols, values)
        torch.testing.assert_close(out.double(), exact, **tolerance)


def test_small_adding_scatters_stay_a_search():
    """Note [Search or atomic add]: a few entries into a few elements are a search (deterministic, fused into
    its reader), not a zero fill, an atomic kernel and an add."""
    x, rows, values = torch.randn(8, 3), torch.tensor([-1, 2, -1]), torch.randn(3, 3)
    graph = lowered(lambda t, i, v: torch.index_put(t, (i,), v, accumulate=True).relu(), x, rows, values)
    assert "scatter" not in _kinds(graph) and "reduction" in _kinds(graph), _kinds(graph)
    assert 8 * 3 * 3 <= SEARCH_WORK_LIMIT


def test_deterministic_algorithms_keep_the_search():
    torch.manual_seed(3)
    x, index, src = torch.randn(64, 3), torch.randint(0, 64, (20000, 3)), torch.randn(20000, 3)
    assert "scatter" in _kinds(lowered(_scatter_add, x, index, src))
    torch.use_deterministic_algorithms(True)
    try:
        torch._dynamo.reset()
        graph = lowered(_scatter_add, x, index, src)
    finally:
        torch.use_deterministic_algorithms(False)
    assert "scatter" not in _kinds(graph), _kinds(graph)
    (out,) = _evaluate(graph, [x, index, src])
    torch.testing.assert_close(out, _scatter_add(x, index, src), atol=1e-4, rtol=1e-4)


def test_out_of_range_ids_are_ignored():
    """Eager raises on an id outside the output (on the CPU); the atomic add, like the search, ignores it: it
    is masked off, so no address outside the buffer is written. The result is eager's without those entries."""
    x, index, src = _large_scatter_add()
    index[::7, 0] = 64 + torch.arange(len(index[::7])) % 5  # past the end
    index[3::11, 2] = -1 - torch.arange(len(index[3::11])) % 3  # scatter does not wrap negative ids
    inside = (index >= 0) & (index < 64)
    expected = _scatter_add(x, torch.where(inside, index, 0), torch.where(inside, src, 0))
    graph = lowered(_scatter_add, x, index.clamp(0, 63), src)  # capture runs eagerly once: in-range ids
    (out,) = _evaluate(graph, [x, index, src])
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
    for backend in BACKENDS:
        torch.testing.assert_close(engine.compile(_scatter_add, backend=backend)(x, index, src), expected,
                                   atol=1e-4, rtol=1e-4)


def _decision_rules(exploration) -> list[dict]:
    return [d for g in exploration.graphs for d in g.fusion.decisions]


@pytest.mark.parametrize("backend", BACKENDS)
def test_readers_stay_out_and_producers_come_in(backend):
    """The values' elementwise producer is computed inside the atomic kernel; the reader of the accumulated
    buffer (the add of self, then relu) is a kernel of its own (accumulating_store)."""
    x, index, src = _large_scatter_add()

    def fn(x, index, src):
        return x.scatter_add(0, index, src.sin() * 2).relu()

    exploration = engine.explore(fn, (x, index, src), backend=backend)
    assert exploration.verify.ok, exploration.verify
    graph = exploration.graphs[0]
    scatter = {n.name for n in graph.ir.nodes if n.kind == "scatter"}
    assert len(scatter) == 1, graph.ir.nodes
    (atomic,) = [k for k in graph.kernels if scatter & set(k.ir_nodes)]
    assert {"aten::sin", "aten::mul.Tensor"} <= set(atomic.ops), atomic.ops
    assert "atomic add" in atomic.tiling.reason
    assert not set(atomic.ops) & {"aten::relu", "aten::add.Tensor"}, atomic.ops
    refused = [d for d in _decision_rules(exploration) if d.rule == "accumulating_store"]
    assert refused and not any(d.fused for d in refused), refused
    source = graph.code.source
    assert ("tl.atomic_add" in source) if backend == "triton" else (" += " in source)
    assert ".zero_()" in graph.code.wrapper


# --- the embedding's weight gradient ------------------------------------------------------------------------


def _embedding_model(dtype, padding_idx):
    torch.manual_seed(5)
    return nn.Sequential(nn.Embedding(50, 16, padding_idx=padding_idx), nn.Linear(16, 4)).to(dtype)


def _backward(exploration):
    return next(g for g in exploration.graphs if g.phase == "backward")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("padding_idx", [None, 1])
def test_embedding_gradient_matches_eager(backend, dtype, padding_idx):
    """Repeated ids add up, padding tokens add nothing (their row's gradient stays 0), in every dtype."""
    model = _embedding_model(dtype, padding_idx)
    ids = torch.tensor([[1, 7, 7, 49, 1, 0], [0, 1, 1, 1, 7, 3]])
    exploration = engine.explore(model, (ids,), backend=backend, train=True)
    verify = exploration.verify
    assert verify.ok, [e for e in [verify.loss, *verify.gradients] if not e.ok]
    assert any(e.name == "param:0.weight" and e.ok for e in verify.gradients), verify.gradients
    backward = _backward(exploration)
    kinds = {n.name: n.kind for n in backward.ir.nodes}
    kernels = [k for k in backward.kernels if "aten::embedding_dense_backward" in k.ops]
    assert kernels and all(k.kind == "pointwise" for k in kernels), kernels
    assert any(kinds[n] == "scatter" for k in kernels for n in k.ir_nodes)
    assert not [k for k in backward.kernels if k.kind in ("extern", "fallback")
                and "aten::embedding_dense_backward" in k.ops]


def test_embedding_gradient_with_padding_through_the_evaluator():
    """The IR itself (before any code generation) gives eager's gradient, padding row zero."""
    torch.manual_seed(6)
    grad = torch.randn(3, 5, 8)
    ids = torch.tensor([[2, 2, 0, 9, 2], [0, 0, 1, 9, 3], [4, 4, 4, 4, 2]])

    def fn(grad, ids):
        return torch.ops.aten.embedding_dense_backward(grad, ids, 10, 2, False)

    graph = lowered(fn, grad, ids)
    assert _kinds(graph) == ["scatter"], _kinds(graph)
    (out,) = _evaluate(graph, [grad, ids])
    torch.testing.assert_close(out, fn(grad, ids))
    assert not out[2].any()


def test_scale_grad_by_freq_stays_a_library_call():
    model = nn.Embedding(20, 4, scale_grad_by_freq=True)
    exploration = engine.explore(model, (torch.tensor([[1, 1, 3], [5, 1, 3]]),), backend="cpp", train=True)
    assert exploration.verify.ok
    backward = _backward(exploration)
    assert any(k.kind == "extern" and "aten::embedding_dense_backward" in k.ops for k in backward.kernels)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_decoder_training_generates_the_embedding_gradient(backend):
    """A LLaMA-style decoder (gpt_decoder sample) trains like eager with its embedding's weight gradient a
    generated atomic-add kernel: no library call left for it in the backward."""
    from engine.tools.model_file import load_model_file
    spec = load_model_file("gpt_decoder")
    exploration = engine.explore(spec.model.train(), spec.example_inputs, backend=backend, train=True,
                                 name="gpt_decoder", tolerance=spec.tolerance)
    verify = exploration.verify
    assert verify.ok, [e for e in [verify.loss, *verify.gradients] if not e.ok]
    assert any("embed" in e.name and e.ok for e in verify.gradients), verify.gradients
    backward = _backward(exploration)
    embedding = [k for k in backward.kernels if "aten::embedding_dense_backward" in k.ops]
    assert embedding and all(k.kind == "pointwise" for k in embedding), embedding
    assert any("atomic add" in k.tiling.reason for k in embedding)


def test_atomic_kernel_compiles_for_sm90():
    """The generated atomic-add kernel compiles to PTX and SASS for an H200 (sm_90) without a GPU."""
    if not assembly.ptxas_available():
        pytest.skip("ptxas is not in this Triton wheel (triton/backends/nvidia/bin) nor on PATH")
    torch.manual_seed(4)
    weight, ids = torch.randn(512, 64, dtype=torch.bfloat16), torch.randint(0, 512, (4, 256))

    def fn(weight, ids):
        return nn.functional.embedding(ids, weight).float().square().sum()

    weight.requires_grad_(True)
    exploration = engine.explore(fn, (weight, ids), backend="triton", train=True)
    assert exploration.verify.ok, exploration.verify
    backward = next(g for g in exploration.graphs if g.phase == "backward")
    (atomic,) = [k for k in backward.kernels if "aten::embedding_dense_backward" in k.ops and
                 "atomic" in k.tiling.reason]
    config = atomic.triton.gpu_config
    asm = assembly.kernel_assembly(backward.code.source, atomic.name, atomic.triton.signature,
                                   {"XBLOCK": config["XBLOCK"]}, config["num_warps"])
    assert not asm.get("error"), asm.get("error")
    adds = [line for line in asm["ptx"].splitlines() if ".add." in line and ("red." in line or "atom." in line)]
    assert ".target sm_90" in asm["ptx"] and adds, asm["ptx"][:2000]  # red.global.gpu.relaxed.add.v4.f32


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_embedding_gradient_on_the_gpu():
    """On a GPU, at the H200 bench's Llama sizes (vocab 8192 x 1024, 4096 tokens, bf16, with padding tokens),
    the weight gradient is the atomic-add kernel, no library call, and eager's."""
    torch.manual_seed(7)
    model = nn.Embedding(8192, 1024, padding_idx=3).cuda().to(torch.bfloat16)
    ids = torch.randint(0, 8192, (4, 1024), device="cuda")
    ids[:, ::5] = 3
    exploration = engine.explore(model, (ids,), backend="triton", device="cuda", train=True)
    verify = exploration.verify
    assert verify.ok, [e for e in [verify.loss, *verify.gradients] if not e.ok]
    backward = _backward(exploration)
    kernels = [k for k in backward.kernels if "aten::embedding_dense_backward" in k.ops]
    assert kernels and all(k.kind == "pointwise" for k in kernels), kernels
    assert any("atomic add" in k.tiling.reason for k in kernels)
    assert "tl.atomic_add" in backward.code.source
