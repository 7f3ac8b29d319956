"""Saved values reach the backward in the strides it was compiled for (Note [Saved values keep eager's strides]
in engine/partition.py): an elementwise op on a transposed tensor is traced with the transpose's layout, and a
backward kernel reading it (grouped-query attention's repeat_kv) must find the numbers there."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import engine


class RotaryGQA(nn.Module):
    """Llama's attention in miniature: projections viewed (B, T, heads, D) and transposed, a rotary-style
    elementwise op on the transposed key and query, the key/value heads repeated for the query heads."""

    def __init__(self, dim=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(B, T, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        angle = torch.arange(T, dtype=x.dtype)[:, None] * 0.1
        q, k = q * angle.cos() + q.flip(-1) * angle.sin(), k * angle.cos() + k.flip(-1) * angle.sin()
        repeat = self.heads // self.kv_heads
        k, v = (t[:, :, None].expand(B, self.kv_heads, repeat, T, self.head_dim)
                .reshape(B, self.heads, T, self.head_dim) for t in (k, v))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(B, T, -1))


def _check(exploration):
    verify = exploration.verify
    assert verify.ok, [(e.name, e.max_abs_err) for e in verify.gradients if not e.ok]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_grouped_query_attention_after_a_transposed_elementwise_op_trains_like_eager(backend):
    torch.manual_seed(0)
    exploration = engine.explore(RotaryGQA(), (torch.randn(2, 8, 32),), backend=backend, train=True)
    _check(exploration)
    forward = next(g for g in exploration.graphs if g.phase == "forward")
    assert forward.partition.eager_layout, "no saved value needed eager's layout: the case lost its point"


def test_a_contiguous_forward_changes_nothing():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 4))
    exploration = engine.explore(model, (torch.randn(8, 16),), backend="cpp", train=True)
    _check(exploration)
    forward = next(g for g in exploration.graphs if g.phase == "forward")
    assert forward.partition.eager_layout == []


@pytest.mark.slow
def test_hugging_face_llama_with_grouped_query_attention_trains_like_eager():
    transformers = pytest.importorskip("transformers")
    from engine.tools.zoo import LogitsOnly

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LogitsOnly(transformers.LlamaForCausalLM(config)).train()
    _check(engine.explore(model, (torch.randint(0, 128, (2, 8)),), backend="cpp", train=True))
