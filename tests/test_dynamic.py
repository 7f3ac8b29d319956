"""Dynamic shapes: size symbols in the IR, guards and kernels; one compile serving many sizes; recompiles."""
import re

import pytest
import sympy
import torch
from torch import nn

import engine
from engine.codegen.triton.printer import triton_index
from engine.ir.indexing import FloorDiv, ModIndex, c_index, loop_var, py_index, size_symbol
from engine.tools.model_file import load_model_file
from engine.pipeline import compile_reference
from engine.run import verify
from samples.bucketing import pad_to_bucket

SYMBOL = re.compile(r"\bs\d+\b")


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 32), nn.GELU()).eval()


def _inputs(n):
    return (torch.randn(2, n, 64),)


def _compiled_graphs(exploration):
    # only graphs that compiled are recorded (Note [Restarted analysis]): every one carries IR and kernels
    assert all(g.ir and g.kernels for g in exploration.graphs), [g.index for g in exploration.graphs]
    return exploration.graphs


def test_dynamic_true_serves_sizes_without_recompiling():
    model = _model()
    exploration = engine.explore(model, _inputs(16), dynamic=True, dynamic_inputs=[_inputs(n) for n in (24, 40, 7)])
    assert exploration.verify.ok, exploration.verify
    assert len(exploration.runs) == 3
    for run in exploration.runs:
        assert run.new_graphs == 0, run
        assert run.verify.ok, run
    graphs = _compiled_graphs(exploration)
    assert len(graphs) == 1
    # the sequence length is a size symbol in the loop IR, the kernels' signatures and the guards
    assert SYMBOL.search(graphs[0].ir.text), graphs[0].ir.text[:400]
    kernel_sources = [k.source for k in graphs[0].kernels if k.kind in ("pointwise", "reduction")]
    assert any(re.search(r"const int64_t s\d+", source) for source in kernel_sources), kernel_sources
    assert any("size()" in guard for guard in exploration.guards), exploration.guards
    assert not exploration.recompiles


def test_compiled_function_runs_at_several_sizes_with_one_backend_call():
    model = _model()
    calls = []
    backend = engine.pipeline.make_backend(engine.pipeline.Options("cpp", "cpu", True))

    def counting_backend(gm, example_inputs):
        calls.append(len(example_inputs))
        return backend(gm, example_inputs)

    compiled = torch.compile(model, backend=counting_backend, dynamic=True)
    with torch.no_grad():
        x = _inputs(5)
        assert verify(model, x, compiled(*x))["ok"]
        after_first = len(calls)
        for n in (16, 33, 64):
            x = _inputs(n)
            assert verify(model, x, compiled(*x))["ok"]
    assert 1 <= after_first <= 2  # Dynamo may restart its first analysis once
    assert len(calls) == after_first, "a new size called the backend again"


def test_automatic_dynamic_recompiles_once_then_serves_new_sizes():
    model = _model()
    exploration = engine.explore(model, _inputs(16), dynamic=None,
                                 dynamic_inputs=[_inputs(n) for n in (24, 40, 64)])
    assert [run.new_graphs for run in exploration.runs] == [1, 0, 0]
    assert all(run.verify.ok for run in exploration.runs)
    assert len(exploration.recompiles) == 1
    recompile = exploration.recompiles[0]
    assert "size mismatch" in recompile.reason and "16" in recompile.reason, recompile
    assert "24" in recompile.inputs
    # the graph compiled after the recompile is the dynamic one
    last = _compiled_graphs(exploration)[-1]
    assert SYMBOL.search(last.ir.text)
    first = _compiled_graphs(exploration)[0]
    assert not SYMBOL.search(first.ir.text)  # the first compile specialized on 16
    assert exploration.guards


def test_bucketing_compiles_once_per_bucket_not_once_per_length():
    spec = load_model_file("bucketing")
    lengths = (20, 10, 33, 50, 64)
    torch.manual_seed(0)
    raw = [torch.randn(2, n, 64) for n in lengths]
    pad = pad_to_bucket

    def unpadded(x):
        return (x, torch.ones(x.shape[:2], dtype=torch.bool))

    # shapes specialized (dynamic=False): every distinct shape is one compile
    plain = engine.explore(spec.model, unpadded(raw[0]), dynamic=False,
                           dynamic_inputs=[unpadded(x) for x in raw[1:]])
    bucketed = engine.explore(spec.model, pad(raw[0]), dynamic=False,
                              dynamic_inputs=[pad(x) for x in raw[1:]])
    plain_graphs = 1 + sum(run.new_graphs for run in plain.runs)
    bucketed_graphs = 1 + sum(run.new_graphs for run in bucketed.runs)
    assert plain_graphs == len(lengths)
    assert bucketed_graphs == 2  # buckets 32 and 64
    # one entry per recompile, though Dynamo reports a failed guard for every cached graph it tried
    assert len(plain.recompiles) == len(lengths) - 1
    assert len(bucketed.recompiles) == 1
    assert all(run.verify.ok for run in plain.runs + bucketed.runs)
    # padding does not change the answer: the masked mean ignores the padded tokens
    for x in raw:
        with torch.no_grad():
            assert torch.allclose(spec.model(*unpadded(x)), spec.model(*pad(x)), atol=1e-5)


def test_sizes_with_floor_division_stay_symbolic():
    # x[:, ::2] has (s + 1) // 2 columns: torch's FloorDiv in the fake tensor's size becomes our index FloorDiv
    def strided_sum(x):
        return (x[:, ::2] * 2).sum(-1)

    exploration = engine.explore(strided_sum, (torch.randn(3, 8),), dynamic=True,
                                 dynamic_inputs=[(torch.randn(3, n),) for n in (5, 11, 16)])
    assert exploration.verify.ok, exploration.verify
    assert [run.new_graphs for run in exploration.runs] == [0, 0, 0]
    assert all(run.verify.ok for run in exploration.runs)
    sources = [k.source for k in _compiled_graphs(exploration)[0].kernels if k.kind == "reduction"]
    assert sources and "//" not in sources[0]  # C++ has no //: the size is printed as integer division


# --- index printers (issue 5, bug 1) ------------------------------------------------------------------------


def _printed_expressions():
    s0, s1, x = size_symbol(0), size_symbol(1), loop_var("x", 0)
    return [
        (s0 + 1) ** 2, x * (s0 + 1) ** 2, x - (s0 + 1) ** 3, (s1 + 2) * (s0 * s1 + 1) ** 2,
        FloorDiv(s0 - 1, 2) ** 2, (FloorDiv(s0 - 1, 2) + 1) ** 2, FloorDiv(x, (s0 + 1) ** 2),
        ModIndex(x, (s0 + 1) ** 2), FloorDiv(x + s1, s0 * s1), ModIndex(FloorDiv(x, s0 + 1), s1 + 2),
        -2 * FloorDiv(x, s0) + x, x - s0 * FloorDiv(x, s0), -3 * ModIndex(x, s1 + 1) + 7 * s0,
        sympy.Max(0, x - 1) ** 2, sympy.Min(s0 - 1, 2 * x + 2) * (s1 + 1), -(s0 + 1) ** 2 + x * s1 ** 3,
    ]


def test_index_printers_keep_precedence():
    # C and Python share the precedence of * / % + -; C's / is floor division on the non-negative operands
    # an index has, so each printer's text is evaluated as Python and compared with sympy's own value
    def as_python(text):
        return text.replace(" / ", " // ").replace("gb_max_i", "max").replace("gb_min_i", "min") \
            .replace("tl.maximum", "max").replace("tl.minimum", "min")

    s0, s1, x = size_symbol(0), size_symbol(1), loop_var("x", 0)
    for expr in _printed_expressions():
        for values in ({s0: 3, s1: 5, x: 11}, {s0: 8, s1: 2, x: 0}, {s0: 17, s1: 9, x: 40}):
            expected = int(expr.subs(values))
            env = {str(k): v for k, v in values.items()}
            for printer in (c_index, py_index, triton_index):
                text = printer(expr)
                assert eval(as_python(text), {}, env) == expected, (printer.__name__, expr, text)


def test_index_printers_refuse_fractions():
    x, s0 = loop_var("x", 0), size_symbol(0)
    for expr in (x / 2, x / s0, s0 ** -2 * x):
        for printer in (c_index, py_index):
            with pytest.raises(ValueError, match="fraction|power"):
                printer(expr)


def _avg_pool(x):
    return torch.nn.functional.avg_pool2d(x, 3, stride=2, padding=1)


@pytest.mark.slow
def test_avg_pool2d_dynamic_matches_eager_at_several_sizes():
    # output sizes (h - 1) // 2 + 1 square into the strides: (s + 1)**2 once printed as s + 1*s + 1
    sizes = [(9, 13), (12, 7), (17, 17), (6, 10)]
    inputs = [(torch.randn(2, 3, h, w),) for h, w in sizes]
    for backend in ("cpp", "triton"):
        exploration = engine.explore(_avg_pool, inputs[0], backend=backend, dynamic=True,
                                     dynamic_inputs=inputs[1:])
        assert exploration.verify.ok, (backend, exploration.verify)
        assert [run.new_graphs for run in exploration.runs] == [0, 0, 0], exploration.runs
        assert all(run.verify.ok for run in exploration.runs), exploration.runs
        (graph,) = _compiled_graphs(exploration)
        assert SYMBOL.search(graph.code.wrapper), graph.code.wrapper  # the sizes stayed symbolic
    for compiled in (engine.compile(_avg_pool, dynamic=True), compile_reference(_avg_pool, dynamic=True)):
        for (x,) in inputs:
            torch.testing.assert_close(compiled(x), _avg_pool(x))


# --- restarted analysis (bug 2) -------------------------------------------------------------------------------


def _count_compiles(monkeypatch) -> list:
    """A list that grows by one each time Dynamo calls our backend (restarted attempts included)."""
    calls = []
    compile_for_real = engine.pipeline.aot_compile

    def counting(*args, **kwargs):
        calls.append(1)
        return compile_for_real(*args, **kwargs)

    monkeypatch.setattr(engine.pipeline, "aot_compile", counting)
    return calls


def test_only_compiled_graphs_are_recorded(monkeypatch):
    # Dynamo restarts its analysis from inside the backend (a float input turned into a tensor, under
    # dynamic=True): the abandoned attempt must leave no empty GraphRecord (Note [Restarted analysis])
    backend_calls = _count_compiles(monkeypatch)
    restarted = False
    for name in ("softmax", "layernorm", "dynamic_seq"):
        spec = load_model_file(name)
        torch._dynamo.reset()
        backend_calls.clear()
        exploration = engine.explore(spec.model, spec.example_inputs, dynamic=True,
                                     dynamic_inputs=spec.dynamic_inputs)
        assert exploration.verify.ok, (name, exploration.verify)
        graphs = exploration.graphs
        assert graphs and all(g.ir and g.ir.nodes and g.kernels and g.fx for g in graphs), name
        assert [g.index for g in graphs] == list(range(len(graphs)))
        assert len(exploration.kernels) == sum(len(g.kernels) for g in graphs)
        restarted |= len(backend_calls) > len(graphs)
    assert restarted, "no sample made Dynamo restart: the test no longer covers Note [Restarted analysis]"


def test_restart_after_a_graph_break_records_the_break_once():
    norm = nn.LayerNorm(8).eval()

    def broken(x):
        y = norm(x).relu()
        torch._dynamo.graph_break()
        return norm(y) * 2

    exploration = engine.explore(broken, (torch.randn(3, 8),), dynamic=True, dynamic_inputs=[(torch.randn(5, 8),)])
    assert exploration.verify.ok and exploration.runs[0].verify.ok
    assert len(_compiled_graphs(exploration)) == 2
    assert len(exploration.graph_breaks) == 1, exploration.graph_breaks


# --- recompiles (bug 3) ---------------------------------------------------------------------------------------


def test_one_recompile_entry_per_recompile(monkeypatch):
    compiles = _count_compiles(monkeypatch)

    def scale(x):
        return (x * 2).sum(0)

    lengths = (3, 5, 7, 9)
    exploration = engine.explore(scale, (torch.randn(2, lengths[0]),), dynamic=False,
                                 dynamic_inputs=[(torch.randn(2, n),) for n in lengths[1:]])
    assert [run.new_graphs for run in exploration.runs] == [1, 1, 1]
    assert len(compiles) == len(lengths)
    # the last length fails the guards of 3 compiled versions, and is still one recompile
    assert len(exploration.recompiles) == len(compiles) - 1 == len(lengths) - 1
    last = exploration.recompiles[-1]
    assert len(last.failed_guards) == 3
    assert "x.shape[1] is 9" in last.reason and "7, 5 or 3" in last.reason, last.reason
    assert "9" in last.inputs


def test_recompiles_after_a_graph_break_count_each_part(monkeypatch):
    compiles = _count_compiles(monkeypatch)

    def broken(x):
        y = x.relu()
        torch._dynamo.graph_break()
        return y * 2

    exploration = engine.explore(broken, (torch.randn(4, 3),), dynamic=False,
                                 dynamic_inputs=[(torch.randn(4, n),) for n in (5, 6)])
    assert all(run.verify.ok for run in exploration.runs)
    new_graphs = sum(run.new_graphs for run in exploration.runs)
    assert new_graphs == len(compiles) - 2 == 4  # both sides of the break compile again per length
    assert len(exploration.recompiles) == new_graphs
    functions = [r.function for r in exploration.recompiles]
    assert sum("after the graph break" in f for f in functions) == 2, functions


def test_dynamic_seq_recompiles_once_per_new_compile(monkeypatch):
    compiles = _count_compiles(monkeypatch)
    spec = load_model_file("dynamic_seq")
    exploration = engine.explore(spec.model, spec.example_inputs, dynamic=False,
                                 dynamic_inputs=spec.dynamic_inputs)
    assert len(exploration.recompiles) == sum(run.new_graphs for run in exploration.runs) == \
        len(compiles) - 1 == len(spec.dynamic_inputs)
    for recompile in exploration.recompiles:
        assert "compiled for" in recompile.reason and "model's forward" in recompile.reason, recompile


def test_recompile_limit_is_reported_not_counted():
    def scale(x):
        return x.sum(0) * 2

    with torch._dynamo.config.patch(recompile_limit=2):
        exploration = engine.explore(scale, (torch.randn(2, 3),), dynamic=False,
                                     dynamic_inputs=[(torch.randn(2, n),) for n in (4, 5, 6)])
    assert [run.new_graphs for run in exploration.runs] == [1, 0, 0]  # past the limit Dynamo runs eagerly
    assert all(run.verify.ok for run in exploration.runs)
    assert len(exploration.recompiles) == 1
    (error,) = exploration.errors
    assert error.stage == "capture" and "recompile limit" in error.message and "5" in error.inputs


def _recurrence(steps: int):
    """An RNN's loop written out (RWKV's CPU attention): each step's state written into its column of `out`."""
    def fn(x):
        out = torch.zeros_like(x)
        state = torch.zeros_like(x[:, 0])
        for t in range(steps):
            state = state * 0.9 + x[:, t]
            out[:, t] = state
        return out
    return fn


def test_a_write_into_a_whole_slice_is_its_source():
    """A write into a whole slice (x[:] = src after decomposition) is src: no region test, no read of x. Under
    symbolic sizes the test did not fold, and each write of an RNN's loop read the previous one as src and as x
    under complementary masks, so code generation ran 2^T masked bodies (RWKV: minutes at 13 steps)."""
    for steps in (3, 9):
        torch._dynamo.reset()
        exploration = engine.explore(_recurrence(steps), (torch.randn(2, steps, 5),), dynamic=True,
                                     dynamic_inputs=[(torch.randn(4, steps, 7),)])
        assert exploration.verify.ok, exploration.verify
        assert [run.verify.verdict for run in exploration.runs] == ["ok"]
        writes = [n for g in exploration.graphs for n in g.ir.nodes
                  if any(o.startswith("slice_scatter") for o in n.aten_origins)]
        assert writes
        for node in writes:  # one load (src's), nothing masked
            assert sum("load" in line for line in node.text) == 1, node.text
