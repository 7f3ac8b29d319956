"""The shapes of issue 10 (tiling) for `python -m engine bench gpu`: transposes, permutes, reductions over a
non-innermost axis and long rows, at H200 sizes (tiny ones for --dry-run). Each is timed ours vs Inductor
with triton.testing.do_bench like every other case of that bench:

    python -m engine bench gpu --skip-tests --only transposed_add,column_sum,full_sum,few_column_sum,nchw_sum_dim1,\\
se_channels_last,softmax_32000,softmax_50257,log_softmax_32000,log_softmax_50257,cross_entropy_32000,cross_entropy_50257,layernorm_bf16,\\
permute_add_fp16
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def transposed_add(x, y):
    return x.t() + y


def column_sum(x):
    return x.sum(0)


def full_sum(x):
    return x.sum()


def sum_dim1(x):
    return x.sum(1)


def scale_by_mean(x):  # squeeze-excitation's shape: a column reduction and a full-size store along the reduction
    return x * x.mean((2, 3), keepdim=True)


def softmax(x):
    return torch.softmax(x, dim=-1)


def log_softmax(x):
    return torch.log_softmax(x, dim=-1)


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


def permute_add(x, y):
    return x.permute(0, 2, 3, 1) + y


def qkv_cat(q, k, v):  # the attention backward's gradient of a fused qkv projection: three (B, H, T, d) -> (B, T, 3*H*d)
    b, h, t, d = q.shape
    return torch.cat([g.transpose(1, 2).reshape(b, t, h * d) for g in (q, k, v)], dim=-1)


def tiling_cases(device: str, small: bool) -> list[dict]:
    n = lambda big, tiny: tiny if small else big  # noqa: E731
    f32 = dict(device=device, dtype=torch.float32)
    side = n(8192, 64)
    batch, channels, height = n(32, 2), n(256, 16), n(56, 8)
    cases = [
        dict(name="transposed_add", model=transposed_add,
             inputs=lambda: (torch.randn(side, side, **f32), torch.randn(side, side, **f32))),
        dict(name="column_sum", model=column_sum, inputs=lambda: (torch.randn(side, side, **f32),)),
        dict(name="full_sum", model=full_sum, inputs=lambda: (torch.randn(side, side, **f32),)),  # split
        dict(name="few_column_sum", model=column_sum, inputs=lambda: (torch.randn(n(1 << 22, 1 << 17), 8, **f32),)),
        dict(name="nchw_sum_dim1", model=sum_dim1,
             inputs=lambda: (torch.randn(batch, channels, height, height, **f32),)),
        dict(name="se_channels_last", model=scale_by_mean,
             inputs=lambda: (torch.randn(batch, channels, height, height, **f32).to(memory_format=torch.channels_last),)),
        dict(name="layernorm_bf16", model=nn.LayerNorm(n(5120, 320)).to(device, torch.bfloat16),
             inputs=lambda: (torch.randn(n(4096, 16), n(5120, 320), device=device, dtype=torch.bfloat16),)),
        # a bias's gradient in a bf16 training step: a column sum of a tokens x features gradient (Note [Column
        # splits by bytes]: 8192 x 4096 and 8192 x 3072 ran 3-4x Inductor's time in one unsplit column kernel)
        dict(name="bias_grad_bf16_4096", model=column_sum,
             inputs=lambda: (torch.randn(n(8192, 512), n(4096, 256), device=device, dtype=torch.bfloat16),)),
        dict(name="bias_grad_bf16_3072", model=column_sum,
             inputs=lambda: (torch.randn(n(8192, 512), n(3072, 192), device=device, dtype=torch.bfloat16),)),
        # the qkv gradient's concatenation (Note [Masked loads]: each element read from one input, not three)
        dict(name="qkv_cat_bf16", model=qkv_cat,
             inputs=lambda: tuple(torch.randn(n(8, 2), n(16, 2), n(1024, 32), 64, device=device, dtype=torch.bfloat16)
                                  for _ in range(3))),
        dict(name="permute_add_fp16", model=permute_add,
             inputs=lambda: (torch.randn(batch, channels, height, height, device=device, dtype=torch.float16),
                             torch.randn(batch, height, height, channels, device=device, dtype=torch.float16))),
    ]
    for width in (32000, 50257):
        rows, columns = n(2048, 4), n(width, width // 16 + 1)
        cases += [
            dict(name=f"softmax_{width}", model=softmax, inputs=lambda r=rows, c=columns: (torch.randn(r, c, **f32),)),
            dict(name=f"log_softmax_{width}", model=log_softmax,
                 inputs=lambda r=rows, c=columns: (torch.randn(r, c, **f32),)),
            dict(name=f"cross_entropy_{width}", model=cross_entropy,
                 inputs=lambda r=rows, c=columns: (torch.randn(r, c, **f32),
                                                   torch.randint(0, c, (r,), device=device))),
        ]
    return cases
