"""Fusion policy rules (engine/schedule/policy.py), the mechanism's legality checks, and the memory plan.

Rules are tested one by one on hand-made groups, then end to end on lowered graphs: the rule that decided is in
every decision of the record, and the kernels that come out match eager.
"""
import pytest
import sympy
import torch

import engine
from engine.ir.nodes import Extern, Pointwise, Reduction
from engine.schedule import fusion, policy
from engine.schedule.fusion import LEGAL_LOOP_NEST, LEGAL_ORDER, schedule
from engine.schedule.groups import Group
from engine.schedule.memory import plan_memory
from lowered_graphs import lowered, pointwise_chain

RULE_NAMES = {rule.__name__ for rule in policy.RULES} | {policy.recompute_in_reader.__name__, LEGAL_ORDER, LEGAL_LOOP_NEST}


def _size(*dims):
    return tuple(sympy.Integer(d) for d in dims)


def pointwise(name, *dims, at=0):
    return Group.of(Pointwise(name=name, size=_size(*dims), dtype=torch.float32, device="cpu"), at, False)


def reduction(name, rows, red, at=0):
    node = Reduction(name=name, size=_size(rows), dtype=torch.float32, device="cpu", reduction_size=_size(red))
    return Group.of(node, at, False)


def mm(name, at=0):
    node = Extern(name=name, size=_size(8, 8), dtype=torch.float32, device="cpu", target=torch.ops.aten.mm.default)
    return Group.of(node, at, False)


def ask(first, second, kind="vertical", passes=1, only_feeds=False):
    return policy.decide(policy.Candidate(first, second, kind, passes, only_feeds))


# -- each rule on its own ---------------------------------------------------------------------------------------

def test_vertical_pointwise_over_one_iteration_space():
    verdict = ask(pointwise("a", 8, 16), pointwise("b", 8, 16), passes=0)
    assert verdict.fuse and verdict.rule == "elementwise" and "128 elements" in verdict.reason


def test_reduction_prologue_and_epilogue():
    prologue = ask(pointwise("a", 8, 16), reduction("r", 8, 16))
    assert prologue.fuse and prologue.rule == "reduction_prologue", prologue
    full_epilogue = ask(reduction("r", 8, 16), pointwise("b", 8, 16))
    assert full_epilogue.fuse and full_epilogue.rule == "reduction_epilogue", full_epilogue
    row_epilogue = ask(reduction("r", 8, 16), pointwise("b", 8, 1))
    assert row_epilogue.fuse and row_epilogue.rule == "reduction_epilogue" and "per-row" in row_epilogue.reason


def test_horizontal_siblings():
    verdict = ask(pointwise("a", 4, 4), pointwise("b", 16), kind="horizontal", passes=0)
    assert verdict.fuse and verdict.rule == "horizontal_siblings", verdict


def test_two_reductions_of_one_shape_share_a_kernel_and_others_do_not():
    assert ask(reduction("r", 8, 16), reduction("s", 8, 16), passes=2).rule == "two_reductions"
    verdict = ask(reduction("r", 8, 16), reduction("s", 16, 8), passes=2)
    assert not verdict.fuse and verdict.rule == "two_reductions" and "different reductions" in verdict.reason


def test_refuses_different_iteration_space_with_the_shapes():
    verdict = ask(pointwise("a", 32, 256), pointwise("b", 32), passes=0)
    assert not verdict.fuse and verdict.rule == "different_iteration_space"
    assert verdict.reason == "different iteration space 32x256 vs 32", verdict.reason
    verdict = ask(reduction("r", 8, 16), pointwise("b", 3, 5))
    assert not verdict.fuse and verdict.rule == "different_iteration_space", verdict


def test_refuses_an_extern_consumer_and_producer():
    verdict = ask(pointwise("a", 8, 8), mm("buf1"), passes=0)
    assert not verdict.fuse and verdict.rule == "library_call"
    assert verdict.reason.startswith("consumer buf1 is a library call (mm)"), verdict.reason
    verdict = ask(mm("buf1"), pointwise("a", 8, 8), passes=0)
    assert not verdict.fuse and verdict.reason.startswith("producer buf1 is a library call (mm)"), verdict.reason


def test_inlines_a_producer_of_another_shape_that_only_feeds_the_consumer():
    verdict = ask(pointwise("scale", 16), pointwise("y", 16, 64), passes=0, only_feeds=True)
    assert verdict.fuse and verdict.inline and verdict.rule == "inline_producer", verdict
    assert verdict.reason.startswith("inlined") and "16 vs 16x64" in verdict.reason


def test_refuses_too_many_passes():
    verdict = ask(reduction("r", 8, 16), reduction("s", 8, 16), passes=policy.MAX_REDUCTION_PASSES + 1)
    assert not verdict.fuse and verdict.rule == "too_many_passes", verdict


# -- end to end: the mechanism asks once per candidate and records the rule ----------------------------------------

def _decisions(graph):
    return schedule(graph).decisions


def _kernels(graph):
    return [k for k in schedule(graph).kernels if k.kind in ("pointwise", "reduction")]


def test_every_decision_names_its_rule():
    graph = lowered(lambda x, w: torch.softmax((x * 2) @ w, -1) + x.sum(), torch.randn(8, 8), torch.randn(8, 8))
    decisions = _decisions(graph)
    assert decisions and all(d.rule in RULE_NAMES and d.reason for d in decisions), decisions


def test_the_record_names_the_rule_of_every_decision():
    exploration = engine.explore(lambda x: torch.softmax(x * 2, -1), (torch.randn(8, 16),))
    decisions = [d for g in exploration.graphs for d in g.fusion.decisions]
    assert decisions and all(d.rule in RULE_NAMES for d in decisions), decisions


def test_the_policy_is_asked_once_per_candidate(monkeypatch):
    asked = []
    real = policy.decide
    monkeypatch.setattr(policy, "decide", lambda candidate: asked.append(candidate) or real(candidate))
    graph = lowered(lambda x: ((x * 2).relu() + 1).sigmoid() - x, torch.randn(8, 16))
    decisions = _decisions(graph)
    pairs = [(id(c.first), id(c.second)) for c in asked]
    assert len(pairs) == len(set(pairs)) == len(decisions) > 0


@pytest.mark.parametrize("norm", [lambda x: torch.softmax(x, -1), torch.nn.LayerNorm(64)])
def test_softmax_and_layernorm_are_one_kernel(norm):
    graph = lowered(norm, torch.randn(16, 64))
    kernels = _kernels(graph)
    assert len(kernels) == 1 and kernels[0].kind == "reduction", kernels
    rules = {d.rule for d in _decisions(graph) if d.fused}
    assert "reduction_epilogue" in rules, rules


def test_sibling_outputs_share_a_kernel():
    graph = lowered(lambda x: (x.sin(), x.cos() * 2), torch.randn(8, 16))
    assert len(_kernels(graph)) == 1
    assert [d.rule for d in _decisions(graph) if d.kind == "horizontal"] == ["horizontal_siblings"]


def test_an_output_of_another_shape_is_not_inlined():
    def fn(x):
        y = x * 2
        return y, y[:, :4] + 1  # y is an output: it is stored, so the 8x4 add cannot recompute it instead

    graph = lowered(fn, torch.randn(8, 16))
    refused = [d for d in _decisions(graph) if not d.fused]
    assert [d.rule for d in refused] == ["different_iteration_space"], refused
    assert "8x16 vs 8x4" in refused[0].reason, refused[0].reason
    assert len(_kernels(graph)) == 2


def test_a_read_of_another_row_is_illegal():
    graph = lowered(lambda x: x * x.sum(-1, keepdim=True).flip(0), torch.randn(8, 16))
    refused = [d for d in _decisions(graph) if not d.fused]
    assert any(d.rule == LEGAL_LOOP_NEST and "another row" in d.reason for d in refused), refused
    _check_against_eager(lambda x: x * x.sum(-1, keepdim=True).flip(0), torch.randn(8, 16))


def _centered(x):
    return x - x.sum(-1, keepdim=True)


def test_an_epilogue_read_at_another_row_is_illegal():
    """The centered values are checked once, at their own index; read at another row, they read the row sum
    of another row (Note [Checked once])."""
    fn = lambda x: _centered(x).flip(0) * 2  # noqa: E731
    refused = [d for d in _decisions(lowered(fn, torch.randn(8, 16))) if not d.fused]
    assert any(d.rule == LEGAL_LOOP_NEST and "another row" in d.reason for d in refused), refused
    _check_against_eager(fn, torch.randn(8, 16))


def test_an_epilogue_read_elsewhere_in_its_row_is_fused():
    fn = lambda x: _centered(x).flip(-1) * 2  # noqa: E731
    assert len(_kernels(lowered(fn, torch.randn(8, 16)))) == 1
    _check_against_eager(fn, torch.randn(8, 16))


def test_a_library_call_between_two_groups_keeps_them_apart():
    def fn(x, w):
        y = x.relu()
        return y + (y @ w)  # y -> mm -> add, and y -> add: fusing y with the add would put mm inside a kernel

    graph = lowered(fn, torch.randn(8, 8), torch.randn(8, 8))
    refused = [d for d in _decisions(graph) if not d.fused]
    assert any(d.rule == LEGAL_ORDER for d in refused), refused
    _check_against_eager(fn, torch.randn(8, 8), torch.randn(8, 8))


def test_a_2000_op_chain_is_one_kernel():
    """Fusion is linear in the nodes (Note [Incremental group graph]); timings are in scripts/scale_bench.py."""
    graph = pointwise_chain(2000)
    assert len(graph.nodes) == 2000
    scheduled = schedule(graph)
    assert [k.kind for k in scheduled.kernels] == ["pointwise"] and len(scheduled.kernels[0].nodes) == 2000
    assert all(d.fused and d.rule == "elementwise" for d in scheduled.decisions) and len(scheduled.decisions) == 1999


def test_kernel_passes_group_reductions_by_depth():
    graph = lowered(torch.nn.LayerNorm(64), torch.randn(16, 64))
    kernel = _kernels(graph)[0]
    assert [len(p) for p in kernel.passes] in ([1, 1], [2], [1]), kernel.passes
    assert all(isinstance(n, Reduction) for p in kernel.passes for n in p)
    assert sum(len(p) for p in kernel.passes) == sum(isinstance(n, Reduction) for n in kernel.nodes)


def _check_against_eager(fn, *inputs):
    compiled = engine.compile(fn)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), fn(*inputs), atol=1e-4, rtol=1e-4)


# -- the memory plan ------------------------------------------------------------------------------------------

def _chain_through_mm(x, w):
    a = x.relu()  # kernel 0
    b = a @ w  # extern 1: the last reader of a
    c = b.sin()  # kernel 2: same size as a, which just died: c takes a's memory
    d = c @ w  # extern 3
    return d.cos()  # kernel 4


def test_memory_plan_reuses_a_dead_buffer_of_the_same_size():
    graph = lowered(_chain_through_mm, torch.randn(8, 8), torch.randn(8, 8))
    scheduled = schedule(graph)
    assert [k.kind for k in scheduled.kernels] == ["pointwise", "extern", "pointwise", "extern", "pointwise"]
    plan = plan_memory(scheduled.kernels, graph, {})
    a, c = scheduled.kernels[0].stored[0], scheduled.kernels[2].stored[0]
    assert plan.reuse_of(c) == a
    lives = {life.name: life for life in plan.lives}
    assert (lives[a].first, lives[a].last) == (0, 1)  # written by kernel 0, last read by the mm
    assert (lives[c].first, lives[c].last) == (2, 3)
    assert a in plan.free_after[1]


def test_memory_plan_peak_counts_shared_storage_once():
    graph = lowered(_chain_through_mm, torch.randn(8, 8), torch.randn(8, 8))
    scheduled = schedule(graph)
    plan = plan_memory(scheduled.kernels, graph, {})
    # live at once at worst: a's storage (reused by c) and one mm result, or the last mm result and the output
    assert plan.peak_bytes == 2 * 8 * 8 * 4, plan
    assert plan.unfused_peak_bytes >= plan.peak_bytes


def test_memory_plan_never_frees_outputs():
    graph = lowered(lambda x, w: (x.relu(), (x @ w).sin()), torch.randn(8, 8), torch.randn(8, 8))
    scheduled = schedule(graph)
    plan = plan_memory(scheduled.kernels, graph, {})
    outputs = {v.node.name for v in graph.outputs}
    freed = {name for names in plan.free_after.values() for name in names}
    assert outputs and not outputs & freed
    assert all(life.last == len(scheduled.kernels) for life in plan.lives if life.name in outputs)


def test_node_reads_are_found_once():
    graph = lowered(lambda x: x.exp() + 1, torch.randn(4, 4))
    node = graph.nodes[0]
    first = fusion.node_reads(node, graph.buffers)
    node.inner_fn = None  # a second ask must not run the body again
    assert fusion.node_reads(node, graph.buffers) == first
