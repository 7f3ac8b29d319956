#!/usr/bin/env python3
"""GEMMs with epilogues: Glassbox's templates vs the library call + a separate epilogue vs Inductor.

    python scripts/gemm_bench.py --device cpu --threads 2            # skinny GEMMs (batch 1-32), fp32
    python scripts/gemm_bench.py --device cuda                       # LLM-shaped bf16 GEMMs, M = 512..8192
    python scripts/gemm_bench.py --device cuda --sizes 512,2048 --only linear_silu

Runners, side by side in one process on the same inputs (every output checked against eager first):
  eager           torch: the library GEMM (cuBLAS / the CPU BLAS), then the epilogue as its own kernels
  gb_library      Glassbox with templates="off": the library GEMM, then one fused epilogue kernel of ours
  gb_template     Glassbox, default mode: the heuristic picks the template (Note [GEMM templates])
  gb_autotune     Glassbox, mode="max-autotune": tile configs timed against library + epilogue (GPU only)
  inductor        torch.compile (on the GPU with mode="max-autotune", Inductor's own GEMM templates)
Times: triton.testing.do_bench medians on the GPU; torch.utils.benchmark medians with --threads on the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402


class LinearSiLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc = nn.Linear(d, hidden, bias=False)

    def forward(self, x):
        return F.silu(self.fc(x))


class SwiGLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class ProjectionResidual(nn.Module):
    """An attention output projection with the residual add."""

    def __init__(self, d, _hidden):
        super().__init__()
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, y, residual):
        return residual + self.proj(y)


class LinearGeluResidual(nn.Module):
    def __init__(self, d, _hidden):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        return x + F.gelu(self.fc(x))


MODELS = {"linear_silu": LinearSiLU, "swiglu": SwiGLU, "proj_residual": ProjectionResidual,
          "linear_gelu_residual": LinearGeluResidual}


def cases(device: str, sizes: list[int]) -> list[dict]:
    if device == "cuda":
        d, hidden, dtype, names = 4096, 11008, torch.bfloat16, ["linear_silu", "swiglu", "proj_residual"]
    else:
        d, hidden, dtype, names = 1024, 2816, torch.float32, ["linear_silu", "swiglu", "linear_gelu_residual"]
    result = []
    for name in names:
        for m in sizes:
            count = 2 if name == "proj_residual" else 1
            result.append({"name": f"{name} M={m}", "model": MODELS[name](d, hidden), "dtype": dtype,
                           "inputs": lambda m=m, count=count: tuple(torch.randn(m, d, device=device, dtype=dtype)
                                                                    for _ in range(count))})
    return result


def measure(device: str, threads: int):
    if device == "cuda":
        from triton.testing import do_bench
        return lambda fn: float(do_bench(fn, warmup=25, rep=200, return_mode="median"))
    from torch.utils.benchmark import Timer
    return lambda fn: Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads).blocked_autorange(
        min_run_time=0.5).median * 1e3


def runners(model, device: str) -> dict:
    import engine

    found = {"eager": model,
             "gb_library": engine.compile(model, backend="triton" if device == "cuda" else "cpp", device=device,
                                          templates="off"),
             "gb_template": engine.compile(model, backend="triton" if device == "cuda" else "cpp", device=device)}
    if device == "cuda":
        found["gb_autotune"] = engine.compile(model, backend="triton", device=device, mode="max-autotune")
        found["inductor"] = torch.compile(model, mode="max-autotune")
    else:
        found["inductor"] = torch.compile(model)
    return found


def run_case(case: dict, device: str, timer, only_runners) -> dict:
    from engine.run import compare, flatten_outputs

    torch.manual_seed(0)
    model = case["model"].to(device=device, dtype=case["dtype"]).eval()
    inputs = case["inputs"]()
    report = {"name": case["name"], "dtype": str(case["dtype"]).replace("torch.", "")}
    with torch.no_grad():
        expected = flatten_outputs(model(*inputs))
        for name, runner in runners(model, device).items():
            if only_runners and name not in only_runners and name != "eager":
                continue
            torch._dynamo.reset()
            start = time.perf_counter()
            try:
                actual = flatten_outputs(runner(*inputs))
            except Exception as error:  # noqa: BLE001 - one failing runner must not hide the others
                traceback.print_exc()
                report[f"{name}_error"] = f"{type(error).__name__}: {str(error)[:200]}"
                continue
            if device == "cuda":
                torch.cuda.synchronize()
            report[f"{name}_first_call_s"] = time.perf_counter() - start
            tolerance = {"atol": 1e-1, "rtol": 5e-2} if case["dtype"] != torch.float32 else {"atol": 1e-3, "rtol": 1e-3}
            checks = [compare(e, a, tolerance) for e, a in zip(expected, actual)]
            report[f"{name}_ok"] = all(c["ok"] for c in checks)
            if report[f"{name}_ok"]:
                report[f"{name}_ms"] = timer(lambda runner=runner: runner(*inputs))
    for name in ("gb_library", "gb_template", "gb_autotune"):
        if report.get(f"{name}_ms") and report.get("inductor_ms"):
            report[f"{name}_over_inductor"] = report[f"{name}_ms"] / report["inductor_ms"]
        if report.get(f"{name}_ms") and report.get("eager_ms"):
            report[f"{name}_over_eager"] = report[f"{name}_ms"] / report["eager_ms"]
    return report


def table(reports: list[dict]) -> str:
    names = ["eager", "gb_library", "gb_template", "gb_autotune", "inductor"]
    header = f"{'case':28s} " + " ".join(f"{n:>12s}" for n in names) + f" {'tmpl/ind':>9s} {'tmpl/eager':>10s}"
    lines = [header, "-" * len(header)]
    for r in reports:
        cells = []
        for n in names:
            value = r.get(f"{n}_ms")
            cells.append(f"{value:12.4f}" if value else f"{'WRONG' if r.get(f'{n}_ok') is False else '-':>12s}")
        best = min([r.get(f"{n}_over_inductor") for n in ("gb_template", "gb_autotune") if r.get(f"{n}_over_inductor")],
                   default=None)
        ratio = f"{best:9.2f}" if best else f"{'-':>9s}"
        eager = f"{r['gb_template_over_eager']:10.2f}" if r.get("gb_template_over_eager") else f"{'-':>10s}"
        lines.append(f"{r['name']:28s} " + " ".join(cells) + f" {ratio} {eager}")
    lines.append("milliseconds (medians); tmpl/ind = best Glassbox template time / Inductor's (<= 1: ours as fast "
                 "or faster)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", help="comma-separated M values (default: 1,8,32 on the CPU, 512,2048,8192 on a GPU)")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--runners", help="comma-separated runner names (eager always runs)")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    default_sizes = "512,2048,8192" if args.device == "cuda" else "1,8,32"
    sizes = [int(s) for s in (args.sizes or default_sizes).split(",")]
    wanted = set(args.only.split(",")) if args.only else None
    only_runners = set(args.runners.split(",")) if args.runners else None
    timer = measure(args.device, args.threads)
    reports = []
    for case in cases(args.device, sizes):
        if wanted and case["name"].split(" ")[0] not in wanted:
            continue
        print(f"[gemm] {case['name']}", flush=True)
        try:
            reports.append(run_case(case, args.device, timer, only_runners))
        except Exception as error:  # noqa: BLE001
            traceback.print_exc()
            reports.append({"name": case["name"], "error": f"{type(error).__name__}: {str(error)[:300]}"})
        if args.device == "cuda":
            torch.cuda.empty_cache()
    print(table(reports), flush=True)
    if os.environ.get("OUT"):
        path = Path(os.environ["OUT"]) / f"gemm_bench_{args.device}.json"
        path.write_text(json.dumps(reports, indent=2, default=str))
        print(f"wrote {path}")
    return 1 if any(r.get("error") or any(v is False for k, v in r.items() if k.endswith("_ok")) for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
