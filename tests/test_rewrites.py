"""The rewrite stage (engine/rewrite/, Note [Rewrite stage]): attention in the spellings real code produces
becomes one scaled_dot_product_attention call and matches eager on both backends, inference and training; the
near-misses are refused with their reason; passes turn off one by one (API, CLI, compare)."""
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import engine
from engine.rewrite import REWRITES, resolve

B, H, T, D = 2, 4, 8, 16


def _qkv(batch=B, heads=H, dtype=torch.float32):
    torch.manual_seed(0)
    return tuple(torch.randn(batch, heads, T, D, dtype=dtype) for _ in range(3))


CAUSAL = torch.triu(torch.full((T, T), float("-inf")), 1)
PADDING = torch.zeros(B, 1, T, T)
PADDING[1, :, :, 6:] = torch.finfo(torch.float32).min


def hand_written(q, k, v):  # the spelling: softmax(q @ k^T * s + mask) @ v, causal via triu
    return torch.softmax(q @ k.transpose(-2, -1) * 0.25 + CAUSAL, -1) @ v


def hugging_face(q, k, v):  # transformers' eager_attention_forward, eval
    w = torch.matmul(q, k.transpose(2, 3)) * (D ** -0.5)
    w = w + PADDING[:, :, :, : k.shape[-2]]
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    w = F.dropout(w, p=0.1, training=False)
    return torch.matmul(w, v).transpose(1, 2).contiguous()


def gpt2_divide(q, k, v):  # GPT-2: divide by a 0-d full(), causal mask by where() with the lowest float
    w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5, dtype=q.dtype)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
    return torch.matmul(w.softmax(-1), v)


def timm_scaled_query(q, k, v):  # timm's unfused path: the query scaled before the matmul
    q = q * D ** -0.5
    attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
    return attn @ v


def masked_fill_causal(q, k, v):  # masked_fill of a boolean triu, -inf
    w = q @ k.transpose(-2, -1) / math.sqrt(D)
    w = w.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return w.softmax(-1) @ v


def bmm_3d(q, k, v):  # heads folded into the batch, bmm spelled out
    q, k, v = (x.reshape(B * H, T, D) for x in (q, k, v))
    return torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.25, dim=-1), v)


def grouped_query(q, k, v):  # Llama's repeat_kv: 2 key/value heads expanded to 4
    k, v = (x[:, :2, None].expand(B, 2, 2, T, D).reshape(B, H, T, D) for x in (k, v))
    return torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1) @ v


SPELLINGS = [hand_written, hugging_face, gpt2_divide, timm_scaled_query, masked_fill_causal, bmm_3d, grouped_query]


def _attention_matches(record):
    return [r for g in record.graphs for r in g.rewrites if r.rewrite == "attention" and r.applied]


def _refusals(record):
    return [r for g in record.graphs for r in g.rewrites if r.rewrite == "attention" and not r.applied]


def _ops(record):
    return [op for k in record.kernels for op in k.ops]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("fn", SPELLINGS, ids=lambda f: f.__name__)
def test_attention_spellings_become_one_sdpa_call_and_match_eager(fn, backend):
    record = engine.explore(fn, _qkv(), backend=backend)
    assert record.verify.ok, record.verify
    assert not record.errors, record.errors
    matches = _attention_matches(record)
    assert len(matches) == 1, [g.rewrites for g in record.graphs]
    match = matches[0]
    assert match.source and all(s.filename.endswith("test_rewrites.py") for s in match.source)
    assert match.fx_origins and match.replacement and match.reason
    ops = _ops(record)
    assert "aten::scaled_dot_product_attention" in ops and not any("bmm" in op for op in ops), ops
    graph = record.graphs[0]
    before = {n.name for n in graph.aten_before}
    assert set(match.nodes) <= before and set(match.replacement) <= {n.name for n in graph.aten}


def test_rewrites_off_keeps_the_matmuls():
    for setting in ("none", "-attention", []):
        record = engine.explore(hand_written, _qkv(), rewrites=setting)
        assert record.verify.ok
        assert not _attention_matches(record) and "attention" not in record.options.rewrites
        assert any("bmm" in op for op in _ops(record))


def test_resolve_names_the_passes():
    assert "attention" in resolve(None) and resolve("none") == () and resolve("attention") == ("attention",)
    assert "attention" not in resolve("-attention") and resolve("all", freezing=True) == tuple(REWRITES)
    assert not any(REWRITES[name].needs_freezing for name in resolve("all"))  # those run with freezing=True only
    with pytest.raises(ValueError, match="attention"):
        resolve("atention")


# --- near-misses: attention-shaped, refused with the reason ------------------------------------------------------

def weights_returned(q, k, v):
    w = torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1)
    return w @ v, w


def softmax_over_queries(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) * 0.25, -2) @ v


def mask_grows_the_scores(q, k, v):  # the mask broadcasts the scores up to another batch: not SDPA's broadcast
    return torch.softmax(q @ k.transpose(-2, -1) * 0.25 + torch.zeros(3, 1, H, T, T), -1) @ v


def soft_fill(q, k, v):  # a where() mask of -1e4 does not absorb the scores
    w = (q @ k.transpose(-2, -1)).masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -1e4)
    return torch.softmax(w, -1) @ v


def tensor_scale(q, k, v, s):
    return torch.softmax(q @ k.transpose(-2, -1) * s, -1) @ v


@pytest.mark.parametrize("fn, inputs, reason", [
    (weights_returned, _qkv(), "also read by"),
    (softmax_over_queries, _qkv(), "not over the keys"),
    (mask_grows_the_scores, _qkv(), "not broadcastable to the scores"),
    (soft_fill, _qkv(), "would not absorb"),
    (tensor_scale, (*_qkv(), torch.tensor(0.25)), "not known at compile time"),
], ids=["weights_returned", "softmax_dim", "mask_broadcast", "soft_fill", "tensor_scale"])
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_near_misses_are_refused_with_a_reason(fn, inputs, reason, backend):
    record = engine.explore(fn, inputs, backend=backend)
    assert record.verify.ok, record.verify
    assert not record.errors, record.errors
    assert not _attention_matches(record)
    refusals = _refusals(record)
    assert refusals and reason in refusals[0].reason, [r.reason for r in refusals]
    assert any("bmm" in op for op in _ops(record))


# --- training: the backward goes through SDPA's backward ---------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, dim=32, heads=4, dropout=0.0):
        super().__init__()
        self.qkv, self.out, self.heads, self.dropout = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), heads, dropout

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        w = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        w = w.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
        w = F.dropout(w.softmax(-1), self.dropout, self.training)
        return self.out((w @ v).transpose(1, 2).reshape(b, t, c))


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_training_goes_through_sdpa_backward(backend):
    torch.manual_seed(0)
    record = engine.explore(CausalSelfAttention().train(), (torch.randn(2, 8, 32),), backend=backend, train=True)
    verify = record.verify
    assert verify.ok, [e for e in [verify.loss, *verify.gradients] if not e.ok]
    assert not record.errors, record.errors
    forward = next(g for g in record.graphs if g.phase == "forward")
    backward = next(g for g in record.graphs if g.phase == "backward")
    assert [r.where for r in forward.rewrites if r.applied] == ["forward"]  # before the joint graph
    assert any("scaled_dot_product" in op and "backward" in op for k in backward.kernels for op in k.ops), \
        [k.ops for k in backward.kernels]
    assert not any("bmm" in op for k in backward.kernels for op in k.ops)


def test_dropout_in_training_is_refused():
    torch.manual_seed(0)
    record = engine.explore(CausalSelfAttention(dropout=0.2).train(), (torch.randn(2, 8, 32),), train=True)
    assert record.verify.ok, record.verify
    assert not _attention_matches(record)
    assert any("dropout in training" in r.reason for r in _refusals(record))


def _attention_beside_a_scan(q, k, v, h):
    """RecurrentGemma's layer: attention, and a scan written slice by slice into a buffer (`out[:, t] = s`),
    which the functional forward holds as aten.copy, an op autograd has no derivative for."""
    attention = torch.softmax(q @ k.transpose(-1, -2) * 0.125, dim=-1) @ v
    state, out = torch.zeros(h[:, 0].shape), torch.zeros_like(h)
    for t in range(h.shape[1]):
        state = state * 0.5 + h[:, t]
        out[:, t] = state
    return attention, out


def test_a_rewritten_forward_autograd_cannot_trace_trains_unrewritten():
    """Note [Where rewrites run]: the joint graph is traced from Dynamo's graph instead, our kernels still run,
    and the record says why the graph was not rewritten (no whole-graph fallback)."""
    torch.manual_seed(0)
    inputs = (torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 3, 4))
    record = engine.explore(_attention_beside_a_scan, inputs, train=True)
    assert record.verify.ok and not record.errors, (record.verify, record.errors)
    assert all(g.fallback is None for g in record.graphs)
    assert not _attention_matches(record)
    assert any("could not trace the backward of the rewritten forward" in r.reason and not r.applied
               for g in record.graphs for r in g.rewrites), [r.reason for g in record.graphs for r in g.rewrites]


def test_compile_trains_through_the_rewrite():
    torch.manual_seed(0)
    model = CausalSelfAttention()
    reference = CausalSelfAttention()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 8, 32)
    engine.compile(model)(x).sum().backward()
    reference(x).sum().backward()
    for (name, p), r in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5, msg=name)


# --- the command line -------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_rewrites_flag_and_compare_key(tmp_path):
    model = tmp_path / "attn.py"
    model.write_text("import torch\n"
                     "def model(q, k, v):\n"
                     "    return torch.softmax(q @ k.transpose(-2, -1) * 0.25, -1) @ v\n"
                     "example_inputs = tuple(torch.randn(2, 4, 8, 16) for _ in range(3))\n")
    run = [sys.executable, "-m", "engine"]
    on = json.loads(subprocess.run(run + ["explore", str(model), "--json"], capture_output=True, text=True,
                                   check=True).stdout)
    assert [r["rewrite"] for r in on["graphs"][0]["rewrites"] if r["applied"]] == ["attention"]
    assert "rewrite" in on["timings"]
    off = json.loads(subprocess.run(run + ["explore", str(model), "--json", "--rewrites", "none"],
                                    capture_output=True, text=True, check=True).stdout)
    assert off["graphs"][0]["rewrites"] == [] and off["options"]["rewrites"] == []
    bad = subprocess.run(run + ["explore", str(model), "--rewrites", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "attention" in bad.stderr
    from engine.tools.compare import SettingError, parse_side
    assert parse_side(["rewrites=-attention"]).rewrites == "-attention"
    with pytest.raises(SettingError, match="attention"):
        parse_side(["rewrites=nope"])


def test_the_matched_nodes_leave_nothing_dead_behind():
    """matmul's batching of q, k and v (expand, clone, view) goes with the matmuls: the graph after the rewrite
    has no node nobody reads (the sample's value is a select of a permute, so its batching has a clone)."""
    from engine.tools.model_file import load_model_file
    spec = load_model_file("handwritten_attention")
    graph = engine.explore(spec.model, spec.example_inputs).graphs[0]
    assert _attention_matches_in(graph)
    read = {arg for node in graph.aten for arg in node.args}
    dead = [n.name for n in graph.aten if n.op == "call_function" and n.name not in read]
    assert not dead, dead


def _attention_matches_in(graph):
    return [r for r in graph.rewrites if r.applied]
