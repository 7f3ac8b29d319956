import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**Shape bucketing**: a server pads every batch up to a multiple of 32 tokens before calling the model, and
passes a mask of the real tokens. Raw lengths 20, 10, 33, 50 and 64 become only two shapes, 32 and 64, so a
compiler that specializes on shapes compiles twice instead of five times. Compare with `dynamic_seq`, which
answers the same problem with one dynamic-shape graph. The masked mean keeps the padding out of the result, so
outputs do not depend on the bucket.
"""

BUCKET, DIM = 32, 64


def pad_to_bucket(x):
    """(B, T, D) -> ((B, T_padded, D), (B, T_padded) mask of the real tokens), with T_padded a multiple of BUCKET."""
    length = x.shape[1]
    padded = -(-length // BUCKET) * BUCKET
    mask = (torch.arange(padded) < length).expand(x.shape[0], padded)
    return F.pad(x, (0, 0, 0, padded - length)), mask


class MaskedPooler(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.proj = nn.Linear(DIM, DIM)

    def forward(self, x, mask):
        h = F.gelu(self.proj(self.norm(x)))
        m = mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1)  # mean over real tokens only


model = MaskedPooler().eval()
example_inputs = pad_to_bucket(torch.randn(2, 20, DIM))
dynamic_inputs = [pad_to_bucket(torch.randn(2, n, DIM)) for n in (10, 33, 50, 64)]
