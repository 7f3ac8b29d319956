"""A template's epilogue may hold elementwise work that comes before its GEMM in the program (Note [Template
first]): regnet's residual block runs its projection shortcut first, so the shortcut's batch norm, fused with
the residual add, joins the last 1x1 convolution's template. The H200 zoo run crashed the schedule there
("'Pointwise' object has no attribute 'reason'") and the graph fell back to eager. This block has regnet's
shape: projection shortcut, 1x1 -> grouped 3x3 -> squeeze-excitation (mean -> 1x1 -> relu -> 1x1 -> sigmoid ->
mul) -> 1x1, residual add, relu; templates forced on, through both backends."""
import pytest
import torch
from torch import nn

import engine


class RegNetBlock(nn.Module):
    def __init__(self, cin=8, cout=16, squeezed=4):
        super().__init__()
        self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False), nn.BatchNorm2d(cout))
        self.a = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, stride=2, padding=1, groups=4, bias=False),
                               nn.BatchNorm2d(cout), nn.ReLU())
        self.squeeze, self.excite = nn.Conv2d(cout, squeezed, 1), nn.Conv2d(squeezed, cout, 1)
        self.c = nn.Sequential(nn.Conv2d(cout, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        shortcut = self.proj(x)  # first, as torchvision's ResBottleneckBlock computes proj(x) + f(x)
        y = self.b(self.a(x))
        scale = torch.sigmoid(self.excite(torch.relu(self.squeeze(y.mean((2, 3), keepdim=True)))))
        return torch.relu(shortcut + self.c(y * scale))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_residual_epilogue_before_the_gemm_compiles_and_matches_eager(backend):
    torch.manual_seed(0)
    block = RegNetBlock().eval()
    for bn in (m for m in block.modules() if isinstance(m, nn.BatchNorm2d)):  # non-trivial statistics
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    exploration = engine.explore(block, (torch.randn(2, 8, 9, 9),), backend=backend, templates="on")
    assert not exploration.errors, exploration.errors[0].message
    assert exploration.verify.ok, exploration.verify
    kernels = exploration.kernels
    assert not [k for k in kernels if k.kind == "fallback"]
    # the last 1x1 convolution's epilogue holds both batch norms (the shortcut's, computed before the GEMM in the
    # program, and its own), the residual add and the relu
    batch_norms = [[op for op in k.template.fused_ops if "aten::sub.Tensor" in op.ops]
                   for k in kernels if k.kind == "template"]
    assert max(map(len, batch_norms)) == 2, batch_norms
