import torch
from torch import nn

torch.manual_seed(0)

description = """
**A two-layer MLP**: Linear(128, 256) -> ReLU -> Linear(256, 10) on a batch of 32. The matmuls go to a
library kernel (an *extern* call: cuBLAS / MKL), which a simple compiler does not generate itself. The bias add
and the ReLU are elementwise work around them. A compiler can fuse them into one small kernel, or, with matmul
templates, into the matmul's epilogue.
"""

model = nn.Sequential(
    nn.Linear(128, 256),
    nn.ReLU(),
    nn.Linear(256, 10),
).eval()
example_inputs = (torch.randn(32, 128),)
