"""Layer norm's backward (Note [Prologues of column reductions go with them]): the weight's and the bias's
gradients, two column sums over the same rows, share one kernel and one read of the output gradient; the
input's gradient is the row kernel. Gradients equal eager's through both backends."""
import pytest
import torch
from torch import nn

import engine


def _backward(model, x, backend):
    exploration = engine.explore(model, (x,), backend=backend, train=True)
    verify = exploration.verify
    assert verify.ok, [e for e in [verify.loss, *verify.gradients] if not e.ok]
    return next(g for g in exploration.graphs if g.phase == "backward")


def _layer_norm(features):
    torch.manual_seed(0)
    model = nn.LayerNorm(features)
    with torch.no_grad():  # affine weights away from 1 and 0, so a gradient mixed up with another would show
        model.weight.copy_(torch.randn(features))
        model.bias.copy_(torch.randn(features))
    return model


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("shape", [(64, 512), (2, 24, 40)])
def test_layer_norm_weight_and_bias_gradients_share_a_kernel(backend, shape):
    model = _layer_norm(shape[-1])
    backward = _backward(model, torch.randn(*shape, requires_grad=True), backend)
    loops = [k for k in backward.kernels if k.kind not in ("extern", "fallback")]
    assert len(loops) == 2, [(k.name, k.ir_nodes) for k in loops]  # the rows' kernel, the columns' kernel
    columns = [k for k in loops if len(k.writes) == 2 and all(
        next(n for n in backward.ir.nodes if n.name == w).size == [str(shape[-1])] for w in k.writes)]
    assert len(columns) == 1, [(k.name, k.writes) for k in loops]
    # both sums are in that kernel, so the output gradient (read by the row kernel too) is read by one column
    # kernel, once
    rows_kernel = next(k for k in loops if k is not columns[0])
    shared = set(columns[0].reads) & set(rows_kernel.reads)
    assert shared, "the column kernel does not read the output gradient the row kernel reads"
    rules = {d.rule for d in backward.fusion.decisions if d.fused}
    assert "two_reductions" in rules


def test_the_decision_says_why_the_product_stays_out_of_the_row_kernel():
    backward = _backward(_layer_norm(512), torch.randn(64, 512, requires_grad=True), "cpp")
    refused = [d for d in backward.fusion.decisions if d.rule == "column_reduction_prologue"]
    assert refused and not any(d.fused for d in refused)

