import torch
from torch import nn

torch.manual_seed(0)

description = """
**relu(x * scale + bias)** — a multiply, an add and a relu, each elementwise over a 64x1024 input, with
`scale` and `bias` broadcast along the rows. Run eagerly that is three kernels, and each one reads and writes
the whole tensor. A fusing compiler makes it **one kernel** that reads `x` once and writes the result once.
That saves about two thirds of the memory traffic, and memory traffic is what bounds elementwise work.
"""


class ScaleBiasReLU(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.relu(x * self.scale + self.bias)


model = ScaleBiasReLU(1024).eval()
example_inputs = (torch.randn(64, 1024),)
