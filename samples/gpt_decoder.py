import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A tiny LLaMA-style decoder**: token embedding, two layers of (RMSNorm -> causal attention with rotary position
embeddings -> residual, RMSNorm -> SwiGLU MLP -> residual), a final RMSNorm and the LM head. Width 64, 4 heads,
32 tokens, vocabulary 256. Matmuls and SDPA are library calls. RMSNorm, RoPE (slices, a negate, a concat and
multiply-adds) and SwiGLU's `silu(a) * b` are pointwise and reduction work that a fusing compiler should turn into
a few kernels per layer. The `cos`/`sin` tables are buffers, so the compiler sees them as constants.
"""

VOCAB, DIM, HEADS, LAYERS, MAX_LEN = 256, 64, 4, 2, 128


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = (w(x).view(B, T, self.heads, C // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        # RoPE: rotate each (even, odd) half-pair of q and k by a position-dependent angle
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, 4 * dim)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(DecoderLayer(DIM, HEADS) for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        head_dim = DIM // HEADS
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(MAX_LEN).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)  # (MAX_LEN, head_dim), matching rotate_half's layout
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


model = TinyGPT().eval()
example_inputs = (torch.randint(0, VOCAB, (2, 32)),)
