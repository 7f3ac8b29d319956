"""Matmul padding (Note [Padding misaligned matmuls]): forced on the CPU (GLASSBOX_PAD_MATMUL=always), mm, addmm
and bmm with K and N off the alignment are padded and sliced back and match eager on both backends; a frozen
weight is padded once at compile time; the cost check pads GPT-2's LM head on a GPU and not a tiny matmul (its
figures are unmeasured estimates); by default nothing is padded on the CPU."""
import pytest
import torch
from torch import nn

import engine
from engine.rewrite.padding import POLICY


def _pads(record):
    return [r for g in record.graphs for r in g.rewrites if r.rewrite == "pad_matmul" and r.applied]


def _ops(record):
    return [op for k in record.kernels for op in k.ops]


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setenv("GLASSBOX_PAD_MATMUL", "always")


def linear(x, w, b):
    return torch.nn.functional.linear(x, w, b)


def batched(a, b):
    return torch.bmm(a, b).relu()


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_forced_padding_matches_eager(forced, backend):
    torch.manual_seed(0)
    record = engine.explore(linear, (torch.randn(16, 30), torch.randn(50, 30), torch.randn(50)), backend=backend)
    assert record.verify.ok, record.verify
    assert not record.errors, record.errors
    (pad,) = _pads(record)
    assert "K 30->32" in pad.replacement_text and "N 50->52" in pad.replacement_text
    assert "aten::constant_pad_nd" in _ops(record)
    record = engine.explore(batched, (torch.randn(4, 8, 30), torch.randn(4, 30, 50)), backend=backend)
    assert record.verify.ok, record.verify
    assert len(_pads(record)) == 1 and "aten::bmm" in _ops(record)


def test_frozen_weight_is_padded_once(forced):
    torch.manual_seed(0)
    model = nn.Linear(30, 50).eval()
    record = engine.explore(model, (torch.randn(16, 30),), freezing=True)
    assert record.verify.ok, record.verify
    (pad,) = _pads(record)
    assert "padded once, at compile time" in pad.reason
    pads = [k for k in record.kernels if "aten::constant_pad_nd" in k.ops]
    assert len(pads) == 1  # the activation's K pad; the weight's was done at compile time


def test_cpu_matmuls_are_not_padded_by_default(monkeypatch):
    monkeypatch.delenv("GLASSBOX_PAD_MATMUL", raising=False)
    record = engine.explore(linear, (torch.randn(16, 30), torch.randn(50, 30), torch.randn(50)))
    assert record.verify.ok and not _pads(record)
    assert not [r for g in record.graphs for r in g.rewrites if r.rewrite == "pad_matmul"]  # no noise either


def test_cost_check_pads_gpt2_lm_head_not_a_tiny_matmul(monkeypatch):
    monkeypatch.delenv("GLASSBOX_PAD_MATMUL", raising=False)
    pays, why = POLICY.decide(1, 2048, 768, 50257, torch.float16, "cuda:0", copied_elements=768 * 50257)
    assert pays, why
    pays, why = POLICY.decide(1, 8, 30, 50, torch.float16, "cuda:0", copied_elements=8 * 30 + 30 * 50)
    assert not pays and "does not pay" in why
    assert not POLICY.decide(1, 2048, 768, 50257, torch.float32, "cuda:0", 0)[0]  # fp32: no tensor-core alignment
