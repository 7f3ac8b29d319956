import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A tiny Vision Transformer**: a strided Conv2d cuts a 32x32 image into 16 patches of 8x8 and embeds each one.
A learned class token is prepended, position embeddings are added, then one pre-norm encoder layer runs and a
linear head classifies from the class token. The patch embedding is a convolution (extern) followed by a
flatten and transpose (views). The `torch.cat` with the class token and the odd sequence length (17) are worth
watching in the generated code: masks and concatenation as indexing.
"""

DIM, HEADS, PATCH, IMAGE, CLASSES = 64, 4, 8, 32, 10


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        h = self.ln1(x)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.qkv(h).split(C, -1))
        y = F.scaled_dot_product_attention(q, k, v)  # no causal mask: every patch sees every patch
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyViT(nn.Module):
    def __init__(self):
        super().__init__()
        num_patches = (IMAGE // PATCH) ** 2
        self.patch_embed = nn.Conv2d(3, DIM, kernel_size=PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(torch.randn(1, 1, DIM) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, DIM) * 0.02)
        self.encoder = EncoderLayer(DIM, HEADS)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, 16, DIM)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


model = TinyViT().eval()
example_inputs = (torch.randn(2, 3, IMAGE, IMAGE),)
