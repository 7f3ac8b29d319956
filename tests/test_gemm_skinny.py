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
    return [k for k in exploration.kernels if k.kind == "template"]


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("templates", ["on", "auto"])
def test_one_row_gemm_fuses_its_epilogue(rows, templates):
    torch.manual_seed(0)
    inputs = (torch.randn(rows, 63), torch.randn(rows, 95))
    exploration = engine.explore(LinearGeluResidual(), inputs, backend="cpp", templates=templates)
    assert exploration.verify.ok, exploration.verify
    (template,) = _templates(exploration)
    fused = [o for op in template.template.fused_ops for o in op.ops]
    assert any("gelu" in o or "erf" in o for o in fused) and any("add" in o for o in fused), fused
    assert len(exploration.kernels) == 1, [(k.name, k.kind) for k in exploration.kernels]


@pytest.mark.parametrize("rows,size,dtype,template", [
    (32, 512, torch.float32, False),  # a training step's 32-row float32 GEMM: the BLAS + our epilogue kernel
    (8, 512, torch.float32, True),  # few rows: the template
    (32, 512, torch.bfloat16, None),  # bf16: the template where the CPU multiplies bf16 pairs
])
def test_default_mode_weighs_rows_weight_and_dtype(rows, size, dtype, template):
    """Note [When a C++ template pays]: float32 beyond 8 rows needs a weight of 4M elements for the template,
    measured against the CPU BLAS followed by the epilogue as a kernel of its own; the outputs equal eager."""
    from engine.schedule.templates import cpu_multiplies_bf16_pairs

    if template is None:
        template = cpu_multiplies_bf16_pairs()
    torch.manual_seed(0)
    model = LinearGeluResidual(size, size).to(dtype)
    inputs = (torch.randn(rows, size, dtype=dtype), torch.randn(rows, size, dtype=dtype))
    exploration = engine.explore(model, inputs, backend="cpp")
    assert exploration.verify.ok, exploration.verify
    assert bool(_templates(exploration)) == template, [(k.name, k.kind) for k in exploration.kernels]
    if not template:
        (decision,) = [t for g in exploration.graphs for t in g.fusion.templates]
        assert "library call" in decision.reason and ("float32" in decision.reason or "bf16" in decision.reason)
        assert [k.kind for k in exploration.kernels] == ["extern", "pointwise"]  # the epilogue, one kernel
