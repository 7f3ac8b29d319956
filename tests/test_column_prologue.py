"""Note [Stored prologues of column reductions] (engine/schedule/policy.py): an elementwise producer that is
also stored stays out of a reduction over its leading dims, and joins one over its trailing dims."""
import sympy
import torch

import engine
from engine.ir.nodes import Pointwise, Reduction
from engine.schedule import policy
from engine.schedule.groups import Group


def _group(node):
    return Group.of(node, 0, False)


def _pointwise(*dims):
    return _group(Pointwise(name="p", size=tuple(map(sympy.Integer, dims)), dtype=torch.float32, device="cpu"))


def _sum(rows, red):
    return _group(Reduction(name="r", size=(sympy.Integer(rows),), dtype=torch.float32, device="cpu",
                            reduction_size=(sympy.Integer(red),)))


def _ask(first, second, only_feeds):
    return policy.decide(policy.Candidate(first, second, "vertical", 1, only_feeds))


def test_rule_refuses_only_a_stored_producer_across_columns():
    across = _ask(_pointwise(64, 8), _sum(8, 64), only_feeds=False)  # p.sum(0) of a (64, 8) p read elsewhere too
    assert not across.fuse and across.rule == "stored_prologue_of_column", across
    assert _ask(_pointwise(64, 8), _sum(8, 64), only_feeds=True).rule == "reduction_prologue"  # nothing to store
    along = _ask(_pointwise(8, 64), _sum(8, 64), only_feeds=False)  # p.sum(1): the stores walk the rows
    assert along.fuse and along.rule == "reduction_prologue", along


def _bias_grad_like(a, w):
    p = a * 2 + 1
    return p @ w, p.sum(0)  # the GEMM reads p, and p is summed over its rows (a bias gradient's shape)


def _row_sum_like(a, w):
    p = a * 2 + 1
    return p @ w, p.sum(1)


def test_bias_gradient_shape_end_to_end():
    a, w = torch.randn(64, 32), torch.randn(32, 16)
    for fn, rule in ((_bias_grad_like, "stored_prologue_of_column"), (_row_sum_like, "reduction_prologue")):
        exploration = engine.explore(fn, (a, w), backend="cpp")
        assert exploration.verify.ok if isinstance(exploration.verify, dict) else exploration.verify.ok
        decisions = [d for g in exploration.graphs for d in g.fusion.decisions]
        kinds = [k.kind for g in exploration.graphs for k in g.kernels]
        assert any(d.rule == rule for d in decisions), (fn.__name__, [(d.rule, d.fused) for d in decisions])
        # apart: the elementwise kernel, the GEMM, the reduction; fused: the reduction kernel stores p too
        assert kinds.count("pointwise") == (1 if rule == "stored_prologue_of_column" else 0), kinds
