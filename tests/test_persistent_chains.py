"""Persistent chains (Note [Persistent chains] in engine/schedule/policy.py): dependent reductions over rows
that fit one block fuse into one kernel however many passes they need, and the decision says why; looped and
strided rows keep the pass limit. Every case matches eager through both backends (Triton under the
interpreter)."""
import pytest
import torch
import torch.nn.functional as F

import engine
from engine.schedule import policy

BACKENDS = ["cpp", "triton"]


def _explore(fn, inputs, backend):
    torch._dynamo.reset()
    exploration = engine.explore(fn, inputs, backend=backend, name="chain")
    assert exploration.verify.ok, exploration.verify
    kernels = [k for k in exploration.kernels if k.kind in ("pointwise", "reduction")]
    decisions = [d for g in exploration.graphs for d in g.fusion.decisions]
    return kernels, decisions


def softmax_chain(x, n=32):
    for _ in range(n):
        x = torch.softmax(x, -1)
    return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_32_softmaxes_over_short_rows_are_one_kernel(backend):
    kernels, decisions = _explore(softmax_chain, (torch.randn(8, 64) * 3,), backend)
    assert len(kernels) <= 2, [k.name for k in kernels]
    assert not any(d.rule == "too_many_passes" for d in decisions)
    past = [d for d in decisions if d.fused and "Persistent chains" in d.reason]
    assert past and all("fits one block" in d.reason for d in past), past[:1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_of_cheap_reductions_matches_eager(backend):
    """Layer norms are sums and squares only: in C++ every value two passes need is row-cached (Note [Row
    cache of a persistent chain]), in Triton computed once in registers."""
    def chain(x):
        for _ in range(12):
            x = F.layer_norm(x, (48,)) * 1.5 + 0.25
        return x
    kernels, _ = _explore(chain, (torch.randn(5, 48),), backend)
    assert len(kernels) == 1, [k.name for k in kernels]


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_with_special_values_matches_eager(backend):
    x = torch.randn(6, 33) * 10
    x[1, 4] = float("inf")
    x[2, :] = float("-inf")
    x[3, 7] = float("nan")
    kernels, _ = _explore(lambda t: softmax_chain(t, 6).log_softmax(-1), (x,), backend)
    assert len(kernels) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_looped_rows_keep_the_pass_limit(backend):
    kernels, decisions = _explore(lambda t: softmax_chain(t, 3), (torch.randn(2, 9000),), backend)
    refused = [d for d in decisions if d.rule == "too_many_passes"]
    assert refused and f"limit {policy.MAX_REDUCTION_PASSES}" in refused[0].reason, decisions
    assert len(kernels) >= 2


def test_strided_rows_keep_the_pass_limit():
    """A softmax over dim 0 reads its rows strided: column tiles loop over them, so no pass is free."""
    for fn in (lambda t: softmax_chain(t.t(), 4), lambda t: softmax_chain(t.transpose(0, 1).contiguous(), 4)):
        _, decisions = _explore(fn, (torch.randn(64, 8),), "cpp")
        assert not any("Persistent chains" in d.reason for d in decisions)
