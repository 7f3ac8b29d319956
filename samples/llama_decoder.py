import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A Llama-style decoder in both of its serving shapes.** Prefill: a batch of prompts (2 x 16 tokens) goes
through once and leaves a key/value cache. Decode: one new token for one sequence (batch 1, sequence 1) attends
to that cache. Grouped-query attention (4 query heads share 2 key/value heads, `repeat_interleave`), rotary
position embeddings computed in `forward` from the positions, RMSNorm and a SwiGLU MLP, with no biases, as in
Llama. Decode is the shape real serving runs most: every matrix has a dimension of size 1 and the graph is
many small kernels, so the launch path and the layouts handed to the matmul library are what it tests
(`dynamic_inputs` holds the decode step). The cos/sin tables and the attention mask are built inside `forward`,
so the compiler sees tensors created in the graph, not buffers.
"""

VOCAB, DIM, HEADS, KV_HEADS, LAYERS, HIDDEN = 256, 64, 4, 2, 2, 128
HEAD_DIM = DIM // HEADS


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary(x, positions):
    """Rotate each (first half, second half) pair of x's last dim by an angle that grows with the position."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2, device=x.device, dtype=torch.float32) / HEAD_DIM))
    angles = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = torch.cat([angles.cos()] * 2, -1).to(x.dtype), torch.cat([angles.sin()] * 2, -1).to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(DIM, HEADS * HEAD_DIM, bias=False)
        self.k = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.v = nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.o = nn.Linear(HEADS * HEAD_DIM, DIM, bias=False)

    def forward(self, x, past_k, past_v):
        B, T, _ = x.shape
        past = past_k.shape[2]
        positions = torch.arange(past, past + T, device=x.device)
        q = rotary(self.q(x).view(B, T, HEADS, HEAD_DIM).transpose(1, 2), positions)
        k = rotary(self.k(x).view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2), positions)
        v = self.v(x).view(B, T, KV_HEADS, HEAD_DIM).transpose(1, 2)
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        # a query sees every cached position and the new ones up to its own (causal within the new tokens)
        mask = torch.ones(T, past + T, dtype=torch.bool, device=x.device).tril(past)
        groups = HEADS // KV_HEADS
        y = F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                           attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(B, T, HEADS * HEAD_DIM)), k, v


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(DIM), RMSNorm(DIM)
        self.attn = Attention()
        self.gate = nn.Linear(DIM, HIDDEN, bias=False)
        self.up = nn.Linear(DIM, HIDDEN, bias=False)
        self.down = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x, past_k, past_v):
        attended, k, v = self.attn(self.attn_norm(x), past_k, past_v)
        x = x + attended
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h)), k, v


class LlamaDecoder(nn.Module):
    """forward(ids, past_k, past_v) -> (logits, k cache, v cache); caches are [LAYERS, B, KV_HEADS, T, HEAD_DIM]."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids, past_k, past_v):
        x = self.embed(ids)
        keys, values = [], []
        for index, layer in enumerate(self.layers):
            x, k, v = layer(x, past_k[index], past_v[index])
            keys.append(k)
            values.append(v)
        return self.head(self.norm(x)), torch.stack(keys), torch.stack(values)


def empty_cache(batch: int, length: int, dtype=torch.float32):
    shape = (LAYERS, batch, KV_HEADS, length, HEAD_DIM)
    return torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)


def prefill_inputs(batch: int = 2, tokens: int = 16, dtype=torch.float32):
    """Prompts with an empty cache (length 0)."""
    return (torch.randint(0, VOCAB, (batch, tokens)), *empty_cache(batch, 0, dtype))


def decode_inputs(cached: int = 16, dtype=torch.float32):
    """One new token of one sequence, after `cached` tokens."""
    return (torch.randint(0, VOCAB, (1, 1)), *empty_cache(1, cached, dtype))


model = LlamaDecoder().eval()
example_inputs = prefill_inputs()
dynamic_inputs = [decode_inputs()]
