#!/usr/bin/env python3
"""Where a call's host time goes, ours beside Inductor's, for zoo models (engine/tools/zoo.py) in one mode.

    python scripts/launch_profile.py tv_mobilenet_v3_small,timm_efficientnet_b0 [--mode reduce-overhead]
    python scripts/launch_profile.py tv_mobilenet_v3_small --dry-run      # the CPU, tiny configs

Small models on a GPU are host bound: the GPU waits while Python, the dispatcher and the driver start its
kernels. Per model and compiler this prints the host microseconds per call (calls queued without waiting
for the GPU, so the figure is what the host spends), `bench gpu`'s do_bench time of the same call (far above the
host time: the call waits for the GPU somewhere), the synchronizing operations of one call (torch's sync debug
mode, with their Python lines), the GPU kernels launched per call and their device time, and the profiler's
tables of host time and of device time by op, so a gap to Inductor can be read as "more launches", "dearer
launches", "a sync" or "slower kernels" (reduce-overhead is device bound) and traced to the ops that cost it.
With $OUT set, the tables, our generated wrapper and module, and Inductor's output code go to $OUT/launch/.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

CALLS = 20  # per measurement on a GPU; --dry-run makes one (the interpreter takes seconds a call)


def host_us(fn, inputs, device: str) -> float:
    """Median over rounds of the host time per call, calls queued without synchronizing in between."""
    rounds = []
    with torch.no_grad():
        for _ in range(5 if device == "cuda" else 1):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(CALLS):
                fn(*inputs)
            rounds.append((time.perf_counter() - start) / CALLS * 1e6)
            if device == "cuda":
                torch.cuda.synchronize()
    return sorted(rounds)[len(rounds) // 2]


def device_ms(fn, inputs, device: str) -> float | None:
    """`bench gpu`'s figure for the same call (triton.testing.do_bench median), beside the host time: a call whose
    do_bench time is well above its host time waits for the GPU somewhere (a sync), one at its host time is host
    bound."""
    if device != "cuda":
        return None
    from triton.testing import do_bench

    with torch.no_grad():
        return float(do_bench(lambda: fn(*inputs), warmup=25, rep=200, return_mode="median"))


def synchronizing_calls(fn, inputs, device: str) -> list[str]:
    """Where one call makes the host wait for the GPU: torch's sync debug mode warns at each synchronizing
    operation (a copy to the host, an .item(), a blocking copy from pageable memory), located in Python."""
    if device != "cuda":
        return []
    import warnings

    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn(*inputs)
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return [f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchronizing" in str(w.message)]


def profile(fn, inputs, device: str) -> tuple[str, float, float]:
    """(the profiler's tables by host time and, on a GPU, by device time; GPU kernels and their device
    microseconds per call)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.no_grad(), torch_profile(activities=activities, record_shapes=True) as prof:
        for _ in range(CALLS):
            fn(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
    events = prof.key_averages(group_by_input_shape=True)  # which tensors a copy_ moved
    # kernels and copies only: a compiler's record_function ranges show on the GPU's timeline too (Inductor's
    # "## Call CompiledFxGraph ...", 4.5x the whole call's kernel time in the 2026-12-02 ResNet-50 profile)
    on_device = [e for e in events if getattr(e, "device_type", None) is not None
                 and str(e.device_type).endswith("CUDA") and not getattr(e, "is_user_annotation", False)]
    kernels = sum(e.count for e in on_device)
    device_us = sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
                    for e in on_device)
    tables = [events.table(sort_by=key, row_limit=45, max_name_column_width=70, max_shapes_column_width=80)
              for key in ["self_cpu_time_total"] + (["self_cuda_time_total"] if device == "cuda" else [])]
    return "\n\n".join(tables), kernels / CALLS, device_us / CALLS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", help="comma-separated zoo case names")
    parser.add_argument("--mode", default="default")
    parser.add_argument("--dry-run", action="store_true", help="the CPU with tiny configs (no Inductor)")
    args = parser.parse_args()
    import engine
    from engine.tools.zoo import zoo_specs

    device = "cpu" if args.dry_run else "cuda"
    if args.dry_run:
        global CALLS
        CALLS = 1
    out = Path(os.environ["OUT"], "launch") if os.environ.get("OUT") else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    specs, skipped = zoo_specs(device, set(args.names.split(",")))
    for case in skipped:
        print(f"skipping {case['name']}: {case['skipped']}")
    mode = None if args.mode == "default" else args.mode
    for spec in specs:
        compilers = {"glassbox": lambda m: engine.compile(m, backend="triton", device=device, mode=args.mode)}
        if not args.dry_run:
            compilers["inductor"] = lambda m: torch.compile(m, mode=mode)
        for name, make in compilers.items():
            torch._dynamo.reset()
            fn = make(spec.model)
            with torch.no_grad():
                if name == "inductor" and out is not None:  # its output code, for reading beside ours
                    from torch._inductor.utils import run_and_get_code
                    _, sources = run_and_get_code(fn, *spec.example_inputs)
                    (out / f"{spec.name}.{args.mode}.inductor.py").write_text("\n\n".join(sources))
                for _ in range(3 if device == "cuda" else 1):
                    fn(*spec.example_inputs)
            host = host_us(fn, spec.example_inputs, device)
            timed = device_ms(fn, spec.example_inputs, device)
            syncs = synchronizing_calls(fn, spec.example_inputs, device)
            table, kernels, device_us = profile(fn, spec.example_inputs, device)
            print(f"== {spec.name} {args.mode} {name}: host {host:.1f} us per call, do_bench "
                  f"{'-' if timed is None else f'{timed * 1e3:.1f} us'}, {len(syncs)} synchronizing calls "
                  f"{sorted(set(syncs))[:5]}, {kernels:.1f} GPU kernels per call taking {device_us:.1f} us of "
                  "device time", flush=True)
            print(table, flush=True)
            if out is not None:
                (out / f"{spec.name}.{args.mode}.{name}.txt").write_text(table)
        if out is not None:
            torch._dynamo.reset()
            record = engine.explore(spec.model, spec.example_inputs, backend="triton", device=device,
                                    mode=args.mode, name=spec.name, tolerance=spec.tolerance)
            (out / f"{spec.name}.{args.mode}.wrapper.py").write_text(
                "\n\n".join(g.code.wrapper for g in record.graphs if g.code))
            (out / f"{spec.name}.{args.mode}.ours.py").write_text(
                "\n\n".join(g.code.source for g in record.graphs if g.code))
            print(f"{spec.name}: wrapper overhead per graph",
                  [g.code.overhead for g in record.graphs if g.code], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
