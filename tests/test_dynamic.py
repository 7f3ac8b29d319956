"""Dynamic shapes: size symbols in the IR, guards and kernels; one compile serving many sizes; recompiles."""
import re

import torch
from torch import nn

import engine
from engine.model_file import load_model_file
from engine.run import verify
from samples.bucketing import pad_to_bucket

SYMBOL = re.compile(r"\bs\d+\b")


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 32), nn.GELU()).eval()


def _inputs(n):
    return (torch.randn(2, n, 64),)


def _compiled_graphs(exploration):
    # a graph whose compile Dynamo restarted has an empty record; the compiled ones carry IR
    return [g for g in exploration.graphs if g.ir]


def test_dynamic_true_serves_sizes_without_recompiling():
    model = _model()
    exploration = engine.explore(model, _inputs(16), dynamic=True, dynamic_inputs=[_inputs(n) for n in (24, 40, 7)])
    assert exploration.verify["ok"], exploration.verify
    assert len(exploration.runs) == 3
    for run in exploration.runs:
        assert run["new_graphs"] == 0, run
        assert run["verify"]["ok"], run
    graphs = _compiled_graphs(exploration)
    assert len(graphs) == 1
    # the sequence length is a size symbol in the loop IR, the kernels' signatures and the guards
    assert SYMBOL.search(graphs[0].ir["text"]), graphs[0].ir["text"][:400]
    kernel_sources = [k["source"] for k in graphs[0].kernels if k["kind"] in ("pointwise", "reduction")]
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
    assert [run["new_graphs"] for run in exploration.runs] == [1, 0, 0]
    assert all(run["verify"]["ok"] for run in exploration.runs)
    assert len(exploration.recompiles) == 1
    recompile = exploration.recompiles[0]
    assert "size mismatch" in recompile["reason"] and "16" in recompile["reason"], recompile
    assert "24" in recompile["inputs"]
    # the graph compiled after the recompile is the dynamic one
    last = _compiled_graphs(exploration)[-1]
    assert SYMBOL.search(last.ir["text"])
    first = _compiled_graphs(exploration)[0]
    assert not SYMBOL.search(first.ir["text"])  # the first compile specialized on 16
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
    plain_graphs = 1 + sum(run["new_graphs"] for run in plain.runs)
    bucketed_graphs = 1 + sum(run["new_graphs"] for run in bucketed.runs)
    assert plain_graphs == len(lengths)
    assert bucketed_graphs == 2  # buckets 32 and 64
    # Dynamo reports one failed guard per cached graph it tried; count the calls that recompiled
    assert len({r["inputs"] for r in plain.recompiles}) == len(lengths) - 1
    assert len({r["inputs"] for r in bucketed.recompiles}) == 1
    assert all(run["verify"]["ok"] for run in plain.runs + bucketed.runs)
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
    assert exploration.verify["ok"], exploration.verify
    assert [run["new_graphs"] for run in exploration.runs] == [0, 0, 0]
    assert all(run["verify"]["ok"] for run in exploration.runs)
    sources = [k["source"] for k in _compiled_graphs(exploration)[0].kernels if k["kind"] == "reduction"]
    assert sources and "//" not in sources[0]  # C++ has no //: the size is printed as integer division
