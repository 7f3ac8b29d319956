import math

import torch
from torch import nn

torch.manual_seed(0)

description = """
**Hand-written causal attention**, the way model code spells it without `F.scaled_dot_product_attention`:
`softmax(q @ k.transpose(-2, -1) / sqrt(d) + mask) @ v` with a causal mask from `torch.triu`, between a query/key/
value projection and an output projection (batch 2, 4 heads, 32 tokens, head size 16). After decomposition this is
two batched matmuls (expand, view, bmm), a divide, an add, the softmax's five nodes and a view back: the **Rewrites**
stage finds the pattern and replaces it with one `scaled_dot_product_attention` library call that never writes
the 32x32 scores of each head to memory. Compare with `--rewrites none` to see the matmuls and the softmax kernel.
"""

DIM, HEADS, T = 64, 4, 32


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int = DIM, heads: int = HEADS):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), diagonal=1))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)
        weights = torch.softmax(scores + self.mask[:T, :T], dim=-1)
        y = weights @ v
        return self.out(y.transpose(1, 2).reshape(B, T, C))


model = CausalSelfAttention().eval()
example_inputs = (torch.randn(2, T, DIM),)
