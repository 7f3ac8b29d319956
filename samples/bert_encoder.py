import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A tiny BERT-style encoder**: word + position + token-type embeddings, then two post-norm layers
(`LayerNorm(x + attn(x))`, `LayerNorm(x + mlp(x))`). An `attention_mask` argument hides padding tokens: the
second sequence has 8 padded positions. The Dropout modules are in eval mode, so they are identities and a
compiler should drop them from the graph entirely. The mask turns into a broadcast boolean input to SDPA, and
each residual add joins the LayerNorm after it.
"""

VOCAB, DIM, HEADS, LAYERS, MAX_LEN = 256, 64, 4, 2, 64


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float = 0.1):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.attn_dropout = nn.Dropout(dropout)
        self.ln1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.mlp_dropout = nn.Dropout(dropout)
        self.ln2 = nn.LayerNorm(dim)

    def forward(self, x, keep):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.qkv(x).split(C, -1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        y = self.out(y.transpose(1, 2).reshape(B, T, C))
        x = self.ln1(x + self.attn_dropout(y))
        y = self.fc2(F.gelu(self.fc1(x)))
        return self.ln2(x + self.mlp_dropout(y))


class TinyBert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, DIM)
        self.position = nn.Embedding(MAX_LEN, DIM)
        self.token_type = nn.Embedding(2, DIM)
        self.emb_norm = nn.LayerNorm(DIM)
        self.emb_dropout = nn.Dropout(0.1)
        self.layers = nn.ModuleList(EncoderLayer(DIM, HEADS) for _ in range(LAYERS))

    def forward(self, input_ids, attention_mask):
        T = input_ids.shape[1]
        positions = torch.arange(T, device=input_ids.device)
        x = self.word(input_ids) + self.position(positions) + self.token_type(torch.zeros_like(input_ids))
        x = self.emb_dropout(self.emb_norm(x))
        # (B, T) with 1 = real token -> (B, 1, 1, T) boolean: every query may attend to every real key
        keep = attention_mask[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, keep)
        return x


model = TinyBert().eval()  # eval: Dropout does nothing


def example_inputs():
    input_ids = torch.randint(0, VOCAB, (2, 32))
    attention_mask = torch.ones(2, 32, dtype=torch.long)
    attention_mask[1, 24:] = 0  # the second sequence is 24 tokens long, padded to 32
    return (input_ids, attention_mask)
