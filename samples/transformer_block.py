import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A pre-norm transformer block**: `x + attn(ln1(x))`, then `x + mlp(ln2(x))`, with hand-written multi-head
attention (a qkv projection, reshapes, causal SDPA and an output projection) and a GELU MLP. Width 64, 4 heads,
32 tokens, batch 2. This is where the fusion patterns come together: layernorm becomes one kernel, the
residual add can join the next layernorm, and bias + GELU join each other, while matmuls and attention stay
library calls. The reshapes and transposes should cost nothing: they are index remaps, not copies.
"""


class Block(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        # (B, T, C) -> (B, heads, T, C // heads): a view plus a transpose, no data movement needed
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


model = Block().eval()
example_inputs = (torch.randn(2, 32, 64),)
