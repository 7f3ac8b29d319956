import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A ResNet basic block**: conv3x3 -> BN -> ReLU -> conv3x3 -> BN, plus the identity shortcut, then ReLU, on
2x16x16x16 in eval mode. The convolutions are library calls (extern). Everything between them is pointwise:
BN and ReLU after the first conv become one kernel, and BN, the residual add and the final ReLU after the
second conv become another. Count the kernels: two convs plus two fused pointwise kernels.
"""


class BasicBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


model = BasicBlock(16)
with torch.no_grad():  # non-trivial running statistics, so eval-mode BN is more than an identity
    for bn in (model.bn1, model.bn2):
        bn.running_mean.copy_(torch.randn(16) * 0.1)
        bn.running_var.copy_(torch.rand(16) + 0.5)
model.eval()
example_inputs = (torch.randn(2, 16, 16, 16),)
