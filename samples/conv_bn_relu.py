import torch
from torch import nn

torch.manual_seed(0)

description = """
**Conv2d(3, 16, 3) -> BatchNorm2d -> ReLU** on 2x3x16x16, in eval mode. In inference, BatchNorm is a
per-channel affine transform with the running statistics, so it and the ReLU are pointwise work after the
convolution. The convolution stays a library call (extern). A compiler fuses BN and ReLU into one kernel, or
folds BN's scale and shift into the conv's weights ahead of time (Inductor's "conv-bn folding" freezing pass).
"""

model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.BatchNorm2d(16),
    nn.ReLU(),
)
with torch.no_grad():  # non-trivial running statistics, so eval-mode BN is more than an identity
    bn = model[1]
    bn.running_mean.copy_(torch.randn(16) * 0.1)
    bn.running_var.copy_(torch.rand(16) + 0.5)
    bn.weight.copy_(torch.randn(16))
    bn.bias.copy_(torch.randn(16))
model.eval()  # BatchNorm uses running statistics, not the batch's

example_inputs = (torch.randn(2, 3, 16, 16),)
