"""`python -m engine sweep explore`: real architectures from their libraries' own code, explored through
Glassbox on the CPU (every stage recorded), against eager: inference, training steps and dynamic shapes.
(`python -m engine sweep models` is its sibling that times compiled models against Inductor, on a GPU too.)

    python -m engine sweep explore                     # every model, inference; then the training subset
    python -m engine sweep explore --only gpt2,bert    # some models
    python -m engine sweep explore --train             # the training step too (models marked for it)
    python -m engine sweep explore --timeout 300 --json /tmp/sweep.json --md reports/model_sweep.md
    python -m engine sweep explore --dynamic           # dynamic=True over other sizes (reports/dynamic_sweep.md)

The models are nobody here's code: Hugging Face transformers (built from their Config classes with tiny sizes and
random weights, no download), torchvision and timm. transformers lives in this project's venv, torchvision and timm
in another one (--tv-python), so each model runs in its own child process under the interpreter that has its
library, with a time limit: a hang or a crash costs that model only. A child prints one JSON line:

    ok            the exploration ran and verify's verdict is "ok" (Note [Verdicts] in engine/run.py)
    mismatch      compiled outputs (or, in training, gradients) differ from eager: a bug
    crash         explore() raised, or a graph's compile failed and ran eagerly (a FallbackRecord): ours to fix
    timeout       the child ran past --timeout
    build-error   the library could not build the model here (not ours)

and, beside the verdict, every Fallback node (an op run eagerly) with its reason, graph breaks and errors.

--dynamic explores each model twice in its child: statically, then with dynamic=True on its inputs and two other
input sets (longer sequences; more images, and other resolutions where the model takes them). A dynamic row is ok
only if every size matches eager, no graph fell back, no size recompiled more often than under Dynamo alone
(Note [Dynamo's own recompiles]: the row names the guards that failed), and the dynamic graphs hold no Fallback
op that the static graphs do not ("extra fallbacks").
This is a tool, not a test: the tests that pin what it found live in tests/.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HF_PYTHON = sys.executable
TV_PYTHON = sys.executable  # --tv-python: an interpreter that has torchvision and timm where this one lacks them

# --- the models -------------------------------------------------------------------------------------------------
# (name, library, train?) -> a builder in the child. Sizes are tiny so a model compiles in seconds; shapes keep
# the architecture's structure (2 layers, 2+ heads, a vocabulary, a patch grid).

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=128,
             max_position_embeddings=64)
DECODER = dict(SMALL, num_key_value_heads=1, use_cache=False)  # GQA where the model has it
ENCODER = dict(SMALL, type_vocab_size=2)
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

HF = {  # model_type -> (config kwargs, input kind)
    "gpt2": (dict(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=128, use_cache=False), "text"),
    "llama": (DECODER, "text"),
    "mistral": (dict(DECODER, sliding_window=8), "text"),
    "qwen2": (DECODER, "text"),
    "qwen3": (dict(DECODER, head_dim=16), "text"),
    "phi": (dict(SMALL, use_cache=False), "text"),
    "phi3": (dict(DECODER, pad_token_id=0), "text"),
    "gemma": (dict(DECODER, head_dim=16), "text"),
    "gemma2": (dict(DECODER, head_dim=16, sliding_window=8), "text"),
    "bert": (ENCODER, "text"),
    "roberta": (dict(ENCODER, pad_token_id=1), "text"),
    "distilbert": (dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64, vocab_size=128, max_position_embeddings=64),
                   "text"),
    "albert": (dict(ENCODER, embedding_size=16), "text"),
    "electra": (dict(ENCODER, embedding_size=16), "text"),
    "deberta-v2": (dict(ENCODER, relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"]), "text"),
    "t5": (dict(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, vocab_size=128, use_cache=False,
                relative_attention_num_buckets=8), "t5-encoder"),
    "bart": (dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=128,
                  max_position_embeddings=64, use_cache=False), "text"),
    "opt": (dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64, vocab_size=128,
                 max_position_embeddings=64, word_embed_proj_dim=32, use_cache=False), "text"),
    "bloom": (dict(hidden_size=32, n_layer=2, n_head=2, vocab_size=128, use_cache=False), "text"),
    "falcon": (dict(SMALL, num_kv_heads=1, new_decoder_architecture=False, multi_query=True, use_cache=False),
               "text"),
    "gpt_neox": (dict(SMALL, use_cache=False), "text"),
    "mpt": (dict(d_model=32, n_layers=2, n_heads=2, expansion_ratio=2, vocab_size=128, max_seq_len=64,
                 use_cache=False), "text"),
    "whisper": (dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=128,
                     num_mel_bins=16, max_source_positions=16, max_target_positions=16, use_cache=False,
                     pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0),
                "whisper-encoder"),
    "vit": (dict(SMALL, image_size=32, patch_size=8, num_channels=3), "image32"),
    "deit": (dict(SMALL, image_size=32, patch_size=8, num_channels=3), "image32"),
    "swin": (dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4),
             "image32"),
    "convnext": (dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2), "image32"),
    "resnet": (dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic"), "image32"),
    "mobilevit": (dict(image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                       num_attention_heads=2), "image32"),
    "clip_text_model": (dict(SMALL, projection_dim=16), "text"),
    "segformer": (dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                       num_attention_heads=[1, 2], mlp_ratios=[2, 2], patch_sizes=[7, 3], strides=[4, 2],
                       decoder_hidden_size=32), "image32"),
    # more decoders and encoders: mixture of experts, state spaces, rotary variants, relative positions
    "mixtral": (dict(DECODER, num_local_experts=4, num_experts_per_tok=2), "text"),
    "qwen2_moe": (dict(DECODER, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=32), "text"),
    "mamba": (dict(hidden_size=32, num_hidden_layers=2, vocab_size=128, state_size=8, expand=2, conv_kernel=4,
                   use_cache=False), "text"),
    "gptj": (dict(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=128, rotary_dim=8, use_cache=False),
             "text"),
    "codegen": (dict(n_embd=32, n_layer=2, n_head=2, n_positions=64, n_ctx=64, vocab_size=128, rotary_dim=8,
                     use_cache=False), "text"),
    "gpt_bigcode": (dict(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=128, use_cache=False), "text"),
    "stablelm": (dict(DECODER), "text"),
    "olmo": (dict(DECODER), "text"),
    "cohere": (dict(DECODER), "text"),
    "starcoder2": (dict(DECODER), "text"),
    "roformer": (dict(ENCODER, embedding_size=32), "text"),
    "mobilebert": (dict(ENCODER, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
                        num_feedforward_networks=2), "text"),
    "funnel": (dict(d_model=32, n_head=2, d_head=16, d_inner=64, block_sizes=[1, 1], block_repeats=[1, 1],
                    vocab_size=128), "text"),
    "xlnet": (dict(d_model=32, n_layer=2, n_head=2, d_inner=64, vocab_size=128, use_mems_eval=False), "text"),
    "squeezebert": (dict(ENCODER, embedding_size=32), "text"),
    "pegasus": (dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=128,
                     max_position_embeddings=64, use_cache=False), "text"),
    "wav2vec2": (dict(SMALL, conv_dim=[16, 16], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=8,
                      num_conv_pos_embedding_groups=2), "audio"),
    "beit": (dict(SMALL, image_size=32, patch_size=8, use_relative_position_bias=True), "image32"),
    "levit": (dict(image_size=32, hidden_sizes=[16, 24, 32], num_attention_heads=[1, 2, 2], depths=[1, 1, 1],
                   key_dim=[8, 8, 8], patch_size=16), "image32"),
    "poolformer": (dict(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1]), "image32"),
    "dinov2": (dict(SMALL, image_size=32, patch_size=8), "image32"),
}
# Variants of the models above: the attention implementation transformers picks by default (sdpa), a padding
# mask (the masked-softmax path), a KV cache, half-precision weights.
HF_VARIANTS = {  # name -> (model_type, attention implementation, extra: mask | cache | bf16)
    "llama_sdpa": ("llama", "sdpa", ""), "bert_sdpa": ("bert", "sdpa", ""), "gpt2_sdpa": ("gpt2", "sdpa", ""),
    "llama_mask": ("llama", "eager", "mask"), "bert_mask": ("bert", "eager", "mask"),
    "gpt2_mask": ("gpt2", "eager", "mask"), "t5_mask": ("t5", "eager", "mask"),
    "llama_cache": ("llama", "eager", "cache"), "llama_bf16": ("llama", "eager", "bf16"),
    "bert_bf16": ("bert", "sdpa", "bf16"),
}
HF_TRAIN = {"gpt2", "llama", "bert", "t5", "vit", "resnet", "convnext", "distilbert", "qwen2", "bart", "llama_sdpa",
            "bert_mask"}

TV = {  # torchvision builder name -> kwargs
    "resnet18": {}, "mobilenet_v3_small": {}, "efficientnet_b0": {}, "convnext_tiny": {},
    "regnet_y_400mf": {}, "densenet121": {}, "squeezenet1_1": {}, "shufflenet_v2_x0_5": {},
    "mnasnet0_5": {}, "googlenet": dict(aux_logits=False, init_weights=True),
    "vit_small": dict(image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64),
    "swin_t": {}, "resnext50_32x4d": {}, "vgg11_bn": {}, "efficientnet_v2_s": {}, "swin_v2_t": {},
    "regnet_x_400mf": {}, "mobilenet_v2": {}, "alexnet": {},
    # segmentation heads: a resize back to the input's size
    "fcn_resnet50": dict(weights_backbone=None), "deeplabv3_mobilenet_v3_large": dict(weights_backbone=None),
    "lraspp_mobilenet_v3_large": dict(weights_backbone=None),
}
TV_TRAIN = {"resnet18", "mobilenet_v3_small", "convnext_tiny"}
TIMM = {"timm_resnet18": "resnet18", "timm_efficientnet_b0": "efficientnet_b0", "timm_vit_tiny": "vit_tiny_patch16_224",
        "timm_convnext_atto": "convnext_atto", "timm_mobilenetv3": "mobilenetv3_small_050",
        "timm_levit": "levit_128s", "timm_mixer": "mixer_s32_224", "timm_poolformer": "poolformer_s12",
        "timm_beit": "beit_base_patch16_224", "timm_nfnet": "nfnet_l0", "timm_ghostnet": "ghostnet_050",
        "timm_regnety": "regnety_002", "timm_deit_tiny": "deit_tiny_patch16_224", "timm_cait": "cait_xxs24_224",
        "timm_efficientformer": "efficientformer_l1"}
TIMM_TRAIN = {"timm_vit_tiny"}

MODELS = ([(f"hf_{t}", "hf", t in HF_TRAIN) for t in HF] + [(f"hf_{t}", "hf", t in HF_TRAIN) for t in HF_VARIANTS] + [(f"tv_{n}", "tv", n in TV_TRAIN) for n in TV]
          + [(n, "timm", n in TIMM_TRAIN) for n in TIMM])


def with_mask_class():
    import torch

    class WithMask(torch.nn.Module):
        """A Hugging Face model called with an attention mask (a module, so training checks its parameters)."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask)

    return WithMask


def build_hf(name: str):
    import torch
    import transformers

    model_type, attention, extra = HF_VARIANTS.get(name, (name, "eager", ""))
    kwargs, kind = HF[model_type]
    if extra == "cache":
        kwargs = dict(kwargs, use_cache=True)
    config = transformers.AutoConfig.for_model(model_type, **kwargs)
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout",
                 "activation_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout_rate", "hidden_dropout",
                 "attention_dropout_prob", "classifier_dropout"):
        if hasattr(config, name) and isinstance(getattr(config, name), float):
            setattr(config, name, 0.0)  # training steps compare gradients; dropout is a Fallback either way
    if kind == "t5-encoder":
        model = transformers.T5EncoderModel(config)
    elif kind == "whisper-encoder":
        model = transformers.WhisperModel(config).get_encoder()
    else:
        model = transformers.AutoModel.from_config(config, attn_implementation=attention)
    if hasattr(model, "set_attn_implementation"):
        try:
            model.set_attn_implementation(attention)
        except Exception:
            pass
    if extra == "bf16":
        model = model.to(torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    if kind in ("text", "t5-encoder"):
        inputs = (torch.randint(2, 128, (2, 8), generator=gen),)
        if extra == "mask":  # the second sequence padded: 5 real tokens of 8
            mask = torch.ones(2, 8, dtype=torch.long)
            mask[1, 5:] = 0
            return with_mask_class()(model), inputs + (mask,)
    elif kind == "whisper-encoder":
        inputs = (torch.randn(2, 16, 32, generator=gen),)  # mel bins x frames (2 x max_source_positions)
    elif kind == "audio":
        inputs = (torch.randn(2, 400, generator=gen),)  # raw waveform
    else:
        inputs = (torch.randn(2, 3, 32, 32, generator=gen),)
    if extra == "bf16":
        inputs = tuple(x.to(torch.bfloat16) if x.is_floating_point() else x for x in inputs)
    return model, inputs


def build_tv(name: str):
    import torch
    import torchvision

    if name == "vit_small":  # vit_b_16's own class at a small size (its builder fixes the sizes)
        model = torchvision.models.VisionTransformer(**TV[name])
        torch.nn.init.normal_(model.heads.head.weight)  # torchvision zeroes the head: outputs would be all 0
    else:
        model = torchvision.models.get_model(name, weights=None, **TV[name])
    return model, (torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)),)


def build_timm(name: str):
    import timm
    import torch

    kwargs = dict(img_size=64) if any(k in TIMM[name] for k in ("vit", "mixer", "beit", "deit", "cait")) else {}
    model = timm.create_model(TIMM[name], pretrained=False, num_classes=10, **kwargs)
    return model, (torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0)),)


def summarize(exploration) -> dict:
    """The sweep's view of one record: verdict, fallbacks with their reasons, whole-graph fallbacks, errors."""
    verify = exploration.verify.to_json()  # as the record's JSON: the sweep's summary of it
    fallbacks = Counter()
    graph_failures = []
    for graph in exploration.graphs:
        if graph.fallback is not None:
            graph_failures.append(f"{graph.phase}#{graph.index} {graph.fallback.stage}: "
                                  f"{graph.fallback.type}: {graph.fallback.message[:300]}")
        for kernel in graph.kernels:
            if kernel.kind == "fallback":
                ops = ",".join(kernel.ops) or kernel.name
                fallbacks[f"{ops}: {(kernel.reason or '')[:160]}"] += 1
    verdict = verify.get("verdict")  # a training step's verify has ok and problem, no verdict (train_verify.py)
    if verdict is None:
        verdict = "ok" if verify.get("ok") else "random" if "random" in (verify.get("problem") or "") else "mismatch"
    bad = [o for o in [verify.get("loss") or {}] + verify.get("outputs", []) + verify.get("gradients", [])
           + verify.get("buffers", []) if not o.get("ok", True)]
    return {
        "verdict": verdict, "max_abs_err": verify.get("max_abs_err"),
        "problem": verify.get("problem"), "bad": [{k: o.get(k) for k in ("name", "max_abs_err", "problem")}
                                                  for o in bad[:5]],
        "fallbacks": dict(fallbacks), "graph_failures": graph_failures, "graphs": len(exploration.graphs),
        "graph_breaks": [f"{b.reason[:160]} ({Path(b.filename).name}:{b.lineno})" for b in exploration.graph_breaks],
        "errors": [f"{e.kind}/{e.stage}: {e.message[:300]}" for e in exploration.errors],
        "kernels": sum(len(g.kernels) for g in exploration.graphs),
    }


def other_inputs(model, inputs: tuple) -> list[tuple]:
    """Two more input sets for a dynamic-shape run: token sequences 13 and 21 long (masks padded alike); images
    3 and 4 to a batch, at other resolutions where the model runs them, else at its own."""
    import torch

    gen = torch.Generator().manual_seed(1)

    def resized(x, batch, extra):
        if not x.is_floating_point():  # token ids (batch, length) or a padding mask
            if x.max() <= 1:
                mask = torch.ones(batch, 8 + extra, dtype=x.dtype)
                mask[-1, 5:] = 0
                return mask
            return torch.randint(2, 128, (batch, 8 + extra), generator=gen, dtype=x.dtype)
        shape = list(x.shape)
        shape[0] = batch
        if x.dim() == 4:  # images: other heights and widths
            shape[2], shape[3] = shape[2] + 8 * (extra // 5), shape[3] + 16 * (extra // 5)
        elif x.dim() == 2:  # a waveform: a longer one
            shape[1] += 40 * extra
        return torch.randn(shape, generator=gen, dtype=x.dtype)

    sets = []
    for batch, extra in ((3, 5), (4, 13)):
        candidate = tuple(resized(x, batch, extra) for x in inputs)
        try:
            with torch.no_grad():
                model(*candidate)
        except Exception:  # a fixed-size model (learned positions, a fixed patch grid): its own size, more images
            candidate = tuple(resized(x, batch, 0) if x.is_floating_point() else x for x in inputs)
        sets.append(candidate)
    return sets


def dynamo_recompiles(model, input_sets: list[tuple]) -> int:
    """How many of the later input sets make Dynamo alone (backend="eager", dynamic=True) compile again: the
    recompiles no backend can avoid (Note [Dynamo's own recompiles])."""
    import torch

    compiled_at = []

    def counting(gm, example_inputs):
        compiled_at.append(calls)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counting, dynamic=True)
    with torch.no_grad():
        for calls, inputs in enumerate(input_sets):
            compiled(*inputs)
    torch._dynamo.reset()
    return len({call for call in compiled_at if call > 0})


# Note [Dynamo's own recompiles]
# A dynamic row's recompile may be Dynamo's, not ours: duck sizing gives a square first image one symbol for
# its height and width, so a non-square one fails `size()[3] == size()[2]` (HF Segformer, Swin), and a branch
# on a size (Swin pads to its window only when the size is not a multiple of it) guards on that size. Inductor
# recompiles there too. So the child also runs the same input sets through Dynamo with the eager backend; a row
# is weak for recompiles only when ours recompiles more often, and the table names Dynamo's failed guards.
def dynamic_summary(static: dict, exploration, dynamo: int = 0) -> dict:
    """The dynamic run's row: its summary, the sizes' verdicts, recompiles (ours, Dynamo's alone, and the guards
    that failed) and the Fallback ops the static graphs do not have."""
    summary = summarize(exploration)
    summary["runs"] = [{"inputs": run.inputs, "new_graphs": run.new_graphs, "ok": bool(run.verify.ok)}
                       for run in exploration.runs]
    summary["recompiles"] = sum(1 for run in exploration.runs if run.new_graphs)
    summary["dynamo_recompiles"] = dynamo
    summary["failed_guards"] = sorted({guard[:200] for r in exploration.recompiles for guard in r.failed_guards})
    summary["extra_fallbacks"] = sorted(set(summary["fallbacks"]) - set(static["fallbacks"]))
    input_errors = [e for e in exploration.errors if e.kind == "inputs"]
    if summary["graph_failures"]:
        summary["status"] = "crash"
    elif summary["verdict"] != "ok" or not all(run["ok"] for run in summary["runs"]) or input_errors:
        summary["status"] = "mismatch"
    elif summary["extra_fallbacks"] or summary["recompiles"] > dynamo:
        summary["status"] = "weak"
    else:
        summary["status"] = "ok"
    return summary


def run_one(name: str, train: bool, dynamic: bool = False) -> dict:
    """In the child: build, explore (with --dynamic: statically, then with dynamic shapes), summarize."""
    import torch

    torch.manual_seed(0)
    library = dict((n, lib) for n, lib, _ in MODELS)[name]
    try:
        if library == "hf":
            model, inputs = build_hf(name[len("hf_"):])
        elif library == "tv":
            model, inputs = build_tv(name[len("tv_"):])
        else:
            model, inputs = build_timm(name)
        model.train(train)
        if not train:
            for p in model.parameters():
                p.requires_grad_(False)
        with torch.no_grad():
            model(*inputs)  # a model eager cannot run is the library's or this config's problem, not ours
    except Exception as error:
        return {"status": "build-error", "message": f"{type(error).__name__}: {error}"[:400]}
    from engine import pipeline

    start = time.perf_counter()
    try:
        exploration = pipeline.explore(model, inputs, backend="cpp", device="cpu", name=name, train=train)
    except Exception as error:
        return {"status": "crash", "message": f"{type(error).__name__}: {str(error)[:600]}",
                "traceback": traceback.format_exc()[-3000:], "seconds": round(time.perf_counter() - start, 1)}
    summary = summarize(exploration)
    if dynamic:
        others = other_inputs(model, inputs)
        torch._dynamo.reset()
        try:
            exploration = pipeline.explore(model, inputs, backend="cpp", device="cpu", name=name, dynamic=True,
                                           dynamic_inputs=others)
        except Exception as error:
            return {"status": "crash", "message": f"{type(error).__name__}: {str(error)[:600]}",
                    "traceback": traceback.format_exc()[-3000:], "seconds": round(time.perf_counter() - start, 1)}
        summary = dynamic_summary(summary, exploration, dynamo_recompiles(model, [inputs] + others))
        summary["seconds"] = round(time.perf_counter() - start, 1)
        return summary
    summary["seconds"] = round(time.perf_counter() - start, 1)
    if summary["graph_failures"]:
        summary["status"] = "crash"
    elif summary["verdict"] == "ok":
        summary["status"] = "ok"
    else:
        summary["status"] = summary["verdict"]
    return summary


def run_child(name: str, library: str, train: bool, timeout: float, tv_python: str, dynamic: bool = False) -> dict:
    python = HF_PYTHON if library == "hf" else tv_python
    command = ["nice", "-n", "5", python, "-m", "engine.tools.sweep_explore", "--child", name] + (["--train"] if train else []) + (
        ["--dynamic"] if dynamic else [])
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": timeout}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"status": "crash", "message": f"child exited {done.returncode} without a result: "
                                          f"{done.stderr[-600:]}", "seconds": round(time.perf_counter() - start, 1)}


def table(rows: list[dict]) -> str:
    lines = ["| model | mode | status | max abs err | graphs | kernels | fallbacks / failures | s |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        r = row["result"]
        notes = [f"{k} x{v}" for k, v in r.get("fallbacks", {}).items()] + r.get("graph_failures", [])
        if "runs" in r:  # a dynamic row
            notes = [f"sizes: {', '.join(run['inputs'] + (' ok' if run['ok'] else ' MISMATCH') for run in r['runs'])}",
                     f"recompiles: {r['recompiles']} (Dynamo alone: {r.get('dynamo_recompiles', '?')})"] + [
                     f"failed guard: {g}" for g in r.get("failed_guards", [])] + [
                     f"extra fallback: {f}" for f in r["extra_fallbacks"]] + (
                     r.get("graph_failures", []))
        if r.get("message"):
            notes.append(r["message"][:200])
        if r.get("graph_breaks"):
            notes.append(f"{len(r['graph_breaks'])} graph break(s)")
        err = r.get("max_abs_err")
        lines.append(f"| {row['name']} | {row['mode']} | {r['status']} | "
                     f"{'' if err is None else f'{err:.2g}'} | {r.get('graphs', '')} | {r.get('kernels', '')} | "
                     f"{'; '.join(notes).replace('|', '/')} | {r.get('seconds', '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine sweep explore", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated model names (hf_gpt2, tv_resnet18, timm_vit_tiny, ...)")
    parser.add_argument("--train", action="store_true", help="also run the training step of the models marked")
    parser.add_argument("--train-only", action="store_true", help="only the training steps")
    parser.add_argument("--all-train", action="store_true", help="train every selected model, not only the marked")
    parser.add_argument("--timeout", type=float, default=420.0, help="seconds per model and mode")
    parser.add_argument("--tv-python", default=TV_PYTHON, help="interpreter with torchvision and timm")
    parser.add_argument("--json", help="write every result to this file")
    parser.add_argument("--md", help="write the table to this markdown file")
    parser.add_argument("--dynamic", action="store_true", help="dynamic=True over other input sizes, vs static")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = run_one(args.child, args.train, args.dynamic)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    selected = MODELS
    if args.only:
        wanted = {w.strip() for w in args.only.split(",")}
        selected = [m for m in MODELS if m[0] in wanted or m[0].split("_", 1)[1] in wanted]
    if args.list:
        print("\n".join(f"{n} ({lib}{', train' if t else ''})" for n, lib, t in selected))
        return 0
    jobs = [] if args.train_only else [(n, lib, False) for n, lib, _ in selected]
    if args.train or args.train_only:
        jobs += [(n, lib, True) for n, lib, t in selected if t or args.all_train]
    rows = []
    for name, library, train in jobs:
        result = run_child(name, library, train, args.timeout, args.tv_python, args.dynamic)
        mode = ("train" if train else "infer") + (" dynamic" if args.dynamic else "")
        rows.append({"name": name, "mode": mode, "result": result})
        print(f"{name:28s} {'train' if train else 'infer'} {result['status']:12s} {result.get('seconds', '')}s "
              f"{json.dumps({k: result[k] for k in ('fallbacks', 'graph_failures', 'message', 'bad') if result.get(k)})[:600]}",
              flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    print()
    print(table(rows))
    if args.md:
        what = "dynamic shapes, " if args.dynamic else ""
        Path(args.md).write_text(f"# Model sweep (`python -m engine sweep explore`, {what}C++ backend, CPU)\n\n"
                                 f"{table(rows)}\n")
    print("\n" + ", ".join(f"{s}: {c}" for s, c in Counter(r["result"]["status"] for r in rows).items()))
    return 0 if all(r["result"]["status"] in ("ok", "build-error") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
