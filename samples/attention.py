import torch
import torch.nn.functional as F

torch.manual_seed(0)

description = """
**Causal scaled dot-product attention**, `F.scaled_dot_product_attention(q, k, v, is_causal=True)` with
batch 2, 4 heads, 64 tokens and head size 32. A compiler can keep it as one fused library call (flash or
memory-efficient attention: an *extern* node). Or it can decompose it into matmul, scale, mask, softmax and
matmul, and then fuse the softmax part. Compare how our compiler and Inductor treat it.
"""


def model(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


B, H, T, D = 2, 4, 64, 32
example_inputs = (torch.randn(B, H, T, D), torch.randn(B, H, T, D), torch.randn(B, H, T, D))
