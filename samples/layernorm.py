import torch
from torch import nn

torch.manual_seed(0)

description = """
**nn.LayerNorm(512)** on a 64x512 input: per row, the mean and the variance (reductions), then a pointwise
normalize, scale and shift. Its ATen decomposition shows the reductions and the pointwise tail. A fusing
compiler turns it into **one kernel**: the reductions and the pointwise epilogue share the row's loop.
"""

model = nn.LayerNorm(512).eval()
with torch.no_grad():  # non-trivial affine weights, so a bug in scale/shift would show
    model.weight.copy_(torch.randn(512))
    model.bias.copy_(torch.randn(512))
example_inputs = (torch.randn(64, 512),)
