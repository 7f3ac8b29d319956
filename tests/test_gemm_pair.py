"""SwiGLU's two GEMMs of one input (Note [SwiGLU pair]): silu(x @ W1.T) * (x @ W3.T) runs in one GEMM's
template epilogue, and the record says which form was chosen (fused consumer, not the concatenated weight)
and why; the result matches eager on both backends."""
import pytest
import torch
import torch.nn.functional as F

import engine
from test_templates import SwiGLU  # the SwiGLU MLP, 63 -> 96 -> 63


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_swiglu_pair_form_is_recorded_with_its_reason(backend):
    torch.manual_seed(0)
    exploration = engine.explore(SwiGLU(), (torch.randn(8, 63),), backend=backend, templates="on")
    assert exploration.verify.ok, exploration.verify
    pairs = [c.pair for c in exploration.graphs[0].fusion.templates if c.pair]
    assert len(pairs) == 1, exploration.graphs[0].fusion.templates
    (pair,) = pairs
    assert pair.form == "fused consumer" and len(set(pair.gemms)) == 2
    assert "concatenated weight" in pair.reason and pair.input
    kinds = [k.kind for k in exploration.kernels]
    assert kinds.count("template") >= 1 and "pointwise" not in kinds, kinds  # the product is in an epilogue


def test_two_gemms_of_different_inputs_are_no_pair():
    def model(x, y, w1, w3):
        return F.silu(x @ w1) * (y @ w3)

    torch.manual_seed(0)
    inputs = (torch.randn(8, 31), torch.randn(8, 31), torch.randn(31, 40), torch.randn(31, 40))
    exploration = engine.explore(model, inputs, backend="cpp", templates="on")
    assert exploration.verify.ok
    assert not any(c.pair for c in exploration.graphs[0].fusion.templates)
