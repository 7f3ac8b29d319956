#!/usr/bin/env python3
"""Training-step benchmark: eager vs Glassbox vs Inductor (torch.compile's default backend), side by side.

    python scripts/train_bench.py                       # CPU, 2 threads: transformer_block and gpt_decoder samples
    python scripts/train_bench.py --device cuda         # H200: bf16 transformer block (B=8, T=1024, D=1024) and a
                                                        # small Llama-style model, default and reduce-overhead modes
    python scripts/train_bench.py --device cpu --small  # tiny shapes (checks the script; times mean nothing)

A step is: gradients cleared, forward, loss (sum of the output, in float32), backward. Each compiler gets its own
copy of the model; before timing, its loss and every parameter's gradient are compared with eager's (max abs
error relative to the gradient's largest value). Activation memory is what the forward saves for the backward:
every tensor autograd saves during the forward (torch.autograd.graph.saved_tensors_hooks), each storage counted
once, parameters and inputs left out (they are alive anyway). For a compiled graph these are the tensors its
partition saves: ours (engine/partition.py) and Inductor's min-cut.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "2")  # our C++ kernels' OpenMP, before any library loads it

import torch  # noqa: E402
from torch import nn  # noqa: E402

import engine  # noqa: E402
from engine.tools.model_file import load_model_file  # noqa: E402


def _sample_namespace(sample: str) -> dict:
    """The globals of a sample's model file: its classes, at other sizes."""
    return type(load_model_file(sample).model).__init__.__globals__


class LlamaStack(nn.Module):
    """A small Llama-style model from gpt_decoder's own layers: embedding, RMSNorm + rotary attention + SwiGLU
    decoder layers, final norm, LM head."""

    def __init__(self, vocab: int, dim: int, heads: int, layers: int, max_len: int):
        super().__init__()
        ns = _sample_namespace("gpt_decoder")
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(ns["DecoderLayer"](dim, heads) for _ in range(layers))
        self.norm = ns["RMSNorm"](dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_len).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens):
        T = tokens.shape[1]
        cos, sin = self.cos[:T].to(self.lm_head.weight.dtype), self.sin[:T].to(self.lm_head.weight.dtype)
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def cases(device: str, small: bool) -> list[dict]:
    if device == "cpu" and not small:
        out = []
        for sample in ("transformer_block", "gpt_decoder"):
            spec = load_model_file(sample)
            out.append({"name": sample, "model": spec.model, "inputs": spec.example_inputs, "dtype": torch.float32})
        return out
    block_class = type(load_model_file("transformer_block").model)
    if small:
        return [{"name": "transformer_block", "model": block_class(64, 4), "inputs": (torch.randn(2, 16, 64),),
                 "dtype": torch.float32},
                {"name": "llama_small", "model": LlamaStack(256, 64, 4, 2, 64),
                 "inputs": (torch.randint(0, 256, (2, 16)),), "dtype": torch.float32}]
    return [{"name": "transformer_block B=8 T=1024 D=1024", "model": block_class(1024, 16),
             "inputs": (torch.randn(8, 1024, 1024),), "dtype": torch.bfloat16},
            {"name": "llama_small (4 layers, D=1024, vocab 8192, B=4 T=1024)",
             "model": LlamaStack(8192, 1024, 16, 4, 1024), "inputs": (torch.randint(0, 8192, (4, 1024)),),
             "dtype": torch.bfloat16}]


def step(fn, model, inputs):
    for p in model.parameters():
        p.grad = None
    loss = fn(*inputs).float().sum()
    loss.backward()
    return loss.detach()


def saved_activation_bytes(fn, model, inputs) -> int:
    """Note in the module docstring: bytes autograd keeps for the backward, each storage once."""
    alive = {p.untyped_storage().data_ptr() for p in model.parameters()}
    alive |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    alive |= {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in alive:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = fn(*inputs).float().sum()
    loss.backward()
    for p in model.parameters():
        p.grad = None
    return sum(storages.values())


def gradient_error(reference: nn.Module, ref_loss, model: nn.Module, loss) -> float:
    """Largest error of the loss or any gradient, relative to that tensor's largest eager value."""
    worst = abs(float(loss) - float(ref_loss)) / max(abs(float(ref_loss)), 1e-6)
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        if q.grad is None:
            continue
        if p.grad is None:
            return float("inf")
        scale = q.grad.float().abs().max().clamp_min(1e-6)
        worst = max(worst, float((p.grad.float() - q.grad.float()).abs().max() / scale))
    return worst


def timer(device: str, min_time: float):
    if device == "cuda":
        import triton.testing

        return lambda fn: triton.testing.do_bench(fn, warmup=10, rep=int(min_time * 1000), return_mode="median")

    def measure(fn):
        fn()
        times, start = [], time.perf_counter()
        while time.perf_counter() - start < min_time or len(times) < 5:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times)

    return measure


def run_case(case: dict, device: str, mode: str, measure, inductor: bool) -> dict:
    model = case["model"].to(device=device, dtype=case["dtype"]).train()
    inputs = tuple(x.to(device, case["dtype"]) if x.is_floating_point() else x.to(device) for x in case["inputs"])
    backend = "triton" if device == "cuda" else "cpp"
    compilers = {"eager": lambda m: m,
                 "glassbox": lambda m: engine.compile(m, backend=backend, device=device, mode=mode)}
    if inductor:
        compilers["inductor"] = lambda m: torch.compile(m, mode=None if mode == "default" else mode)
    report = {"name": case["name"], "mode": mode, "device": device}
    reference = copy.deepcopy(model)
    ref_loss = step(reference, reference, inputs)
    for label, make in compilers.items():
        copy_ = copy.deepcopy(model)
        fn = make(copy_)
        start = time.perf_counter()
        loss = step(fn, copy_, inputs)
        step(fn, copy_, inputs)  # a second step: CUDA graphs record on a later call
        report[f"{label}_compile_s"] = round(time.perf_counter() - start, 2)
        if label != "eager":
            report[f"{label}_grad_rel_err"] = gradient_error(reference, ref_loss, copy_, step(fn, copy_, inputs))
        report[f"{label}_ms"] = measure(lambda: step(fn, copy_, inputs))
        report[f"{label}_saved_bytes"] = saved_activation_bytes(fn, copy_, inputs)
        del loss
        torch._dynamo.reset()
    if "inductor_ms" in report:
        report["ours_over_inductor"] = report["glassbox_ms"] / report["inductor_ms"]
        report["saved_ours_over_inductor"] = report["glassbox_saved_bytes"] / max(report["inductor_saved_bytes"], 1)
    return report


def table(reports: list[dict]) -> str:
    lines = [f"{'case':<58} {'mode':<16} {'eager ms':>9} {'ours ms':>9} {'ind. ms':>9} {'ours/ind':>8} "
             f"{'saved ours':>11} {'saved ind.':>11} {'saved eager':>11} {'grad err':>9}"]
    for r in reports:
        if "error" in r:
            lines.append(f"{r['name']:<58} {r.get('mode', ''):<16} ERROR {r['error']}")
            continue
        lines.append(
            f"{r['name']:<58} {r['mode']:<16} {r['eager_ms']:>9.3f} {r['glassbox_ms']:>9.3f} "
            f"{r.get('inductor_ms', float('nan')):>9.3f} {r.get('ours_over_inductor', float('nan')):>8.2f} "
            f"{r['glassbox_saved_bytes'] / 2**20:>9.2f}MB {r.get('inductor_saved_bytes', 0) / 2**20:>9.2f}MB "
            f"{r['eager_saved_bytes'] / 2**20:>9.2f}MB {r['glassbox_grad_rel_err']:>9.1e}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of torch (OpenMP: set OMP_NUM_THREADS)")
    parser.add_argument("--small", action="store_true", help="tiny shapes: checks the script, times mean nothing")
    parser.add_argument("--modes", default=None, help="comma-separated; default: default (CPU), "
                                                      "default,reduce-overhead (CUDA)")
    parser.add_argument("--min-time", type=float, default=1.0, metavar="SECONDS")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--json", metavar="PATH", help="also write the reports as JSON here")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    modes = (args.modes or ("default,reduce-overhead" if args.device == "cuda" else "default")).split(",")
    measure = timer(args.device, args.min_time)
    reports = []
    for case in cases(args.device, args.small):
        for mode in modes:
            print(f"[train bench] {case['name']} {mode}", flush=True)
            try:
                reports.append(run_case(case, args.device, mode, measure, not args.no_inductor))
            except Exception as error:  # noqa: BLE001 - one failing case must not hide the others
                import traceback
                traceback.print_exc()
                reports.append({"name": case["name"], "mode": mode, "error": f"{type(error).__name__}: "
                                                                              f"{str(error)[:300]}"})
            if args.device == "cuda":
                torch.cuda.empty_cache()
    print(table(reports), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2, default=str))
    bad = any("error" in r or r.get("glassbox_grad_rel_err", 0) > (5e-2 if args.device == "cuda" else 1e-3)
              for r in reports)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
