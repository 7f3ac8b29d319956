import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)

description = """
**A mixture-of-experts layer with top-2 routing**: a router scores 4 experts per token, `torch.topk` keeps the
best 2, and their softmax weights mix the chosen experts' outputs. A production MoE sends each expert only its
own tokens, but that needs data-dependent shapes (`nonzero`), which make Dynamo break the graph by default. This
sample keeps shapes static: it runs every expert as one batched matmul, **gathers** each token's chosen outputs
and combines them with **index_add**. Look for topk, the gather and the scatter-add in the lowered graph.
"""

TOKENS, DIM, HIDDEN, EXPERTS, TOP_K = 64, 32, 64, 4, 2


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        # all experts' weights stacked, so running every expert is one batched matmul
        self.w_in = nn.Parameter(torch.randn(EXPERTS, DIM, HIDDEN) / DIM**0.5)
        self.w_out = nn.Parameter(torch.randn(EXPERTS, HIDDEN, DIM) / HIDDEN**0.5)

    def forward(self, x):
        n = x.shape[0]
        scores, chosen = torch.topk(self.router(x), TOP_K, dim=-1)  # (n, k) each
        weights = F.softmax(scores, dim=-1)
        hidden = F.silu(torch.einsum("nd,edh->enh", x, self.w_in))
        expert_out = torch.einsum("enh,ehd->end", hidden, self.w_out)  # (experts, n, dim)
        token = torch.arange(n, device=x.device).repeat_interleave(TOP_K)  # (n * k,): 0, 0, 1, 1, ...
        picked = expert_out[chosen.reshape(-1), token]  # gather: (n * k, dim)
        picked = picked * weights.reshape(-1, 1)
        return torch.zeros_like(x).index_add(0, token, picked)  # scatter-add the k picks per token


model = MoE().eval()
example_inputs = (torch.randn(TOKENS, DIM),)
