"""Real model code (issue 11): a Llama-style decoder in its two serving shapes, prefill (a batch of prompts)
and decode (batch 1, sequence 1, attending to a cache), through both backends, in float32 and bfloat16; and,
where transformers is installed, Hugging Face's own model classes with tiny configs and random weights."""
import copy

import pytest
import torch

import engine
from engine.tools.model_file import load_model_file

SAMPLE = load_model_file("llama_decoder")
llama = __import__(type(SAMPLE.model).__module__)


def _model(dtype):
    return copy.deepcopy(SAMPLE.model).to(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_llama_sample_prefill_then_decode_matches_eager_in_float32(backend):
    torch.manual_seed(0)
    record = engine.explore(_model(torch.float32), llama.prefill_inputs(), backend=backend,
                            dynamic_inputs=[llama.decode_inputs()])
    assert record.verify.ok, record.verify
    assert not record.errors, record.errors
    assert record.runs and record.runs[0].verify.ok, record.runs  # the decode step, a graph of its own


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_llama_sample_decode_matches_eager_in_bfloat16(backend):
    torch.manual_seed(0)
    record = engine.explore(_model(torch.bfloat16), llama.decode_inputs(dtype=torch.bfloat16), backend=backend)
    assert record.verify.ok, record.verify
    assert not any(k.kind == "fallback" for k in record.kernels), "decode should need no eager op"


def test_llama_sample_prefill_matches_eager_in_bfloat16():
    torch.manual_seed(0)
    record = engine.explore(_model(torch.bfloat16), llama.prefill_inputs(dtype=torch.bfloat16))
    assert record.verify.ok, record.verify


# --- Hugging Face transformers: the library's own code --------------------------------------------------------

def _hf_llama(dtype):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval().to(dtype)
    return lambda ids: model(input_ids=ids, use_cache=False).logits


@pytest.mark.slow  # a whole Hugging Face model (Note [Two lanes])
@pytest.mark.parametrize("backend, dtype, shape", [
    ("cpp", torch.bfloat16, (1, 1)),      # decode: the shape that crashed in the library call on the GPU
    ("cpp", torch.float32, (2, 8)),       # prefill
    ("triton", torch.bfloat16, (1, 1)),
])
def test_transformers_llama_matches_eager(backend, dtype, shape):
    fn = _hf_llama(dtype)
    ids = torch.randint(0, 128, shape)
    record = engine.explore(fn, (ids,), backend=backend)
    assert record.verify.ok, record.verify
    assert record.graphs and not record.errors, record.errors


@pytest.mark.slow
def test_transformers_bert_with_attention_mask_matches_eager():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 128, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 10:] = 0  # the second sequence is padded
    record = engine.explore(lambda i, m: model(input_ids=i, attention_mask=m).last_hidden_state, (ids, mask))
    assert record.verify.ok, record.verify
