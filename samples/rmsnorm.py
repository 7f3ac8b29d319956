import torch
from torch import nn

torch.manual_seed(0)

description = """
**RMSNorm**, `x * rsqrt(mean(x^2, -1) + eps) * weight`, as used in LLaMA-style models, on 64x512. It is one
reduction (the mean of squares) followed by pointwise work that needs the reduced value. Written by hand, it is
several small ops; a compiler should fuse them into **one kernel per row**, the same shape as layernorm with
one reduction fewer.
"""


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


model = RMSNorm(512).eval()
example_inputs = (torch.randn(64, 512),)
