"""GPU check for the Triton backend: run the GPU tests, then time eager vs Glassbox vs Inductor.

    python -m engine bench gpu                  # tests + bench; JSON to $OUT/gpu_bench.json when OUT is set
    python -m engine bench gpu --skip-tests     # bench only
    python -m engine bench gpu --only softmax,mlp
    python -m engine bench gpu --dry-run        # no GPU: tiny shapes on the CPU (Triton interpreter), to check
                                                # that the bench itself runs; its times mean nothing
    python -m engine bench gpu --gemm           # also the GEMM-with-epilogue section (`bench gemm`):
                                                # bf16 LLM shapes, templates vs cuBLAS + epilogue vs Inductor
                                                # max-autotune; --gemm-sizes 512,2048 to shorten it
    python -m engine bench gpu --trust          # also the sandbox-on-GPU and fp16-verdict section
                                                # (engine/tools/gpu_trust.py)
    python -m engine bench gpu --train          # also the bf16 training-step section (`bench train`):
                                                # transformer block B=8 T=1024 D=1024 and a small Llama-style
                                                # model, default and reduce-overhead, vs eager and Inductor
    python -m engine bench gpu --sections chain,zoo --skip-tests    # the launch-bound chain and the model zoo
    python -m engine bench gpu --sections zoo --only hf_llama_decode,tv_resnet50
    python -m engine bench gpu --sections zoo --layout contiguous   # the zoo with eager's NCHW convolutions
    python -m engine bench gpu --zoo-json a/gpu_bench.json,b/gpu_bench.json  # one zoo table from two runs
    python -m engine bench gpu ... --json       # the whole document on stdout, nothing else

Sections (--sections, comma-separated; default tests,bench): `tests` the GPU tests; `bench` the cases below
(with issue 29's: cumsum_rows_fp32, upsample_bilinear_add_fp16, softmax_chain32, inception_v3_fp16 where
torchvision is installed; issue 28's: causal_attention_fp16, gpt2_lm_fp16 and bert_eager_attention_fp16 where
transformers is, resnet50_frozen_fp16 (freezing on both sides) where torchvision is; `--only` picks them by
name);
`chain` chains of 16 and 32 small dependent kernels (fusion cannot merge them), timed through our bound
launches, through Triton's JITFunction.run (the launch path before binding: GLASSBOX_TRITON_DIRECT_LAUNCH=0),
in reduce-overhead mode and through Inductor's two modes: the per-launch cost; `zoo` real models from
transformers/torchvision/timm (engine/tools/zoo.py, Note [Zoo]) in default and reduce-overhead mode beside
Inductor's same modes, with the geomean of ours/Inductor per mode. Missing libraries skip their models.

Needs torch, triton, sympy and pytest only (no streamlit, no network). Each case runs eager, Glassbox
(engine.compile(..., backend="triton", device="cuda")) and torch.compile (Inductor) on the same inputs; every
output is checked against eager before anything is timed; times are triton.testing.do_bench medians (it
flushes the L2 cache between runs), taken once Inductor's compile workers are shut down and the host is quiet,
in rounds with the runners' order rotating, the median round reported (Note [Fair GPU timing] in
engine/runtime/timing.py; the rounds are in the JSON). GB/s counts each distinct input tensor once plus the
outputs; the copy case (device to device) is the bandwidth limit the others are read against.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.runtime.timing import QuietHost, gpu_rounds, interleaved  # Note [Fair GPU timing]
from engine.tools.bench import sample_class
from engine.tools.bench_verdicts import Verdicts  # the engine's verdict on outputs
from engine.tools.json_stdout import print_json, stdout_to_stderr
from engine.tools.tiling_cases import tiling_cases  # issue 10's shapes

ROOT = Path(__file__).resolve().parents[2]


# --- the cases -----------------------------------------------------------------------------------------------


class ResidualLayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, residual):
        return self.norm(x + residual)


class Block(nn.Module):
    """A pre-norm transformer block: attention (SDPA) and a GELU MLP, each with a residual."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def gelu_chain(x):
    return F.gelu(x) * torch.sigmoid(x) + x


def copy(x):
    return x.clone()


def softmax(x):
    return torch.softmax(x, dim=-1)


def mlp():
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))


def cumsum_half(x):
    return x.cumsum(1) * 0.5


def upsample_add(x, y):
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False) + y


def softmax_chain(x):
    for _ in range(32):
        x = torch.softmax(x, dim=-1)
    return x


def inception_v3():
    """torchvision's Inception-v3 (random weights, eval), or None without torchvision."""
    try:
        from torchvision.models import inception_v3 as build
    except ImportError:
        return None
    return build(weights=None, aux_logits=False, init_weights=False)


def issue29_cases(device: str, small: bool) -> list[dict]:
    """Issue 29's held-out kernel classes: a scan, interpolation, pools and cats, a chain of small reductions."""
    n = lambda big, tiny: tiny if small else big  # noqa: E731
    f32, f16 = dict(device=device, dtype=torch.float32), dict(device=device, dtype=torch.float16)
    found = [
        dict(name="cumsum_rows_fp32", model=cumsum_half, inputs=lambda: (torch.randn(n(4096, 64), n(4096, 64), **f32),)),
        dict(name="upsample_bilinear_add_fp16", model=upsample_add,
             inputs=lambda: (torch.randn(n(16, 2), n(256, 4), n(64, 8), n(64, 8), **f16),
                             torch.randn(n(16, 2), n(256, 4), n(128, 16), n(128, 16), **f16))),
        dict(name="softmax_chain32", model=softmax_chain, inputs=lambda: (torch.randn(8, 64, **f32),)),
    ]
    model = inception_v3()
    if model is not None:
        found.append(dict(name="inception_v3_fp16", model=model.half(),
                          inputs=lambda: (torch.randn(n(16, 1), 3, n(299, 75), n(299, 75), **f16),)))
    return found


def causal_attention(q, k, v):
    """Attention written out by hand, causal through a triu mask: the pattern the attention rewrite turns into
    scaled_dot_product_attention (Note [Rewrite stage])."""
    t = q.shape[-2]
    mask = torch.full((t, t), float("-inf"), device=q.device, dtype=q.dtype).triu(1)
    return torch.softmax(q @ k.transpose(-2, -1) * 0.125 + mask, dim=-1) @ v


def _gpt2_lm(small: bool):
    """Hugging Face GPT-2 with its tied LM head (vocab 50257: an odd N for the output matmul)."""
    import transformers
    from engine.tools.zoo import LogitsOnly

    width, layers, heads = (64, 2, 4) if small else (768, 4, 12)
    config = transformers.GPT2Config(vocab_size=50257, n_embd=width, n_layer=layers, n_head=heads,
                                     n_positions=1024)
    return LogitsOnly(transformers.GPT2LMHeadModel(config).eval())


def _bert_eager_attention(small: bool):
    """Hugging Face BERT-base with attn_implementation="eager" (its own matmul-softmax attention) and a padding
    mask."""
    import transformers
    from engine.tools.zoo import _Encoder

    width, layers, heads = (64, 2, 4) if small else (768, 12, 12)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=width, num_hidden_layers=layers,
                                     num_attention_heads=heads, intermediate_size=4 * width,
                                     attn_implementation="eager")
    return _Encoder(transformers.BertModel(config).eval())


def _resnet50():
    try:
        from torchvision.models import resnet50
    except ImportError:
        return None
    return resnet50(weights=None)


def issue28_cases(device: str, small: bool) -> list[dict]:
    """Issue 28's graph rewrites at the issue's sizes: attention written by hand, GPT-2's odd-N LM head, BERT's
    eager attention, and ResNet-50 with freezing on both sides (Inductor's config.freezing)."""
    import importlib.util

    n = lambda big, tiny: tiny if small else big  # noqa: E731
    f16 = dict(device=device, dtype=torch.float16)
    found = [dict(name="causal_attention_fp16", model=causal_attention,
                  inputs=lambda: tuple(torch.randn(n(8, 1), n(16, 2), n(1024, 32), 64, **f16) for _ in range(3)))]
    if importlib.util.find_spec("transformers") is not None:
        from engine.tools.zoo import _padded_batch  # half the sequences end in padding, as the zoo's BERT

        found.append(dict(name="gpt2_lm_fp16", model=_gpt2_lm(small).half(),
                          inputs=lambda: (torch.randint(0, 50257, (n(4, 2), n(512, 16)), device=device),)))
        found.append(dict(name="bert_eager_attention_fp16", model=_bert_eager_attention(small).half(),
                          inputs=lambda: tuple(t.to(device) for t in _padded_batch(30522, n(8, 2), n(256, 16)))))
    model = _resnet50()
    if model is not None:
        found.append(dict(name="resnet50_frozen_fp16", model=model.half(), freezing=True,
                          inputs=lambda: (torch.randn(n(32, 2), 3, n(224, 32), n(224, 32), **f16),)))
    return found


def cases(device: str, small: bool) -> list[dict]:
    """name, model, inputs (a function of the device), mode; `small` shrinks every shape for --dry-run."""
    n = lambda big, tiny: tiny if small else big  # noqa: E731
    rows = n(8192, 64)
    f32 = dict(device=device, dtype=torch.float32)
    return [
        dict(name="copy", model=copy, inputs=lambda: (torch.randn(n(2 ** 28, 4096), **f32),)),
        dict(name="scale_bias_relu", model=sample_class("scale_bias_relu")(1024),
             inputs=lambda: (torch.randn(n(2 ** 26, 2 ** 14) // 1024, 1024, **f32),)),
        dict(name="gelu_chain", model=gelu_chain, inputs=lambda: (torch.randn(n(2 ** 26, 2 ** 14), **f32),)),
        dict(name="softmax", model=softmax, inputs=lambda: (torch.randn(rows, rows, **f32),)),
        dict(name="layernorm", model=nn.LayerNorm(rows), inputs=lambda: (torch.randn(rows, rows, **f32),)),
        dict(name="rmsnorm", model=sample_class("rmsnorm")(rows), inputs=lambda: (torch.randn(rows, rows, **f32),)),
        dict(name="residual_layernorm", model=ResidualLayerNorm(rows),
             inputs=lambda: (torch.randn(rows, rows, **f32), torch.randn(rows, rows, **f32))),
        dict(name="mlp", model=mlp(), inputs=lambda: (torch.randn(32, 128, **f32),)),
        dict(name="mlp", model=mlp(), inputs=lambda: (torch.randn(32, 128, **f32),), mode="reduce-overhead"),
        dict(name="transformer_block_bf16", model=Block(n(1024, 64), n(16, 4)).to(torch.bfloat16),
             inputs=lambda: (torch.randn(n(8, 2), n(1024, 32), n(1024, 64), device=device, dtype=torch.bfloat16),)),
        dict(name="transformer_block_bf16", model=Block(n(1024, 64), n(16, 4)).to(torch.bfloat16),
             inputs=lambda: (torch.randn(n(8, 2), n(1024, 32), n(1024, 64), device=device, dtype=torch.bfloat16),),
             mode="reduce-overhead"),
        # the tiny transformer: launch bound, where a CUDA graph pays most
        dict(name="tiny_transformer", model=Block(64, 4),
             inputs=lambda: (torch.randn(2, 32, 64, **f32),)),
        dict(name="tiny_transformer", model=Block(64, 4),
             inputs=lambda: (torch.randn(2, 32, 64, **f32),), mode="reduce-overhead"),
    ] + tiling_cases(device, small) + issue29_cases(device, small) + issue28_cases(device, small)


# --- measuring -----------------------------------------------------------------------------------------------


def timer(device: str):
    """measure(functions) -> (the host's busy cores when timing began, name -> milliseconds of each round).
    On a GPU, Note [Fair GPU timing] (engine/runtime/timing.py): Inductor's compile workers shut down, a quiet
    host, then timing.GPU_ROUNDS rounds of do_bench medians, the runners in a rotating order; on the CPU
    (--dry-run) a few interleaved rounds each."""
    if device == "cuda":
        quiet = QuietHost()  # one per run: a host busy by itself is waited on once

        def measure(functions: dict) -> tuple:
            return quiet(), gpu_rounds(functions)
        return measure

    def measure(functions: dict) -> tuple:  # a dry run: a few interleaved rounds (Note [Fair timing])
        timings = interleaved(functions, min_time_s=0.0, min_rounds=3)
        return None, {name: [timing.median_ms] for name, timing in timings.items()}
    return measure


def unique_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.numel() * t.element_size()
    return total


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


# --- the launch-bound chain and the zoo -------------------------------------------------------------------------


def chain(steps: int):
    """`steps` + 1 dependent kernels that fusion cannot merge: each reduction feeds an elementwise op over one
    element fewer (a different iteration space), which feeds the next reduction."""
    def model(x):
        for _ in range(steps):
            x = x[1:] + x.sum() * 1e-3
        return x
    model.__name__ = f"chain{steps + 1}"
    return model


def chain_cases(device: str) -> list[dict]:
    f32 = dict(device=device, dtype=torch.float32)
    cases = []
    for kernels in (16, 32):
        for mode, launch in (("default", "bound"), ("default", "jit_run"), ("reduce-overhead", "bound")):
            if mode == "reduce-overhead" and device != "cuda":
                continue
            cases.append(dict(name=f"chain{kernels}" + ("" if launch == "bound" else " [JITFunction.run]"),
                              model=chain(kernels - 1), inputs=lambda: (torch.randn(1024, **f32),), mode=mode,
                              launch=launch, kernels=kernels))
    return cases


def zoo_case_dicts(device: str, wanted: set | None) -> tuple[list[dict], list[dict]]:
    from engine.tools.zoo import zoo_specs

    specs, skipped = zoo_specs(device, wanted)
    cases = []
    for spec in specs:
        for mode in ("default", "reduce-overhead"):
            if mode == "reduce-overhead" and device != "cuda":
                continue
            cases.append(dict(name=spec.name, model=spec.model, inputs=lambda spec=spec: spec.example_inputs,
                              mode=mode, tolerance=spec.tolerance))
    return cases, skipped


def geomeans(reports: list[dict]) -> dict:
    """Per mode: the geomean of glassbox/inductor and of glassbox/eager over the cases that have both."""
    result = {}
    for mode in sorted({r.get("mode", "default") for r in reports}):
        rows = [r for r in reports if r.get("mode", "default") == mode]
        for name, key in (("ours_over_inductor", "inductor_ms"), ("ours_over_eager", "eager_ms")):
            ratios = [r["glassbox_ms"] / r[key] for r in rows if r.get("glassbox_ms") and r.get(key)]
            if ratios:
                result[f"{mode} {name}"] = math.exp(sum(map(math.log, ratios)) / len(ratios))
                result[f"{mode} {name} worst"] = max(ratios)
    return result


# Note [Zoo targets]
# Issue 11's bar for the zoo, per mode: the geomean of ours/Inductor at most 1.0, no model above 1.15 of
# Inductor, and (default mode) every model faster than eager. The whole zoo does not fit one GPU call (each
# case compiles twice and times three runners, ~25-40 s), so it runs as two calls with --only, and --zoo-json
# joins their JSON files into one table and one verdict.
GEOMEAN_TARGET, WORST_TARGET = 1.0, 1.15


def zoo_targets(reports: list[dict]) -> dict:
    """The zoo's figures against Note [Zoo targets]: geomeans, the cases that miss, and whether each bar holds."""
    result = geomeans(reports)
    above = [r["name"] for r in reports if r.get("glassbox_ms") and r.get("inductor_ms")
             and r["glassbox_ms"] > WORST_TARGET * r["inductor_ms"]]
    slower = [r["name"] for r in reports if r.get("mode", "default") == "default" and r.get("glassbox_ms")
              and r.get("eager_ms") and r["glassbox_ms"] >= r["eager_ms"]]
    failed = [r["name"] for r in reports if r.get("error") or r.get("glassbox_ok") is False]
    geomeans_ok = all(v <= GEOMEAN_TARGET for k, v in result.items() if k.endswith("ours_over_inductor"))
    result.update({f"above {WORST_TARGET} of inductor": above, "not faster than eager (default)": slower,
                   "failed or wrong": failed, "targets met": geomeans_ok and not above and not slower and not failed})
    return result


def joined_zoo(paths: list[str]) -> int:
    """--zoo-json: one table and one verdict (Note [Zoo targets]) over the zoo rows of several runs' JSON."""
    reports = [r for path in paths for r in json.loads(Path(path).read_text()).get("zoo", [])]
    print(table(reports), flush=True)
    targets = zoo_targets(reports)
    print(json.dumps(targets, indent=1), flush=True)
    return 0 if targets["targets met"] else 1


def run_case(case: dict, device: str, measure, with_inductor: bool) -> dict:
    import engine
    from engine import fallbacks
    from engine.run import flatten_outputs

    torch.manual_seed(0)
    model = case["model"]
    if isinstance(model, nn.Module):
        model = model.to(device).eval()
    inputs = case["inputs"]()
    mode = case.get("mode", "default")
    report = {"name": case["name"] + ("" if mode == "default" else f" ({mode})"), "mode": mode}
    with torch.no_grad():
        expected = model(*inputs)
        sync(device)
        outputs = flatten_outputs(expected)
        moved = unique_bytes(list(inputs)) + unique_bytes(outputs)
        report["bytes"] = moved
        runners = {"eager": model}
        torch._dynamo.reset()
        start = time.perf_counter()
        from engine.runtime import triton_build
        triton_build.DIRECT_LAUNCH = case.get("launch", "bound") == "bound"  # read when kernels load
        freezing = case.get("freezing", False)  # both sides: ours and Inductor's config.freezing
        runners["glassbox"] = engine.compile(model, backend="triton", device=device, mode=mode,
                                             layout=case.get("layout", "auto"), freezing=freezing)
        try:
            with fallbacks.collected() as eager_runs:  # Note [A fallback is loud]
                report["glassbox_compile_s"] = _first_call(runners["glassbox"], inputs, device, start)
        finally:
            triton_build.DIRECT_LAUNCH = True
        report["fallbacks"] = [run.row_text() for run in eager_runs if run.scope == "graph"]
        report["eager_ops"] = sorted({run.row_text() for run in eager_runs if run.scope == "op"})
        if with_inductor:
            start = time.perf_counter()
            runners["inductor"] = torch.compile(model, mode=None if mode == "default" else mode)
            with torch._inductor.config.patch(freezing=freezing):  # Inductor freezes while it compiles
                report["inductor_compile_s"] = _first_call(runners["inductor"], inputs, device, start)
        judge = Verdicts(model, inputs, outputs, case.get("tolerance"))
        for name, runner in runners.items():
            if name != "eager":
                report.update(judge(name, flatten_outputs(runner(*inputs))))
        if judge.fp64_note:
            report["fp64"] = judge.fp64_note
        timed = {name: (lambda runner=runner: runner(*inputs)) for name, runner in runners.items()
                 if name == "eager" or report.get(f"{name}_ok")}  # never time a wrong answer
        busy, rounds = measure(timed)
        if busy is not None:
            report["host_busy_cores"] = busy
        for name, times in rounds.items():
            milliseconds = statistics.median(times)
            report[f"{name}_ms"] = milliseconds
            report[f"{name}_rounds_ms"] = times
            report[f"{name}_gbps"] = moved / (milliseconds * 1e-3) / 1e9
    if case.get("kernels"):  # the chain: time per kernel, ours and Inductor's
        for name in ("glassbox", "inductor"):
            if report.get(f"{name}_ms"):
                report[f"{name}_us_per_kernel"] = report[f"{name}_ms"] * 1e3 / case["kernels"]
    if report.get("glassbox_ms") and not report["fallbacks"]:  # eager's time is not ours
        report["eager_over_glassbox"] = report["eager_ms"] / report["glassbox_ms"]
        if report.get("inductor_ms"):
            report["inductor_over_glassbox"] = report["inductor_ms"] / report["glassbox_ms"]
    return report


def _first_call(runner, inputs, device, start) -> float:
    runner(*inputs)
    sync(device)
    return time.perf_counter() - start


# --- reporting -----------------------------------------------------------------------------------------------


TABLE_HEADER = (f"{'case':32s} {'eager ms':>9s} {'glassbox':>9s} {'inductor':>9s} {'eager GB/s':>10s} "
                f"{'gb GB/s':>9s} {'ind GB/s':>9s} {'eager/gb':>8s} {'ind/gb':>7s}  notes")


def _fmt(value, spec):
    return format(value, spec) if isinstance(value, (int, float)) and not math.isnan(value) else "-"


def table_row(r: dict) -> str:
    """One case's line of the table."""
    notes = " ".join([r.get("error", "")] + r.get("fallbacks", []))
    for name in ("glassbox", "inductor"):
        if r.get(f"{name}_ok") is False:
            notes += f" {name} WRONG (max abs err {r.get(f'{name}_max_abs_err'):.3g})"
    return (f"{r['name']:32s} {_fmt(r.get('eager_ms'), '9.4f')} {_fmt(r.get('glassbox_ms'), '9.4f')} "
            f"{_fmt(r.get('inductor_ms'), '9.4f')} {_fmt(r.get('eager_gbps'), '10.0f')} "
            f"{_fmt(r.get('glassbox_gbps'), '9.0f')} {_fmt(r.get('inductor_gbps'), '9.0f')} "
            f"{_fmt(r.get('eager_over_glassbox'), '8.2f')} {_fmt(r.get('inductor_over_glassbox'), '7.2f')}  "
            f"{notes.strip()}")


def table(reports: list[dict]) -> str:
    lines = [TABLE_HEADER, "-" * len(TABLE_HEADER), *map(table_row, reports)]
    lines.append("eager/gb and ind/gb above 1 mean Glassbox is faster; GB/s = (distinct input bytes + output bytes) "
                 "/ time.")
    return "\n".join(lines)


def run_tests(dry_run: bool) -> dict:
    # every test file with a GPU-marked test: the app's tests import streamlit, which a GPU machine may lack
    files = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").glob("test_*.py")
                   if "pytest.mark.gpu" in path.read_text())
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
    command += ["-k", "reduce_overhead_needs_cuda or ptx or sm90"] if dry_run else ["-m", "gpu"]
    print("$", " ".join(command), flush=True)
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if os.environ.get("OUT"):  # the whole log: a failure's traceback is above the tail (session 7 lost one)
        Path(os.environ["OUT"]).mkdir(parents=True, exist_ok=True)
        (Path(os.environ["OUT"]) / "gpu_tests.log").write_text(output)
    failures = _failures(output)
    print(failures[:8000] + output[-6000:], flush=True)
    summary = [line for line in output.splitlines() if " passed" in line or " failed" in line or " error" in line]
    return {"returncode": result.returncode, "summary": summary[-1] if summary else "", "seconds":
            time.perf_counter() - start, "failures": failures[:8000], "tail": output[-4000:]}


def _failures(output: str) -> str:
    """pytest's FAILURES and ERRORS sections (each failed test's traceback), or "" when every test passed."""
    start = min((i for i in (output.find("= FAILURES ="), output.find("= ERRORS =")) if i >= 0), default=-1)
    if start < 0:
        return ""
    end = output.find("short test summary info", start)
    return output[output.rfind("\n", 0, start) + 1:output.rfind("\n", 0, end) + 1 if end >= 0 else None]


def run_script_section(module_and_arguments: list[str]) -> dict:
    """One section (`python -m MODULE ARGUMENTS`) in a process of its own: Inductor's max-autotune state and the
    GPU memory of the other sections do not leak into it."""
    command = [sys.executable, "-m", *module_and_arguments]
    print("$", " ".join(command), flush=True)
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(result.stdout[-8000:] + result.stderr[-4000:], flush=True)
    return {"returncode": result.returncode, "tail": result.stdout[-6000:]}


def run_gemm_section(dry_run: bool, sizes: str) -> dict:
    """GEMMs with epilogues (`bench gemm`): templates vs cuBLAS + epilogue vs Inductor max-autotune."""
    return run_script_section(["engine", "bench", "gemm", "--device", "cuda"]
                              + (["--dry-run"] if dry_run else ["--sizes", sizes]))


def run_profile_section(dry_run: bool) -> dict:
    """Per-kernel profile on the GPU (engine/runtime/profile.py: CUDA events per kernel, copy GB/s roof) beside
    Inductor's kernel times (torch.profiler), and one compare (fusion on vs off) timed on the device."""
    device = "cpu" if dry_run else "cuda"
    results = {}
    for sample in ("softmax", "layernorm", "mlp", "gelu_chain"):
        command = [sys.executable, "-m", "engine", "explore", sample, "--backend", "triton", "--device", device,
                   "--profile", "--json"] + ([] if dry_run else ["--inductor"])
        print("$", " ".join(command), flush=True)
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        try:
            record = json.loads(result.stdout)
        except ValueError:
            results[sample] = {"error": result.stderr[-2000:]}
            continue
        results[sample] = {
            "machine": record.get("machine"),
            "kernels": [{k: kernel.get(k) for k in ("name", "kind", "time_ms", "time_iqr_ms", "share", "gbps",
                                                     "gflops")} for g in record["graphs"] for kernel in g["kernels"]],
            "calls": [g.get("profile") for g in record["graphs"]],
            "inductor": (record.get("inductor") or {}).get("kernel_times"),
        }
        print(json.dumps(results[sample], default=str)[:3000], flush=True)
    command = [sys.executable, "-m", "engine", "compare", "layernorm", "--a", "backend=triton", f"device={device}",
               "--b", "backend=triton", f"device={device}", "fusion=off"]
    print("$", " ".join(command), flush=True)
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(result.stdout[-3000:] + result.stderr[-2000:], flush=True)
    results["compare_layernorm_fusion_off"] = {"returncode": result.returncode, "summary": result.stdout[-3000:]}
    return results


def run_train_section(dry_run: bool) -> dict:
    """bf16 training steps (`bench train`) in a process of its own, like the GEMM section."""
    return run_script_section(["engine", "bench", "train"]
                              + (["--device", "cpu", "--small", "--min-time", "0.1"] if dry_run
                                 else ["--device", "cuda"]))


def run_trust_section(dry_run: bool) -> dict:
    """The sandbox under bubblewrap on the GPU and the fp16 verdict vs Inductor (engine/tools/gpu_trust.py)."""
    return run_script_section(["engine.tools.gpu_trust", "--device", "cpu" if dry_run else "cuda"])


def environment() -> dict:
    import triton

    info = {"python": sys.version.split()[0], "torch": torch.__version__, "triton": triton.__version__,
            "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def run_cases(case_list: list[dict], device: str, measure, args, label: str) -> list[dict]:
    reports = []
    for case in case_list:
        print(f"[{label}] {case['name']} {case.get('mode', '')}".rstrip(), flush=True)
        start = time.perf_counter()
        try:
            with_inductor = not args.no_inductor and case.get("launch") != "jit_run"
            reports.append(run_case(case, device, measure, with_inductor))
        except Exception as error:  # noqa: BLE001 - one failing case must not hide the others
            traceback.print_exc()
            reports.append({"name": case["name"], "mode": case.get("mode", "default"),
                            "error": f"{type(error).__name__}: {str(error)[:300]}"})
        reports[-1]["seconds"] = time.perf_counter() - start  # compiles included: what a GPU call must budget
        # each row as it is measured: a run stopped by a time limit keeps what it measured
        print(table_row(reports[-1]), f"[{reports[-1]['seconds']:.0f} s]", flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
    print(table(reports), flush=True)
    return reports


SECTIONS = ("tests", "bench", "chain", "zoo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine bench gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--sections", default="tests,bench", help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: tiny shapes on the CPU interpreter")
    parser.add_argument("--layout", default="auto", choices=("auto", "channels_last", "contiguous"),
                        help="Glassbox's layout of the tensors around convolutions (Note [Channels-last "
                             "convolutions]): auto decides per graph; contiguous is eager's NCHW, for an A/B")
    parser.add_argument("--gemm", action="store_true", help="run the GEMM template section (`bench gemm`)")
    parser.add_argument("--gemm-sizes", default="512,2048,8192", help="M values of the GEMM section")
    parser.add_argument("--profile", action="store_true",
                        help="run the per-kernel profile section (explore --profile on the GPU, and a compare)")
    parser.add_argument("--train", action="store_true", help="run the training-step section (`bench train`)")
    parser.add_argument("--trust", action="store_true",
                        help="run the sandbox-on-GPU and fp16-verdict section (engine/tools/gpu_trust.py)")
    parser.add_argument("--zoo-json", help="comma-separated gpu_bench.json files: print their zoo rows as one "
                                           "table with one verdict (Note [Zoo targets]), and run nothing")
    parser.add_argument("--json", action="store_true", help="print the document as JSON on stdout and nothing else")
    args = parser.parse_args(argv)
    if args.zoo_json:
        return joined_zoo(args.zoo_json.split(","))
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    if sections - set(SECTIONS):
        parser.error(f"unknown sections {sorted(sections - set(SECTIONS))}; choose from {', '.join(SECTIONS)}")
    sections -= {"tests"} if args.skip_tests else set()
    sections -= {"bench"} if args.skip_bench else set()
    if not args.dry_run and not torch.cuda.is_available():
        print("bench gpu: CUDA is not available here; use --dry-run to check the bench on the CPU.", file=sys.stderr)
        return 2
    with stdout_to_stderr() if args.json else nullcontext():
        document, code = check(args, sections)
    if args.json:
        print_json(document)
    return code


def check(args, sections: set[str]) -> tuple[dict, int]:
    """The chosen sections, in order; the document (also written to $OUT/gpu_bench.json) and the exit code."""
    device = "cpu" if args.dry_run else "cuda"
    document = {"environment": environment()}
    print(json.dumps(document["environment"]), flush=True)
    if "tests" in sections:
        document["tests"] = run_tests(args.dry_run)
    measure = timer(device)
    wanted = set(args.only.split(",")) if args.only else None
    reports = []
    if "bench" in sections:
        selected = [c for c in cases(device, small=args.dry_run) if not wanted or c["name"] in wanted]
        selected = [c for c in selected if not (args.dry_run and c.get("mode") == "reduce-overhead")]
        document["bench"] = run_cases(selected, device, measure, args, "bench")
        reports += document["bench"]
    if "chain" in sections:
        document["chain"] = run_cases(chain_cases(device), device, measure, args, "chain")
        for r in document["chain"]:
            if r.get("glassbox_us_per_kernel"):
                inductor = r.get("inductor_us_per_kernel")
                print(f"  {r['name']}: {r['glassbox_us_per_kernel']:.2f} us per kernel"
                      + (f", Inductor {inductor:.2f}" if inductor else ""))
        reports += document["chain"]
    if "zoo" in sections:
        zoo, skipped = zoo_case_dicts(device, wanted)
        zoo = [dict(case, layout=args.layout) for case in zoo]
        for case in skipped:
            print(f"[zoo] skipping {case['name']}: {case['skipped']}", flush=True)
        document["zoo"] = run_cases(zoo, device, measure, args, "zoo")
        document["zoo_skipped"] = skipped
        document["zoo_geomean"] = zoo_targets(document["zoo"])
        print(json.dumps(document["zoo_geomean"], indent=1), flush=True)
        reports += document["zoo"]
    if args.gemm:
        document["gemm"] = run_gemm_section(args.dry_run, args.gemm_sizes)
    if args.profile:
        document["profile"] = run_profile_section(args.dry_run)
    if args.train:
        document["train"] = run_train_section(args.dry_run)
    if args.trust:
        document["trust"] = run_trust_section(args.dry_run)
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / "gpu_bench.json"
        path.write_text(json.dumps(document, indent=2, default=str))
        print(f"wrote {path}")
    failed_tests = document.get("tests", {}).get("returncode", 0) != 0
    # a graph of ours that ran eagerly fails the check: its time would pass for ours (Note [A fallback is loud])
    wrong = any(r.get("error") or r.get("glassbox_ok") is False or r.get("fallbacks") for r in reports)
    wrong = wrong or document.get("gemm", {}).get("returncode", 0) != 0
    wrong = wrong or document.get("train", {}).get("returncode", 0) != 0
    wrong = wrong or document.get("trust", {}).get("returncode", 0) != 0
    return document, (1 if failed_tests or wrong else 0)


if __name__ == "__main__":
    sys.exit(main())
