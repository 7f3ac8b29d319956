"""Real code through the attention rewrite (Note [Attention as one call]): Hugging Face BERT, GPT-2 and Llama
with attn_implementation="eager" (their own matmul/softmax attention, not SDPA) and timm's ViT with its fused
attention off each get every layer's attention rewritten into one scaled_dot_product_attention call, the record
lists the matches, and the outputs (and, training, the gradients) match eager."""
import pytest
import torch

import engine

transformers = pytest.importorskip("transformers")


def _matches(record):
    return [r for g in record.graphs for r in g.rewrites if r.rewrite == "attention" and r.applied]


def _check(record, layers):
    assert record.verify.ok, record.verify
    assert not record.errors, record.errors
    matches = _matches(record)
    assert len(matches) == layers, [(r.applied, r.reason) for g in record.graphs for r in g.rewrites]
    assert all(m.source and m.fx_origins for m in matches)
    ops = [op for k in record.kernels for op in k.ops]
    assert not any("bmm" in op for op in ops), ops


def _ids(shape=(2, 16)):
    torch.manual_seed(0)
    return torch.randint(0, 128, shape)


@pytest.mark.slow
def test_bert_eager_attention_with_padding_mask():
    config = transformers.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0
    _check(engine.explore(lambda i, m: model(input_ids=i, attention_mask=m).last_hidden_state, (_ids(), mask)), 2)


@pytest.mark.slow
def test_gpt2_eager_attention():
    config = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                     attn_implementation="eager", bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    _check(engine.explore(lambda i: model(input_ids=i, use_cache=False).logits, (_ids(),), backend="triton"), 2)


def _llama(dtype=torch.float32):
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      attn_implementation="eager")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_llama_eager_grouped_query_attention(dtype):
    model = _llama(dtype).eval()
    _check(engine.explore(lambda i: model(input_ids=i, use_cache=False).logits, (_ids(),)), 2)


@pytest.mark.slow
def test_llama_trains_through_sdpa_backward():
    model = _llama().train()
    record = engine.explore(lambda i: model(input_ids=i, use_cache=False).logits, (_ids(),), train=True)
    _check(record, 2)
    assert all(m.where == "forward" for m in _matches(record))
    backward = [op for g in record.graphs if g.phase == "backward" for k in g.kernels for op in k.ops]
    assert sum("scaled_dot_product" in op and "backward" in op for op in backward) == 2, backward


@pytest.mark.vision  # Note [Vision lane] in tests/conftest.py
def test_timm_vit_unfused_attention():
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
                              num_classes=10).eval()
    for block in model.blocks:
        block.attn.fused_attn = False  # timm's own matmul/softmax path
    _check(engine.explore(model, (torch.randn(2, 3, 32, 32),)), 2)
