"""Every sample, compiled through Glassbox, matches eager and is told in users' words (no Note references, no
buffer ids); fusion does what each sample teaches."""
import re

import pytest
import torch

import engine
from engine.pipeline import compile_reference
from engine.tools.cli_format import explore_summary
from engine.tools.model_file import load_model_file, run_eager
from engine.run import verify
from samples import sample_names
from visualizers import tables, teaching

ONE_KERNEL = ["scale_bias_relu", "softmax", "layernorm", "rmsnorm", "gelu_chain"]


def _explore(name):
    spec = load_model_file(name)
    return spec, engine.explore(spec.model, spec.example_inputs, name=name, dynamic_inputs=spec.dynamic_inputs,
                                tolerance=spec.tolerance)


@pytest.mark.parametrize("name", sample_names())
def test_sample_matches_eager_through_cpp(name):
    spec, exploration = _explore(name)
    assert exploration.verify.ok, exploration.verify
    for run in exploration.runs:
        assert run.verify.ok, run
    assert exploration.graphs, "Dynamo captured no graph"
    _in_users_words(exploration)


INTERNAL = re.compile(r"Note \[|\bbuf\d+\b")  # the engine's Notes and the scheduler's buffer ids


def _in_users_words(exploration):
    """The app's teaching text for each stage, its kernels table's reasons and the CLI's summary name no Note
    and no buffer id (the same sample's record; one explore serves both checks)."""
    said = explore_summary(exploration).splitlines()
    for graph in exploration.graphs:
        for stage in ("capture", "ATen", "loop IR", "fusion", "code", "run", "bench"):
            said += teaching.stage_text(exploration, graph, stage)
        said += [row[column] for row in tables.kernel_rows(graph) for column in ("tiling: why", "note")]
    leaks = [line for line in said if INTERNAL.search(str(line or ""))]
    assert not leaks, leaks[:5]


@pytest.mark.parametrize("name", sample_names())
def test_sample_matches_eager_through_ir_evaluator(name):
    spec = load_model_file(name)
    compiled = compile_reference(spec.model)
    with torch.no_grad():
        outputs = compiled(*spec.example_inputs)
    result = verify(spec.model, spec.example_inputs, outputs, spec.tolerance)
    assert result["ok"], result


def _generated(exploration):
    return [k for g in exploration.graphs for k in g.kernels if k.kind in ("pointwise", "reduction")]


@pytest.mark.parametrize("name", ONE_KERNEL)
def test_fused_to_one_kernel(name):
    _, exploration = _explore(name)
    kernels = [k for g in exploration.graphs for k in g.kernels]
    assert len(kernels) == 1 and kernels[0].kind in ("pointwise", "reduction"), kernels


def test_mlp_bias_add_and_relu_are_one():
    spec, exploration = _explore("mlp")
    # a float32 batch of 32 over a 256x128 weight: the CPU BLAS and the ReLU as a kernel of its own measured
    # faster than the template (Note [When a C++ template pays]); addmm carries the bias, relu follows it
    # directly: nothing generated between the two
    for library in (exploration, engine.explore(spec.model, spec.example_inputs, name="mlp", templates="off")):
        kinds = [k.kind for g in library.graphs for k in g.kernels]
        assert kinds == ["extern", "pointwise", "extern"], kinds
        relu_kernel = _generated(library)[0]
        assert any("relu" in op for op in relu_kernel.ops)
    assert all("float32" in t.reason for g in exploration.graphs for t in g.fusion.templates)
    # with templates on, the C++ GEMM template takes the first Linear with relu as its epilogue
    forced = engine.explore(spec.model, spec.example_inputs, name="mlp", templates="on")
    assert forced.verify.ok, forced.verify
    first = [k for g in forced.graphs for k in g.kernels][0]
    assert first.kind == "template", first
    assert any("relu" in o for op in first.template.fused_ops for o in op.ops), first.template


def test_graph_break_reports_reason_and_line():
    spec, exploration = _explore("graph_break")
    assert exploration.graph_breaks
    lines = spec.source.splitlines()
    for brk in exploration.graph_breaks:
        assert brk.reason
        assert brk.lineno and brk.filename.endswith("graph_break.py")
    flagged = [lines[b.lineno - 1] for b in exploration.graph_breaks]
    assert any("if" in line or "print" in line for line in flagged), flagged


def test_unlowered_op_becomes_visible_fallback():
    def model(x):
        return torch.linalg.inv(x).relu() * 2  # a matrix inverse is no loop nest: it runs eagerly

    x = torch.randn(4, 16, 16) + 4 * torch.eye(16)
    exploration = engine.explore(model, (x,))
    kernels = [k for g in exploration.graphs for k in g.kernels]
    fallbacks = [k for k in kernels if k.kind == "fallback"]
    assert fallbacks and "linalg_inv" in fallbacks[0].reason
    assert exploration.verify.ok


def test_compile_is_a_torch_compile_backend():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32))
    compiled = engine.compile(model)
    with torch.no_grad():
        for batch in (4, 4, 7):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)


def test_second_explore_hits_the_compile_cache():
    _explore("softmax")
    torch._dynamo.reset()
    _, again = _explore("softmax")
    assert all(g.cache_hit for g in again.graphs)


def test_record_is_plain_json():
    import json
    _, exploration = _explore("rmsnorm")  # written by hand in the sample file, so nodes have user lines
    data = json.loads(exploration.dumps())
    graph = data["graphs"][0]
    assert graph["fx"] and graph["aten"] and graph["ir"]["nodes"] and graph["code"]["provenance"]
    kernel = graph["kernels"][0]
    assert kernel["fx_origins"], kernel
    assert any(p["user_lines"] for p in graph["code"]["provenance"])


def test_conv_bn_relu_is_conv_then_one_kernel():
    _, exploration = _explore("conv_bn_relu")
    kinds = [k.kind for g in exploration.graphs for k in g.kernels]
    assert kinds == ["extern", "pointwise"], kinds  # batch-norm parameter math is inlined, relu fused
    decisions = [d for g in exploration.graphs for d in g.fusion.decisions]
    assert any(d.fused and d.reason.startswith("inlined") for d in decisions)
