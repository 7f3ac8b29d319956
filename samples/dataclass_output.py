from dataclasses import dataclass

import torch
from torch import nn

torch.manual_seed(0)

description = """
**A model that returns a `@dataclass`** holding tensors, the way Hugging Face models return `ModelOutput`
objects. Dynamo traces the dataclass construction and rebuilds the object around the graph's flat outputs,
so the compiled model returns the same type as eager. The compute is a LayerNorm'd encoder layer and a mean
pool over the sequence. The mean is a reduction that a compiler can fuse with the pointwise work before it.
"""


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor
    pooled: torch.Tensor


class Encoder(nn.Module):
    def __init__(self, dim: int = 64):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        hidden = self.norm(torch.tanh(self.proj(x)) + x)
        return EncoderOutput(last_hidden_state=hidden, pooled=hidden.mean(dim=1))


model = Encoder().eval()
example_inputs = (torch.randn(4, 16, 64),)
