"""GEMMs with epilogues: Glassbox's templates vs the library call + a separate epilogue vs Inductor.

    python -m engine bench gemm --device cpu --threads 2            # skinny GEMMs (batch 1-32), fp32
    python -m engine bench gemm --skinny                            # LLM-width skinny GEMMs, fp32 and bf16
    python -m engine bench gemm --device cuda --sizes 512,2048,8192 # LLM-shaped bf16 GEMMs
    python -m engine bench gemm --device cuda --sizes 512 --kernels # + each runner's kernels and host time
    python -m engine bench gemm --device cuda --e2e --only hf_llama_prefill   # end to end, max-autotune,
    python -m engine bench gemm --device cuda --e2e --only tv_resnet50        # one model a call
    python -m engine bench gemm --device cuda --dry-run [--e2e]     # the same cases, tiny, on the CPU
    python -m engine bench gemm ... --json                          # the cases as JSON on stdout, alone

Runners, side by side in one process on the same inputs (every output checked against eager first):
  eager           torch: the library GEMM (cuBLAS / the CPU BLAS), then the epilogue as its own kernels
  gb_library      Glassbox with templates="off": the library GEMM, then one fused epilogue kernel of ours
  gb_template     Glassbox, default mode: the heuristic picks the template or the library (Note [GEMM templates])
  gb_autotune     Glassbox, mode="max-autotune": tile configs timed against library + epilogue
  inductor        torch.compile (on the GPU with mode="max-autotune", Inductor's own GEMM templates; on the
                  CPU in default mode)
  inductor_autotune  the CPU's torch.compile(mode="max-autotune") (with --skinny; without freezing, Inductor's
                  C++ GEMM template is not a candidate: it wants the weight a constant)
  inductor_default  torch.compile in default mode (only with --runners: Inductor's max-autotune of a whole
                  ResNet-50 takes minutes, more than a measurement call has)
  inductor_nocg   torch.compile(mode="max-autotune-no-cudagraphs") on the GPU (only with --runners): Inductor's
                  "max-autotune" replays CUDA graphs (torch._inductor.list_mode_options); ours does too on a
                  GPU unless it times the graph faster launched plainly (Note [Replay or launch, timed]),
                  so this runner shows what Inductor's plans take without the replays' input copies
Times: on the GPU the median of GPU_ROUNDS rounds of triton.testing.do_bench medians, the runners in turn in
each round, after Inductor's compile workers are shut down and the host is quiet (Note [Fair GPU timing] in
engine/runtime/timing.py: in the H200 run of 2026-12-02, before it, gb_template ran the very plan gb_library
runs at M=512, cuBLAS kept by cuda_refusal, and timed 0.095 ms against 0.074); on the CPU (shared, loaded
machines) the fastest of many single calls, the runners interleaved call by call (cpu_best_of); the load
average before and after is printed with the table. On a shared, oversubscribed CPU run it with
OMP_WAIT_POLICY=passive: OpenMP workers that spin at a barrier lose their timeslices to the other tenants,
and every parallel region (ours, Inductor's, torch's) then waits for one (measured: SwiGLU at batch 1 took
15.7 ms per call with spinning workers, 3.2 ms with passive ones, eager 3.2 ms, load average 16 on 2 cores).
--dry-run runs the GPU cases with tiny shapes on the CPU (the Triton backend under the interpreter, Inductor
in default mode): it checks the bench end to end where there is no GPU; its times mean nothing.
--e2e writes its JSON after every case and once a case is timed (with $OUT set), so a call that runs out of
time keeps what it measured;
one device call per model: --e2e --only hf_llama_prefill, then --e2e --only tv_resnet50.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.runtime.timing import GPU_ROUNDS, QUIET_CORES, QUIET_WINDOW_S, QuietHost, gpu_rounds, quiet_host
from engine.tools.bench_verdicts import Verdicts  # end-to-end cases: the engine's verdict
from engine.tools.json_stdout import print_json, stdout_to_stderr

CPU_SECONDS, CPU_MIN_CALLS, CPU_MAX_CALLS = 3.0, 20, 2000  # per case, all runners (cpu_best_of)
PROFILE_CALLS = 10  # --kernels
E2E_CASES = ("hf_llama_prefill", "tv_resnet50")
CANDIDATES_SHOWN_UP_TO = 4  # templates per case whose every autotune candidate is printed


class Linear(nn.Module):
    """A Linear alone (no bias, no epilogue): the attention projections and the MLP's down-projection."""

    def __init__(self, d, hidden):
        super().__init__()
        self.fc = nn.Linear(d, hidden, bias=False)

    def forward(self, x):
        return self.fc(x)


class LinearSiLU(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc = nn.Linear(d, hidden, bias=False)

    def forward(self, x):
        return F.silu(self.fc(x))


class LinearBiasActivation(nn.Module):
    """Linear with its bias, then an activation: ReLU, or GELU as in a GELU MLP's up-projection (the
    transformer block's fc1: x @ W.T with the weight [hidden, d], K-major)."""

    def __init__(self, d, hidden, activation):
        super().__init__()
        self.fc, self.activation = nn.Linear(d, hidden), activation

    def forward(self, x):
        return self.activation(self.fc(x))


class MatmulGELU(nn.Module):
    """The same GEMM and GELU with the weight stored [d, hidden] (N-major), as a backward pass's x @ W reads it."""

    def __init__(self, d, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d, hidden) / d ** 0.5)

    def forward(self, x):
        return F.gelu(x @ self.weight)


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
    """A feed-forward up-projection d -> hidden, GELU, and a residual of the hidden width."""

    def __init__(self, d, hidden):
        super().__init__()
        self.fc = nn.Linear(d, hidden)

    def forward(self, x, residual):
        return residual + F.gelu(self.fc(x))


MODELS = {"linear": Linear, "linear_silu": LinearSiLU, "linear_bias_relu": lambda d, h: LinearBiasActivation(d, h, F.relu),
          "linear_bias_gelu": lambda d, h: LinearBiasActivation(d, h, F.gelu),
          "matmul_gelu": MatmulGELU, "swiglu": SwiGLU,
          "proj_residual": ProjectionResidual, "linear_gelu_residual": LinearGeluResidual}
# name -> the widths of its inputs, as functions of (d, hidden)
INPUT_WIDTHS = {"proj_residual": lambda d, h: (d, d), "linear_gelu_residual": lambda d, h: (d, h)}


# Note [Skinny CPU table]
# Issue 12's CPU bar: LLM-width GEMMs at batch 1-32 on 2 threads, ours <= Inductor CPU. d = 4096 and the
# MLP's hidden 11008 (Llama-7B); the Linear alone 4096 -> 4096 (an attention projection: no epilogue),
# 4096 -> 11008 + SiLU, the projection + residual, and the SwiGLU MLP 4096/11008 (its three weights are
# 540 MB in fp32, 270 in bf16: a call at batch 1 is a stream of them, tens of milliseconds).
SKINNY_MODELS = [("linear", 4096, 4096), ("linear_silu", 4096, 11008), ("proj_residual", 4096, 4096),
                 ("swiglu", 4096, 11008)]
SKINNY_DTYPES = (torch.float32, torch.bfloat16)


def skinny_cases(sizes: list[int], dtypes, wanted: set | None = None) -> list[dict]:
    result = []
    for dtype in dtypes:
        for name, d, hidden in SKINNY_MODELS:
            if wanted and name not in wanted:
                continue
            widths = INPUT_WIDTHS.get(name, lambda d, h: (d,))(d, hidden)
            for m in sizes:
                short = {torch.float32: "f32", torch.bfloat16: "bf16"}.get(dtype, str(dtype))
                result.append({"name": f"{name} {d}x{hidden} {short} M={m}", "model": MODELS[name](d, hidden),
                               "dtype": dtype, "inputs": lambda m=m, widths=widths, dtype=dtype: tuple(
                                   torch.randn(m, w, dtype=dtype) for w in widths)})
    return result


def cases(device: str, sizes: list[int], dry_run: bool, width: tuple | None = None,
          wanted: set | None = None) -> list[dict]:
    if device == "cuda":
        d, hidden, dtype = (64, 176, torch.bfloat16) if dry_run else (4096, 11008, torch.bfloat16)
        names = ["linear_silu", "swiglu", "proj_residual"]
    else:  # a 1024-wide layer with a 4x up-projection (SwiGLU: Llama's 8/3 ratio, 2816)
        d, hidden, dtype = 1024, 4096, torch.float32
        names = ["linear_gelu_residual", "linear_bias_relu", "swiglu"]
    if width and not dry_run:
        d, hidden = width
    if wanted:  # --only may name any model, in its order
        names = [name for name in MODELS if name in wanted]
    result = []
    for name in names:
        width = hidden * 11 // 16 if name == "swiglu" and device == "cpu" else hidden
        widths = INPUT_WIDTHS.get(name, lambda d, h: (d,))(d, width)
        for m in sizes:
            result.append({"name": f"{name} M={m}", "model": MODELS[name](d, width), "dtype": dtype,
                           "inputs": lambda m=m, widths=widths: tuple(torch.randn(m, w, dtype=dtype)
                                                                      for w in widths)})
    return result


def e2e_cases(device: str) -> tuple[list[dict], list[dict]]:
    """The zoo's Llama prefill and ResNet-50 (engine/tools/zoo.py; tiny configs off the GPU), or why skipped."""
    from engine.tools.zoo import zoo_specs

    specs, skipped = zoo_specs(device, set(E2E_CASES))
    found = [{"name": spec.name, "model": spec.model, "dtype": None, "tolerance": spec.tolerance, "e2e": True,
              "inputs": lambda spec=spec: spec.example_inputs} for spec in specs]
    return found, skipped


def cpu_best_of(functions: dict, threads: int) -> dict:
    """Milliseconds of the fastest single call of each runner, the runners called in turn (one call each per
    round) for CPU_SECONDS or CPU_MIN_CALLS rounds: on a loaded machine a thread descheduled inside a call
    stalls its whole parallel region, so a mean or median mostly measures the other tenants; the fastest of
    many interleaved calls is the run the machine did not disturb, taken at the same moments for every runner."""
    torch.set_num_threads(threads)
    for fn in functions.values():
        fn()
    best = {name: float("inf") for name in functions}
    deadline, rounds = time.perf_counter() + CPU_SECONDS, 0
    while rounds < CPU_MIN_CALLS or time.perf_counter() < deadline and rounds < CPU_MAX_CALLS:
        for name, fn in functions.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
        rounds += 1
    return best


def kernel_profiles(functions: dict, calls: int = PROFILE_CALLS) -> dict:
    """name -> what one call runs on the GPU, from torch.profiler over `calls` calls (--kernels): the GPU time
    of its kernels, their number, the host's time a call (the calls queued back to back, one sync at the end)
    and the kernels by name; or the error. Where a runner's do_bench time is above its kernels' time, the
    gap is the host's (or a sync's), not the kernels'."""
    from torch.profiler import ProfilerActivity, profile

    result = {}
    for name, fn in functions.items():
        try:
            fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                host_s = time.perf_counter() - start
                torch.cuda.synchronize()
            result[name] = {"host_us": host_s / calls * 1e6, **kernel_summary(prof.key_averages(), calls)}
        except Exception as error:  # noqa: BLE001 - diagnostics only
            result[name] = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
    return result


def kernel_summary(averages, calls: int) -> dict:
    """The GPU kernels of profiler averages (FunctionEventAvg: key, count, device_type, self device time), per
    call."""
    kernels = {}
    for event in averages:
        if str(getattr(event, "device_type", "")).split(".")[-1] != "CUDA":
            continue
        us = getattr(event, "self_device_time_total", None)
        us = getattr(event, "self_cuda_time_total", 0.0) if us is None else us
        kernels[event.key] = {"count": event.count / calls, "us": us / calls}
    return {"kernel_us": sum(k["us"] for k in kernels.values()),
            "kernels": sum(k["count"] for k in kernels.values()),
            "by_kernel": dict(sorted(kernels.items(), key=lambda item: -item[1]["us"]))}


def kernels_text(reports: list[dict]) -> str:
    lines = []
    for r in reports:
        for name, profile in (r.get("kernels") or {}).items():
            if "error" in profile:
                lines.append(f"{r['name']:28s} {name:12s} profile error: {profile['error']}")
                continue
            top = ", ".join(f"{k[:40]} {v['us']:.1f}" for k, v in list(profile["by_kernel"].items())[:4])
            lines.append(f"{r['name']:28s} {name:12s} kernels {profile['kernel_us']:8.1f} us in "
                         f"{profile['kernels']:.0f}, host {profile['host_us']:7.1f} us a call; {top}")
    return "\n".join(lines)


def runners(model, device: str, dry_run: bool, wanted) -> dict:
    import engine

    gpu = device == "cuda"
    run_device = "cpu" if dry_run else device
    backend = "triton" if gpu else "cpp"
    makers = {
        "eager": lambda: model,
        "gb_library": lambda: engine.compile(model, backend=backend, device=run_device, templates="off"),
        "gb_template": lambda: engine.compile(model, backend=backend, device=run_device),
        "gb_autotune": lambda: engine.compile(model, backend=backend, device=run_device, mode="max-autotune"),
        "inductor": lambda: torch.compile(model, mode="max-autotune" if gpu and not dry_run else None),
        "inductor_default": lambda: torch.compile(model),
        "inductor_nocg": lambda: torch.compile(model, mode="max-autotune-no-cudagraphs" if gpu and not dry_run else None),
        "inductor_autotune": lambda: torch.compile(model, mode="max-autotune")}
    if not wanted:  # inductor_default only when asked for: on the CPU it is "inductor"
        wanted = set(makers) - {"inductor_default", "inductor_autotune", "inductor_nocg"}
    return {name: make() for name, make in makers.items() if name == "eager" or name in wanted}


def run_case(case: dict, device: str, threads: int, dry_run: bool, wanted, kernels: bool = False,
             checkpoint=None, quiet: QuietHost | None = None) -> dict:
    """One case's report; `checkpoint(report)` hears it once timed, before the autotune choices (which
    compile the model once more: an end-to-end case's figures are saved first); on the GPU, `quiet` (the
    run's QuietHost) waits for a quiet host first."""
    from engine.run import compare, flatten_outputs

    run_device = "cpu" if dry_run else device
    torch.manual_seed(0)
    model = case["model"].to(device=run_device, dtype=case["dtype"]).eval()
    inputs = tuple(x.to(run_device) for x in case["inputs"]())
    report = {"name": case["name"], "dtype": str(case["dtype"] or inputs[0].dtype).replace("torch.", "")}
    half = (case["dtype"] or inputs[0].dtype) in (torch.float16, torch.bfloat16)
    tolerance = case.get("tolerance") or ({"atol": 1e-1, "rtol": 5e-2} if half else {"atol": 1e-3, "rtol": 1e-3})
    timed = {}
    torch._dynamo.reset()  # once per case: the runners' compiled entries coexist (Dynamo guards on the backend)
    with torch.no_grad():
        expected = flatten_outputs(model(*inputs))
        judge = Verdicts(model, inputs, expected, case.get("tolerance")) if case.get("e2e") else None
        for name, runner in runners(model, device, dry_run, wanted).items():
            start = time.perf_counter()
            try:
                actual = flatten_outputs(runner(*inputs))
            except Exception as error:  # noqa: BLE001 - one failing runner must not hide the others
                traceback.print_exc()
                report[f"{name}_error"] = f"{type(error).__name__}: {str(error)[:200]}"
                continue
            if run_device == "cuda":
                torch.cuda.synchronize()
            report[f"{name}_first_call_s"] = time.perf_counter() - start
            print(f"[gemm]   {name}: first call {report[f'{name}_first_call_s']:.1f} s", flush=True)
            if judge is not None:  # an end-to-end model: the engine's verdict (engine/tools/bench_verdicts.py)
                report.update(judge(name, actual))
            else:
                report[f"{name}_ok"] = all(compare(e, a, tolerance)["ok"] for e, a in zip(expected, actual))
            if report[f"{name}_ok"]:
                timed[name] = lambda runner=runner: runner(*inputs)
        if run_device == "cuda" or dry_run:  # the dry run takes the same steps, but waits only briefly
            report["host_busy_cores"] = (quiet or QuietHost())() if run_device == "cuda" else \
                quiet_host(QUIET_WINDOW_S)
        if run_device == "cuda":
            rounds = gpu_rounds(timed)
            times = {name: statistics.median(values) for name, values in rounds.items()}
            report.update({f"{name}_rounds_ms": values for name, values in rounds.items()})
            if kernels:
                report["kernels"] = kernel_profiles(timed)
        else:
            times = cpu_best_of(timed, threads)
    report.update({f"{name}_ms": ms for name, ms in times.items()})
    for name in ("gb_library", "gb_template", "gb_autotune"):
        for base in ("inductor", "inductor_default", "inductor_autotune", "inductor_nocg", "eager"):
            if report.get(f"{name}_ms") and report.get(f"{base}_ms"):
                report[f"{name}_over_{base}"] = report[f"{name}_ms"] / report[f"{base}_ms"]
    print("[gemm]   ms: " + ", ".join(f"{name} {ms:.4f}" for name, ms in times.items()), flush=True)
    if checkpoint is not None:
        checkpoint(report)
    if "gb_autotune" in timed:
        report["gb_autotune_choices"] = autotune_choices(model, inputs, device, run_device)
    return report


def autotune_choices(model, inputs, device: str, run_device: str) -> list[dict]:
    """What max-autotune measured for each template of the model: an exploration with the same options finds
    the timings in the on-disk cache (Note [Template or library at run time]), so they are the ones that chose
    the kernels just timed."""
    import engine

    try:
        exploration = engine.explore(model, inputs, backend="triton" if device == "cuda" else "cpp",
                                     device=run_device, mode="max-autotune")
    except Exception as error:  # noqa: BLE001 - diagnostics only
        return [{"error": f"{type(error).__name__}: {str(error)[:200]}"}]
    return [{"kernel": k.name, "gemm": k.template.spec.to_json(),
             **(k.template.autotune.to_json() if k.template.autotune else {})}
            for k in exploration.kernels if k.kind == "template"]


def choices_text(reports: list[dict]) -> str:
    lines = []
    for r in reports:
        choices = r.get("gb_autotune_choices") or []
        for choice in choices:
            spec = choice.get("gemm") or {}
            lines.append(f"{r['name']} {choice.get('kernel', '?')} {spec.get('M')}x{spec.get('N')}x{spec.get('K')}: "
                         f"winner {choice.get('winner', choice.get('error', '-'))}")
            if len(choices) > CANDIDATES_SHOWN_UP_TO:  # a whole model: its winners only (the JSON has the rest)
                continue
            for c in sorted(choice.get("candidates") or [], key=lambda c: c.get("ms") or float("inf")):
                ms = f"{c['ms']:.4f} ms" if c.get("ms") is not None else f"error {c.get('error', '')[:120]}"
                lines.append(f"    {c['candidate']:60s} {ms}")
    return "\n".join(lines)


def table(reports: list[dict], load: list) -> str:
    names = ["eager", "gb_library", "gb_template", "gb_autotune", "inductor"]
    for extra in ("inductor_default", "inductor_autotune", "inductor_nocg"):
        if any(r.get(f"{extra}_ms") for r in reports):
            names.append(extra)
    names = [n for n in names if any(r.get(f"{n}_ms") or r.get(f"{n}_ok") is False for r in reports)]
    labels = {"inductor_default": "ind_default", "inductor_autotune": "ind_autotune", "inductor_nocg": "ind_nocg"}
    tuned = any(r.get("inductor_autotune_ms") for r in reports)
    graphless = any(r.get("inductor_nocg_ms") for r in reports)
    header = f"{'case':34s} " + " ".join(f"{labels.get(n, n):>12s}" for n in names) + \
        f" {'tmpl/ind':>9s} {'tune/ind':>9s}" + (f" {'tune/indAT':>10s}" if tuned else "") + \
        (f" {'tune/nocg':>10s}" if graphless else "")
    lines = [header, "-" * len(header)]
    for r in reports:
        if r.get("skipped"):
            lines.append(f"{r['name']:34s} skipped: {r['skipped']}")
            continue
        cells = []
        for n in names:
            value = r.get(f"{n}_ms")
            cells.append(f"{value:12.4f}" if value else f"{'WRONG' if r.get(f'{n}_ok') is False else '-':>12s}")
        ratios = []
        for n in ("gb_template", "gb_autotune"):  # over Inductor max-autotune, else (marked *) its default mode
            value, default = r.get(f"{n}_over_inductor"), r.get(f"{n}_over_inductor_default")
            ratios.append(f" {value:9.2f}" if value else f" {default:8.2f}*" if default else f" {'-':>9s}")
        for shown, base in ((tuned, "inductor_autotune"), (graphless, "inductor_nocg")):
            if shown:
                value = r.get(f"gb_autotune_over_{base}")
                ratios.append(f" {value:10.2f}" if value else f" {'-':>10s}")
        lines.append(f"{r['name']:34s} " + " ".join(cells) + "".join(ratios))
    lines.append("milliseconds; tmpl/ind, tune/ind: Glassbox default / max-autotune over Inductor (* over Inductor's "
                 "default mode; <= 1: ours as fast or faster)" + ("; tune/indAT: ours max-autotune over Inductor's "
                                                                  "max-autotune" if tuned else "") +
                 ("; tune/nocg: over Inductor's max-autotune without its CUDA graphs" if graphless else ""))
    lines.append("load average (1, 5, 15 min) before: {}  after: {}".format(*(
        ", ".join(f"{v:.2f}" for v in values) for values in load)))
    lines += timing_notes(reports)
    return "\n".join(lines)


def timing_notes(reports: list[dict]) -> list[str]:
    """The GPU rounds' widest spread and the host's busy cores when timing began (engine/runtime/timing.py)."""
    lines = []
    spreads = [(max(v) / min(v), r["name"], key[:-len("_rounds_ms")]) for r in reports for key, v in r.items()
               if key.endswith("_rounds_ms") and v and min(v) > 0]
    if spreads:
        spread, case, runner = max(spreads)
        lines.append(f"rounds: {GPU_ROUNDS} per runner, the medians reported; widest spread (slowest / fastest "
                     f"round) {spread:.2f} ({case}, {runner})")
    busy = [r["host_busy_cores"] for r in reports if r.get("host_busy_cores") is not None]
    if busy:
        lines.append(f"host busy cores when timing began (Inductor's workers shut down first): "
                     f"{min(busy):.2f} to {max(busy):.2f} (quiet below {QUIET_CORES})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine bench gemm", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", help="comma-separated M values (default: 1,8,32 on the CPU, 512,2048,8192 on a GPU)")
    parser.add_argument("--only", help=f"comma-separated model names ({', '.join(MODELS)})")
    parser.add_argument("--width", help="D,HIDDEN: the layer's widths instead of the device's default (e.g. 1024,4096: "
                                        "the training transformer block's MLP)")
    parser.add_argument("--runners", help="comma-separated runner names (eager always runs)")
    parser.add_argument("--skinny", action="store_true",
                        help="the CPU's LLM-width skinny table instead (Note [Skinny CPU table]): eager, ours default "
                             "and max-autotune, Inductor default and max-autotune")
    parser.add_argument("--dtypes", help="with --skinny: comma-separated dtypes (default float32,bfloat16)")
    parser.add_argument("--e2e", action="store_true",
                        help=f"end to end instead: {', '.join(E2E_CASES)} from the zoo (skipped when missing)")
    parser.add_argument("--kernels", action="store_true",
                        help="on the GPU, also profile each runner (torch.profiler, 10 calls): its kernels' GPU time "
                             "and count a call beside the host's time, to tell a host-bound gap from a kernel's")
    parser.add_argument("--dry-run", action="store_true",
                        help="the --device cuda cases with tiny shapes on the CPU (checks the bench; no timing meaning)")
    parser.add_argument("--json", action="store_true", help="print the cases as JSON on stdout and nothing else")
    args = parser.parse_args(argv)
    with stdout_to_stderr() if args.json else nullcontext():
        document, code = bench(args)
    if args.json:
        print_json(document)
    return code


def bench(args) -> tuple[dict, int]:
    """Every case of args, checked then timed; the document (the load average and the cases) and the exit code."""
    if args.device == "cpu" or args.dry_run:
        torch.set_num_threads(args.threads)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    default_sizes = ("16" if args.dry_run else "512,2048,8192") if args.device == "cuda" else "1,8,32"
    sizes = [int(s) for s in (args.sizes or default_sizes).split(",")]
    if args.dry_run:
        sizes = [min(s, 16) for s in dict.fromkeys(sizes)][:1]
    wanted = set(args.only.split(",")) if args.only else None
    only_runners = set(args.runners.split(",")) if args.runners else None
    load_before = os.getloadavg()
    if args.e2e:
        selected, reports = e2e_cases("cpu" if args.dry_run else args.device)
        if args.device == "cuda" and not args.dry_run:  # the zoo's GPU cases run in half precision
            only_runners = only_runners or {"gb_template", "gb_autotune", "inductor"}
    elif args.skinny:
        dtypes = [getattr(torch, name) for name in args.dtypes.split(",")] if args.dtypes else SKINNY_DTYPES
        selected, reports = skinny_cases(sizes, dtypes, wanted), []
        only_runners = only_runners or {"gb_template", "gb_autotune", "inductor", "inductor_autotune"}
    else:
        width = tuple(int(v) for v in args.width.split(",")) if args.width else None
        selected, reports = cases(args.device, sizes, args.dry_run, width, wanted), []
    selected = [case for case in selected if not wanted or case["name"].split(" ")[0] in wanted]
    if selected and args.device == "cpu":
        # the first case of a process runs beside background work its compiles start (Inductor's compile
        # workers importing torch): on a 2-core machine that slowed every runner of it several times over
        print(f"[gemm] warm-up (not reported): {selected[0]['name']}", flush=True)
        run_case(selected[0], args.device, args.threads, args.dry_run, only_runners)
    suffix = ("_e2e" if args.e2e else "") + ("_dry" if args.dry_run else "")
    path = Path(os.environ["OUT"]) / f"gemm_bench_{args.device}{suffix}.json" if os.environ.get("OUT") else None

    def save(extra=()) -> None:  # after every case, and once it is timed: a call that runs out of time keeps it
        if path is not None:
            path.write_text(json.dumps({"load": [load_before, os.getloadavg()], "cases": reports + list(extra)},
                                       indent=2, default=str))
    quiet = QuietHost()
    for case in selected:
        print(f"[gemm] {case['name']}", flush=True)
        try:
            reports.append(run_case(case, args.device, args.threads, args.dry_run, only_runners, args.kernels,
                                    checkpoint=lambda report: save([report]), quiet=quiet))
        except Exception as error:  # noqa: BLE001
            traceback.print_exc()
            reports.append({"name": case["name"], "error": f"{type(error).__name__}: {str(error)[:300]}"})
        if args.device == "cuda" and not args.dry_run:
            torch.cuda.empty_cache()
        save()
    print(table(reports, [load_before, os.getloadavg()]), flush=True)
    print(choices_text(reports), flush=True)
    if args.kernels:
        print(kernels_text(reports), flush=True)
    if path is not None:
        print(f"wrote {path}")
    failed = [r for r in reports if r.get("error") or any(v is False for k, v in r.items() if k.endswith("_ok"))]
    return {"load": [load_before, os.getloadavg()], "cases": reports}, (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
