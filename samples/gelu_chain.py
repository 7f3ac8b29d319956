import torch
import torch.nn.functional as F

torch.manual_seed(0)

description = """
**gelu(x) * sigmoid(x) + x** on 64x1024: a chain of elementwise ops that all read the same input. Eagerly
that means several kernels and a temporary tensor between each pair. A fusing compiler emits **one kernel**
that loads `x` once, computes erf, exp and the arithmetic in registers, and stores once. It is a good sample for
reading the generated math (the erf-based gelu, the sigmoid as 1 / (1 + exp(-x))).
"""


def model(x):
    return F.gelu(x) * torch.sigmoid(x) + x


example_inputs = (torch.randn(64, 1024),)
