"""The model zoo: real models built from their libraries' own code, with small-but-real configs and random
weights (no download), for `python -m engine bench zoo` and `bench gpu`.

Note [Zoo]
The zoo measures the classes of work real models are made of, as their authors wrote them: many small kernels
around matmuls (Hugging Face Llama prefill 4x512 and decode 1x1, BERT with a padding mask, a T5 encoder, OPT,
GPT-2), convolution epilogues (torchvision ResNet-50, MobileNetV3-Small, ConvNeXt-T, RegNet) and, with timm,
EfficientNet and a ViT. transformers, torchvision and timm are optional: a case whose library is missing is
listed with the reason and skipped, never an error. On a GPU the cases run at their real sizes in half
precision (bf16 for the language models, fp16 for the vision ones); on the CPU (`--device cpu`) every config
shrinks to a few layers of width 64 and images of 32x32 in float32, so the zoo also runs, explores and is
checked against eager where there is no GPU. Weights are random (seeded): a zoo number is about speed and
agreement with eager, not accuracy.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

import torch

from engine.tools.model_file import ModelSpec

ZOO = "zoo"  # the CLI's name for the zoo


@dataclass
class ZooCase:
    name: str
    library: str  # the package the model comes from
    build: Callable[[bool], tuple]  # small -> (model, example inputs)
    dtype: torch.dtype  # on a GPU; the CPU runs float32
    description: str


def _transformers_lm(kind: str, small: bool, batch: int, tokens: int):
    import transformers

    width, layers, heads = (64, 2, 4) if small else (1024, 4, 16)
    vocab = 256 if small else 32000
    if kind == "llama":
        config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=width * 11 // 4,
                                          num_hidden_layers=layers, num_attention_heads=heads,
                                          num_key_value_heads=heads // 2, max_position_embeddings=1024)
        model = transformers.LlamaForCausalLM(config)
    elif kind == "opt":
        config = transformers.OPTConfig(vocab_size=vocab, hidden_size=width, ffn_dim=4 * width,
                                        num_hidden_layers=layers, num_attention_heads=heads,
                                        word_embed_proj_dim=width, max_position_embeddings=1024)
        model = transformers.OPTForCausalLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=vocab, n_embd=width, n_layer=layers, n_head=heads,
                                         n_positions=1024)
        model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, vocab, (batch, tokens))
    return LogitsOnly(model.eval()), (ids,)


class LogitsOnly(torch.nn.Module):
    """A causal LM called without a cache, returning its logits (the tensor a benchmark compares)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


def qwen3_model(dtype: torch.dtype, hidden: int = 256, layers: int = 2, heads: int = 4, vocab: int = 1024,
                seq: int = 32) -> tuple[torch.nn.Module, tuple]:
    """A small Qwen3 causal LM from transformers' own code (random, seeded weights), called without a cache and
    returning its logits, and its token ids. Raises ImportError without transformers."""
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = transformers.Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                                          num_hidden_layers=layers, num_attention_heads=heads,
                                          num_key_value_heads=heads // 2, head_dim=hidden // heads,
                                          max_position_embeddings=4 * seq)
        model = LogitsOnly(transformers.Qwen3ForCausalLM(config).to(dtype).eval())
        return model, (torch.randint(0, vocab, (1, seq)),)


class _Encoder(torch.nn.Module):
    """An encoder called with an attention mask, returning its last hidden state."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask).last_hidden_state


def _padded_batch(vocab: int, batch: int, tokens: int) -> tuple:
    ids = torch.randint(0, vocab, (batch, tokens))
    mask = torch.ones(batch, tokens, dtype=torch.long)
    mask[batch // 2:, tokens * 3 // 4:] = 0  # half the sequences end in padding
    return ids, mask


def _bert(small: bool):
    import transformers

    width, layers, heads, tokens, batch = (64, 2, 4, 16, 2) if small else (768, 4, 12, 128, 8)
    config = transformers.BertConfig(vocab_size=1024, hidden_size=width, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=4 * width)
    return _Encoder(transformers.BertModel(config).eval()), _padded_batch(1024, batch, tokens)


def _t5_encoder(small: bool):
    import transformers

    width, layers, heads, tokens, batch = (64, 2, 4, 16, 2) if small else (512, 4, 8, 128, 8)
    config = transformers.T5Config(vocab_size=1024, d_model=width, d_kv=width // heads, d_ff=4 * width,
                                   num_layers=layers, num_heads=heads)
    return _Encoder(transformers.T5EncoderModel(config).eval()), _padded_batch(1024, batch, tokens)


def _torchvision(name: str, small: bool):
    import torchvision

    model = getattr(torchvision.models, name)(weights=None, num_classes=10 if small else 1000).eval()
    size, batch = (32, 2) if small else (224, 16)
    return model, (torch.randn(batch, 3, size, size),)


def _timm(name: str, small: bool):
    import timm

    size, batch = (32, 2) if small else (224, 16)
    kwargs = {"img_size": size} if "vit" in name else {}
    model = timm.create_model(name, pretrained=False, num_classes=10 if small else 1000, **kwargs).eval()
    return model, (torch.randn(batch, 3, size, size),)


def zoo_cases() -> list[ZooCase]:
    lm = _transformers_lm
    cases = [
        ZooCase("hf_llama_prefill", "transformers", lambda small: lm("llama", small, *((2, 16) if small else (4, 512))),
                torch.bfloat16, "Hugging Face LlamaForCausalLM, prefill: 4 prompts of 512 tokens"),
        ZooCase("hf_llama_decode", "transformers", lambda small: lm("llama", small, 1, 1), torch.bfloat16,
                "Hugging Face LlamaForCausalLM, decode: batch 1, one token"),
        ZooCase("hf_bert_masked", "transformers", _bert, torch.float16,
                "Hugging Face BertModel with a padding attention mask, 8 x 128 tokens"),
        ZooCase("hf_t5_encoder", "transformers", _t5_encoder, torch.bfloat16,
                "Hugging Face T5EncoderModel with a padding mask, 8 x 128 tokens"),
        ZooCase("hf_opt", "transformers", lambda small: lm("opt", small, *((2, 16) if small else (4, 256))),
                torch.float16, "Hugging Face OPTForCausalLM, 4 x 256 tokens"),
        ZooCase("hf_gpt2", "transformers", lambda small: lm("gpt2", small, *((2, 16) if small else (4, 256))),
                torch.float16, "Hugging Face GPT2LMHeadModel, 4 x 256 tokens"),
    ]
    for name in ("resnet50", "mobilenet_v3_small", "convnext_tiny", "regnet_y_400mf"):
        cases.append(ZooCase(f"tv_{name}", "torchvision", lambda small, name=name: _torchvision(name, small),
                             torch.float16, f"torchvision {name}, 16 images of 224x224"))
    for name in ("efficientnet_b0", "vit_small_patch16_224"):
        cases.append(ZooCase(f"timm_{name}", "timm", lambda small, name=name: _timm(name, small), torch.float16,
                             f"timm {name}, 16 images of 224x224"))
    return cases


def missing_library(case: ZooCase) -> str | None:
    """Why a case cannot run here (its library is not installed), or None."""
    if importlib.util.find_spec(case.library) is None:
        return f"{case.library} is not installed"
    return None


def zoo_specs(device: str = "cpu", wanted: set[str] | None = None) -> tuple[list[ModelSpec], list[dict]]:
    """(runnable cases as ModelSpecs on `device`, skipped cases with their reasons). Note [Zoo]."""
    small = not str(device).startswith("cuda")
    specs, skipped = [], []
    for case in zoo_cases():
        if wanted and case.name not in wanted:
            continue
        reason = missing_library(case)
        if reason:
            skipped.append({"name": case.name, "skipped": reason})
            continue
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model, inputs = case.build(small)
        dtype = torch.float32 if small else case.dtype
        model = model.to(device=device, dtype=dtype)
        inputs = tuple(x.to(device=device, dtype=dtype) if x.is_floating_point() else x.to(device) for x in inputs)
        specs.append(ModelSpec(name=case.name, filename=__file__, source="", model=model, example_inputs=inputs,
                               description=case.description + (" (tiny CPU config)" if small else ""),
                               tolerance=_tolerance(dtype)))
    return specs, skipped


def _tolerance(dtype: torch.dtype) -> dict | None:
    """Half-precision models over several layers drift from eager by more than one op's rounding."""
    return {"atol": 3e-2, "rtol": 3e-2} if dtype in (torch.float16, torch.bfloat16) else None
