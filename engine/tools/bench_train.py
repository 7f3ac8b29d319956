"""Training-step benchmark: eager vs Glassbox vs Inductor (torch.compile's default backend), side by side.

    python -m engine bench train                        # CPU, 2 threads: transformer_block and gpt_decoder samples,
                                                        # a tiny Hugging Face Llama and the tiny llama_small
    python -m engine bench train --device cuda          # H200: bf16 transformer block (B=8, T=1024, D=1024) and a
                                                        # small Llama-style model, default and reduce-overhead modes
    python -m engine bench train --device cpu --small   # tiny shapes (checks the bench; times mean nothing)
    python -m engine bench train --device cuda --partition save-library-operands
                                                        # our partition saving what a backward matmul reads
                                                        # (Note [Operands the backward stores])
    python -m engine bench train --device cuda --cases resnet50 --modes default --layout contiguous
                                                        # our convolutions in eager's NCHW (A/B against auto)
    python -m engine bench train --device cuda --cases llama --modes default --profile $OUT/train_profile
                                                        # also where the time goes: torch.profiler summaries and
                                                        # tables of ours and Inductor (Note [Training-step profile])

Each case goes through engine/tools/train_bench.py's bench_train, as `python -m engine bench SAMPLE --train`
does (Note [Training-step bench]: what a step is, how gradients are checked, how activation memory is counted,
for ours, Inductor's min-cut and eager autograd). On a GPU the steps are timed as `bench gpu` times its cases
(Note [Fair GPU timing]: Inductor's compile workers shut down, a quiet host, rounds of do_bench medians in a
rotating order, the median round reported), on the CPU the three compilers take turns step by step. `--small`
builds the GPU cases' models at tiny sizes in float32 and, with `--device cpu`, runs them end to end on the CPU:
the dry run (`bench gpu --dry-run`) that checks the bench without a GPU (default mode only: CUDA graphs need
one).

In reduce-overhead mode a forward reads its CUDA graph's static copy of the activation, not the caller's
tensor, and saves that copy for the backward; the saved figures, which leave the inputs out, count it (the
block's +16 MiB, B*T*D in bf16, Inductor's as ours). The saved set is otherwise the default mode's, and the
step does no other per-step copy than the activation's and the incoming gradient's (Note [What a replayed
training step does] in engine/runtime/cuda_graphs.py), so where reduce-overhead is slower than Inductor the
kernels are: run `--profile` for their device time.

On a CPU that other processes share, run with OMP_WAIT_POLICY=passive (the table's last line says which): with
the default policy a thread that finishes a parallel region early spins on the core its partner needs, and when
the machine has more runnable processes than cores every region waits for the scheduler; steps of ~1 ms took
60-600 ms at a load of 4-6 on 2 cores, for eager as for the compilers, and the ratios were noise (0.24-1.66 in
one run). Passive waiting sleeps instead, and the same run gave steps of 6-13 ms and ratios within 0.85-1.03.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from contextlib import nullcontext
from pathlib import Path

import torch
from torch import nn

from engine import options as engine_options
from engine.runtime.timing import GPU_ROUNDS, QuietHost, gpu_rounds  # Note [Fair GPU timing]
from engine.tools import train_profile
from engine.tools.bench import set_threads
from engine.tools.json_stdout import print_json, stdout_to_stderr
from engine.tools.model_file import ModelSpec, load_model_file
from engine.tools.train_bench import bench_train


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


def _spec(name: str, model, inputs: tuple, dtype: torch.dtype) -> ModelSpec:
    model = model.to(dtype)
    inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
    return ModelSpec(name=name, filename=__file__, source="", model=model, example_inputs=inputs)


def cases(device: str, small: bool) -> list[ModelSpec]:
    block_class = type(load_model_file("transformer_block").model)
    if device == "cpu" and not small:  # issue 13's two samples, then Llama in Hugging Face's code and in ours
        return [load_model_file(sample) for sample in ("transformer_block", "gpt_decoder")] + [
            _spec("hf_llama (tiny: LlamaForCausalLM, 2 layers, D=64, B=2 T=32)", *_hf_llama(2, 32), torch.float32),
            _spec("llama_small (tiny)", LlamaStack(256, 64, 4, 2, 64), (torch.randint(0, 256, (2, 16)),),
                  torch.float32)]
    if small:  # the GPU cases' code at tiny sizes, in float32 (the CPU backend's bf16 is not the point here)
        return [_spec("transformer_block (tiny)", block_class(64, 4), (torch.randn(2, 16, 64),), torch.float32),
                _spec("llama_small (tiny)", LlamaStack(256, 64, 4, 2, 64), (torch.randint(0, 256, (2, 16)),),
                      torch.float32)] + _library_cases(small)
    return [_spec("transformer_block B=8 T=1024 D=1024 bf16", block_class(1024, 16), (torch.randn(8, 1024, 1024),),
                  torch.bfloat16),
            _spec("llama_small (4 layers, D=1024, vocab 8192, B=4 T=1024) bf16", LlamaStack(8192, 1024, 16, 4, 1024),
                  (torch.randint(0, 8192, (4, 1024)),), torch.bfloat16)] + _library_cases(small)


def _library_cases(small: bool) -> list[ModelSpec]:
    """Issue 27's training steps from their libraries' own code, random weights: torchvision's ResNet-50 (batch 32
    at 224, bf16) and a Qwen2 decoder from transformers (2 layers of 1024, batch 4 x 512, bf16); at tiny sizes in
    float32 when `small`. A library that does not import here leaves its case out, and says so."""
    specs = []
    try:
        import torchvision
    except Exception as error:  # noqa: BLE001 - e.g. a torchvision built for another torch: not our failure
        print(f"[train bench] resnet50 left out: torchvision does not import here ({type(error).__name__})",
              file=sys.stderr)
    else:
        batch, image = (2, 64) if small else (32, 224)
        torch.manual_seed(0)
        specs.append(_spec(f"resnet50 (torchvision, B={batch} at {image})" + ("" if small else " bf16"),
                           torchvision.models.resnet50(), (torch.randn(batch, 3, image, image),),
                           torch.float32 if small else torch.bfloat16))
    try:
        import transformers  # noqa: F401 - the catalogue's builder uses it; here only whether it imports
    except ImportError:
        print("[train bench] qwen2 left out: transformers is not installed", file=sys.stderr)
        return specs
    from engine.tools.model_catalog import GQA, LLAMA_KEYS, REAL, TINY, decoder

    # the catalogue's hf_qwen2 at 2 layers (D=1024, B=4 T=512 real; D=64, B=2 T=16 tiny), with Qwen2Config's own
    # special token ids (none): the catalogue's pad id 0 would make token 0's embedding row a frozen zero
    build = decoder("qwen2", LLAMA_KEYS, dict(GQA, pad_token_id=None, bos_token_id=None, eos_token_id=None),
                    layers=2)
    torch.manual_seed(0)
    model, inputs = build(TINY if small else REAL)
    width, (batch, tokens) = model.model.config.hidden_size, inputs[0].shape
    specs.append(_spec(f"qwen2 (Hugging Face Qwen2ForCausalLM, 2 layers, D={width}, B={batch} T={tokens})" +
                       ("" if small else " bf16"), model, inputs, torch.float32 if small else torch.bfloat16))
    return specs


def _hf_llama(batch: int, tokens: int) -> tuple:
    """The zoo's tiny Hugging Face Llama (engine/tools/zoo.py: GQA, rotary, RMSNorm, SwiGLU; logits only)."""
    from engine.tools.zoo import _transformers_lm

    torch.manual_seed(0)
    model, inputs = _transformers_lm("llama", True, batch, tokens)
    return model, inputs


def gpu_timer(min_time: float):
    """Note [Fair GPU timing] (engine/runtime/timing.py), as `bench gpu`'s: Inductor's compile workers shut down and
    a quiet host, then rounds of do_bench medians (CUDA events, the L2 cache flushed), the three steps in a
    rotating order; a step's time is the median of its rounds, its spread the slowest round minus the fastest.
    The rounds share `min_time` seconds of timing per step."""
    quiet = QuietHost()  # one per run: a host busy by itself is waited on once

    def measure(steps: dict) -> dict:
        quiet()
        rounds = gpu_rounds(steps, rep_ms=max(1.0, min_time * 1000 / GPU_ROUNDS))
        return {who: (statistics.median(times), max(times) - min(times)) for who, times in rounds.items()}

    return measure


def profiler_hook(folder: Path, spec: ModelSpec, mode: str, device: str, dump_code: bool):
    """bench_train's `profile` hook for --profile: each compiled step's profile (Note [Training-step profile]),
    Inductor's generated code (its cache directory exists while the hook runs) and, with `dump_code`, ours
    (an exploration of the same training step: every graph's wrapper and kernels)."""
    stem = f"{spec.name.split()[0]}.{mode}"
    profiles: dict[str, dict] = {}

    def hook(who: str, step) -> None:
        profiles[who] = train_profile.profile_step(step, device)
        if who == "glassbox":
            profiles[who]["recordings"] = train_profile.recordings()
        if who == "inductor" and dump_code:
            _copy_inductor_code(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]), folder / f"{stem}.inductor")

    def finish() -> None:
        text = train_profile.summary_text(spec.name, mode, profiles)
        print(text, flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.summary.txt").write_text(text + "\n")
        train_profile.write_tables(folder, stem, profiles)
        if dump_code:
            _dump_our_code(spec, mode, device, folder / f"{stem}.ours")

    return hook, finish


def _copy_inductor_code(cache: Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for number, path in enumerate(sorted(cache.rglob("*.py"))):
        text = path.read_text(errors="replace")
        if "def call(" in text:  # an output code module (the kernels' own files repeat what it holds)
            (folder / f"graph{number}.py").write_text(text)


def _dump_our_code(spec: ModelSpec, mode: str, device: str, folder: Path) -> None:
    import engine

    torch._dynamo.reset()
    model = spec.model.to(device)
    inputs = tuple(x.to(device) for x in spec.example_inputs)
    exploration = engine.explore(model, inputs, backend="triton" if device == "cuda" else "cpp", device=device,
                                 mode=mode, train=True, name=spec.name)
    folder.mkdir(parents=True, exist_ok=True)
    for graph in exploration.graphs:
        if graph.phase == "forward" and graph.partition.saved is not None:  # what this device's partition saves and recomputes
            (folder / f"graph{graph.index}.partition.txt").write_text(_partition_text(graph.partition))
        if graph.code is not None:
            kinds = ", ".join(f"{k.name}:{k.kind}" for k in graph.kernels)
            (folder / f"graph{graph.index}.{graph.phase}.py").write_text(
                f"# kernels: {kinds}\n\n# --- wrapper\n{graph.code.wrapper}\n\n# --- module\n{graph.code.source}")


def _partition_text(partition) -> str:
    """A forward graph's partition record as lines: saved values (bytes, reason), then recomputed ones."""
    policy = os.environ.get("GLASSBOX_PARTITION") or "min-memory"
    lines = [f"saved {partition.saved_bytes / 2**20:.2f} MiB (saving all the backward reads: "
             f"{partition.saved_all_bytes / 2**20:.2f} MiB; policy {policy})"]
    lines += [f"saved      {s.name:<24} {s.op:<28} {'x'.join(s.shape):<20} {s.bytes / 2**20:9.2f} MiB  "
              f"{s.reason}" for s in partition.saved]
    lines += [f"recomputed {r.name:<24} {r.op:<28} {'x'.join(r.shape):<20} {r.bytes / 2**20:9.2f} MiB  "
              f"from {', '.join(r.inputs)}" for r in partition.recomputed]
    return "\n".join(lines) + "\n"


def _check_words(check: dict) -> str:
    """A step check in a word: mismatch, ok, ok (fp64) where some tensor passed by float64 alone, or ok (spread)
    where some passed by eager's own spread alone (Note [Eager's own spread] in engine/eager_spread.py)."""
    if not check.get("ok"):
        return "MISMATCH"
    return "ok (spread)" if check.get("judged_by_spread") else "ok (fp64)" if check.get("judged_by_fp64") else "ok"


def table(reports: list[dict]) -> str:
    lines = [f"{'case':<62} {'mode':<16} {'eager ms':>9} {'ours ms':>9} {'ind. ms':>9} {'ours/ind':>8} "
             f"{'saved ours':>11} {'saved ind.':>11} {'saved eager':>11} {'grad err':>9} {'check':>10}"]
    for r in reports:
        if "error" in r:
            lines.append(f"{r['name']:<62} {r.get('mode', ''):<16} ERROR {r['error']}")
            continue
        saved, nan = r.get("saved_bytes") or {}, float("nan")
        lines.append(
            f"{r['name']:<62} {r['mode']:<16} {r['eager_ms']:>9.3f} {r['glassbox_ms']:>9.3f} "
            f"{r.get('inductor_ms') or nan:>9.3f} {r.get('ratio_vs_inductor') or nan:>8.2f} "
            f"{saved.get('glassbox', 0) / 2**20:>9.2f}MB {saved.get('inductor', 0) / 2**20:>9.2f}MB "
            f"{saved.get('eager', 0) / 2**20:>9.2f}MB {r['verify']['glassbox']['max_rel_err']:>9.1e} "
            f"{_check_words(r['verify']['glassbox']):>10}")
        if r.get("inductor_error"):
            lines.append(f"  Inductor failed: {r['inductor_error']}")
    if any(r.get("mode") == "reduce-overhead" for r in reports):
        lines.append("reduce-overhead: saved bytes include the forward's static copy of its activation input "
                     "(ours and Inductor's alike; see the docstring)")
    loads = sorted({round(r["load_avg_1m"], 2) for r in reports if "load_avg_1m" in r})
    lines.append("grad err: the largest error of our loss or a gradient relative to eager's largest value; "
                 "ok (fp64): where over the limit, as close to float64 as eager's; ok (spread): within eager's own "
                 "spread under one-ulp and thread-count changes (judge_step)")
    lines.append(f"our partition: {os.environ.get('GLASSBOX_PARTITION') or 'min-memory'}")
    lines.append(f"load average (1 min) while measuring: {', '.join(map(str, loads))}; "
                 f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}; ours/ind below 1: Glassbox is faster")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine bench train", description=__doc__.split("\n")[0])
    engine_options.add_flag(parser, "device")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of torch (OpenMP: set OMP_NUM_THREADS)")
    parser.add_argument("--small", action="store_true", help="tiny shapes: checks the bench, times mean nothing")
    parser.add_argument("--modes", default=None, help="comma-separated; default: default (CPU), "
                                                      "default,reduce-overhead (CUDA)")
    parser.add_argument("--min-time", type=float, default=None, metavar="SECONDS",
                        help="timing per compiler and case: default 1.0 on the CPU (taking turns), 0.3 on a GPU "
                             "(shared by the rounds of Note [Fair GPU timing]: hundreds of steps; the GPU run "
                             "shares a short device budget)")
    parser.add_argument("--no-inductor", action="store_true")
    engine_options.add_flag(parser, "templates")
    parser.add_argument("--layout", default="auto", choices=engine_options.LAYOUTS,
                        help="our 4D tensors around convolutions (Note [Channels-last training graphs] in "
                             "engine/lowering/layout.py): auto (the heuristic), channels_last, contiguous (eager's)")
    parser.add_argument("--partition", choices=engine_options.PARTITIONS, default=None,
                        help="our partition (GLASSBOX_PARTITION, Note [Operands the backward stores] in "
                             "engine/partition.py): min-memory (the default) recomputes cheap values even where "
                             "a backward matmul reads them; save-library-operands saves those instead")
    parser.add_argument("--json", metavar="PATH", nargs="?", const="-",
                        help="also write the reports as JSON to PATH; without PATH, print them on stdout and "
                             "nothing else")
    parser.add_argument("--cases", default=None, help="comma-separated words; only the cases whose name has one "
                                                      "(e.g. llama, transformer)")
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="GPU: after timing, profile a few steps of ours and Inductor (torch.profiler); a "
                             "summary per case is printed, it and the full tables are written to DIR")
    parser.add_argument("--dump-code", action="store_true",
                        help="with --profile: also write ours (an exploration of the step: every graph's code "
                             "and each forward's partition) and Inductor's code")
    args = parser.parse_args(argv)
    with stdout_to_stderr() if args.json == "-" else nullcontext():
        reports, code = bench(args)
    if args.json == "-":
        print_json(reports)
    elif args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2, default=str))
    return code


def bench(args) -> tuple[list[dict], int]:
    """Every chosen case in every mode: the reports and the exit code (1 when a case failed or a check did not
    hold)."""
    if args.partition:
        os.environ["GLASSBOX_PARTITION"] = args.partition  # read by each compile's partition
    small, device = args.small, args.device
    min_time = args.min_time if args.min_time is not None else (0.3 if device == "cuda" else 1.0)
    if device == "cpu":
        set_threads(args.threads)
    modes = (args.modes or ("default,reduce-overhead" if device == "cuda" else "default")).split(",")
    measure = gpu_timer(min_time) if device == "cuda" else None
    reports = []
    chosen = [spec for spec in cases(device, small)
              if args.cases is None or any(word in spec.name for word in args.cases.split(","))]
    for spec in chosen:
        for mode in modes:
            print(f"[train bench] {spec.name} {mode}", flush=True)
            hook, finish = profiler_hook(Path(args.profile), spec, mode, device, args.dump_code) if args.profile \
                else (None, None)
            try:
                reports.append(bench_train(spec, backend="triton" if device == "cuda" else "cpp", device=device,
                                           mode=mode, with_inductor=not args.no_inductor,
                                           min_run_time=min_time, measure=measure, profile=hook,
                                           templates=args.templates, layout=args.layout))
                if finish is not None:
                    finish()
            except Exception as error:  # noqa: BLE001 - one failing case must not hide the others
                import traceback
                traceback.print_exc()
                reports.append({"name": spec.name, "mode": mode, "error": f"{type(error).__name__}: "
                                                                          f"{str(error)[:300]}"})
            if device == "cuda":
                torch.cuda.empty_cache()
    print(table(reports), flush=True)
    bad = any("error" in r or not all(check.get("ok") for check in r["verify"].values()) for r in reports)
    return reports, (1 if bad else 0)


if __name__ == "__main__":
    sys.exit(main())
