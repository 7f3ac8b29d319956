"""Skinny GEMMs (batch 1-32 of an LLM layer) through the C++ template: the epilogue fuses at every M, including
one row (where the tile's row variable is always 0), and the result matches eager."""
import pytest
import torch
import torch.nn.functional as F

import engine


class LinearGeluResidual(torch.nn.Module):
    def __init__(self, k=63, n=95):
        super().__init__()
        self.linear = torch.nn.Linear(k, n)

    def forward(self, x, residual):
        return residual + F.gelu(self.linear(x))


def _templates(exploration):
    return [k for k in exploration.kernels if k["kind"] == "template"]


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("templates", ["on", "auto"])
def test_one_row_gemm_fuses_its_epilogue(rows, templates):
    torch.manual_seed(0)
    inputs = (torch.randn(rows, 63), torch.randn(rows, 95))
    exploration = engine.explore(LinearGeluResidual(), inputs, backend="cpp", templates=templates)
    assert exploration.verify["ok"], exploration.verify
    (template,) = _templates(exploration)
    fused = [o for op in template["template"]["fused_ops"] for o in op["ops"]]
    assert any("gelu" in o or "erf" in o for o in fused) and any("add" in o for o in fused), fused
    assert len(exploration.kernels) == 1, [(k["name"], k["kind"]) for k in exploration.kernels]
