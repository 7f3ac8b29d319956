"""Readable text for the CLI: an exploration record stage by stage, and a benchmark table.

Pure functions over plain data (the dicts of Exploration.to_json() and bench reports), like the visualizers:
what the CLI prints is exactly what the record holds, so a user can find every number again in `--json`.
"""
from __future__ import annotations

import math

from engine.tools import train_format

STAGES = ("capture", "decompose", "lower", "schedule", "codegen", "build", "run")
REFUSALS_SHOWN = 8  # without --verbose; a big model refuses hundreds of pairs


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else (words or word + 's')}"


def human_bytes(count) -> str:
    if not isinstance(count, (int, float)):
        return "? B"
    for unit in ("B", "KiB", "MiB"):
        if abs(count) < 1024 or unit == "MiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def short_op(target: str) -> str:
    """'aten::mul.Tensor' -> 'mul': the op's name without namespace and overload."""
    name = str(target).split("::")[-1]
    name = name.removeprefix("aten.")
    return name.split(".")[0]


def fused_ops(kernel: dict) -> str:
    ops = [short_op(op) for op in kernel.get("ops") or []]
    return " + ".join(ops) if ops else ", ".join(kernel.get("ir_nodes") or []) or "-"


def seconds(value) -> str:
    return f"{value:.3f}s" if isinstance(value, (int, float)) else "-"


def error_text(value) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else str(value)


def explore_summary(record: dict, verbose: bool = False) -> str:
    """The exploration, one section per stage, in pipeline order."""
    lines = [f"Glassbox explore: {record.get('model', '?')}  "
             f"(backend {record.get('backend', '?')}, device {record.get('device', '?')})"]
    filename = (record.get("source") or {}).get("filename")
    if filename:
        lines.append(f"  file: {filename}")
    graphs = record.get("graphs") or []
    lines.append(f"Captured {plural(len(graphs), 'graph')}.")
    for graph in graphs:
        lines += [""] + graph_summary(graph, verbose)
    lines += [""] + breaks_summary(record.get("graph_breaks") or [])
    guards = record.get("guards") or []
    lines.append(f"Guards: {len(guards)}")
    if verbose:
        lines += [f"  {guard}" for guard in guards]
    recompiles = record.get("recompiles") or []
    lines.append(f"Recompiles: {len(recompiles)}")
    for recompile in recompiles:
        lines.append(f"  on inputs {recompile.get('inputs', '?')}: {recompile.get('reason', '')}")
    lines += verify_summary(record.get("verify") or {}, record.get("runs") or [])
    lines += machine_line(record.get("machine") or {})
    lines.append(timings_line(record.get("timings") or {}))
    for error in record.get("errors") or []:
        lines.append(f"Error: {error}")
    return "\n".join(lines)


def graph_summary(graph: dict, verbose: bool) -> list[str]:
    kernels = graph.get("kernels") or []
    ir_nodes = (graph.get("ir") or {}).get("nodes") or []
    language = {"cpp": "C++ library", "triton": "Triton kernels"}.get((graph.get("code") or {}).get("language"), "code")
    cache = f" ({language} from the cache)" if graph.get("cache_hit") else ""
    phase = f" ({graph['phase']})" if graph.get("phase", "inference") != "inference" else ""
    lines = [f"Graph {graph.get('index', '?')}{phase}: {len(graph.get('fx') or [])} FX nodes -> "
             f"{len(graph.get('aten') or [])} ATen nodes -> {plural(len(ir_nodes), 'IR node')} -> "
             f"{plural(len(kernels), 'kernel')}{cache}"]
    width = max((len(k.get("name", "")) for k in kernels), default=0)
    for kernel in kernels:
        lines.append(f"  {kernel.get('name', '?'):<{width}}  {kernel.get('kind', '?'):<9}  "
                     f"{fused_ops(kernel)}  [{human_bytes(kernel.get('bytes'))}]{kernel_profile(kernel)}")
    lines += profile_lines(graph.get("profile") or {})
    fallbacks = [k for k in kernels if k.get("kind") == "fallback"]
    if fallbacks:
        lines.append(f"  Fallbacks to eager: {len(fallbacks)}")
        for kernel in fallbacks:
            lines.append(f"    {kernel.get('name', '?')}: {kernel.get('reason') or 'no reason recorded'}")
    else:
        lines.append("  Fallbacks to eager: none")
    decisions = (graph.get("fusion") or {}).get("decisions") or []
    fused = sum(1 for d in decisions if d.get("fused"))
    lines.append(f"  Fusion decisions: {fused} fused, {len(decisions) - fused} refused")
    shown = decisions if verbose else [d for d in decisions if not d.get("fused")][:REFUSALS_SHOWN]
    for decision in shown:
        verdict = "fused" if decision.get("fused") else "refused"
        lines.append(f"    {verdict} {decision.get('producer', '?')} -> {decision.get('consumer', '?')}: "
                     f"{decision.get('reason', '')}")
    hidden = len(decisions) - fused - len(shown)
    if not verbose and hidden > 0:
        lines.append(f"    ... {plural(hidden, 'more refusal')} (--verbose shows every decision)")
    memory = graph.get("memory") or {}
    if "peak_bytes" in memory:
        lines.append(f"  Memory: peak {human_bytes(memory['peak_bytes'])} "
                     f"(unfused {human_bytes(memory.get('unfused_peak_bytes'))})")
    return lines + train_format.partition_lines(graph, verbose)


def kernel_profile(kernel: dict) -> str:
    """With --profile: the kernel's median time, its spread, share of the call, GB/s and GFLOP/s."""
    if not isinstance(kernel.get("time_ms"), (int, float)):
        return ""
    share = kernel.get("share")
    rates = [f"{kernel[key]:.2f} {unit}" for key, unit in (("gbps", "GB/s"), ("gflops", "GFLOP/s"))
             if isinstance(kernel.get(key), (int, float))]
    return (f"  {kernel['time_ms']:.4f} ms ±{kernel.get('time_iqr_ms', 0):.4f}"
            + (f" ({share:.0%} of the call)" if isinstance(share, (int, float)) else "")
            + (f", {', '.join(rates)}" if rates else ""))


def profile_lines(profile: dict) -> list[str]:
    if "call_ms" not in profile:
        return []
    note = " (Triton interpreter: not GPU times)" if profile.get("interpreted") else ""
    return [f"  Profile: call {profile['call_ms']:.4f} ms ±{profile.get('call_iqr_ms', 0):.4f}; timed call = kernels "
            f"{profile['kernels_ms']:.4f} ms + wrapper {profile['overhead_ms']:.4f} ms; medians of "
            f"{profile.get('repeats', '?')} calls (± interquartile range){note}"]


def machine_line(machine: dict) -> list[str]:
    if "copy_gbps" not in machine:
        return []
    return [f"Machine: copy {machine['copy_gbps']:.1f} GB/s, matmul {machine['matmul_gflops']:.1f} GFLOP/s "
            f"({machine.get('threads', '?')} threads; {machine.get('how', '')})"] + \
        ([f"Warning: {machine['load_warning']}"] if machine.get("load_warning") else [])


def breaks_summary(breaks: list[dict]) -> list[str]:
    lines = [f"Graph breaks: {len(breaks)}"]
    for number, item in enumerate(breaks, start=1):
        where = f"{item.get('filename', '?')}:{item.get('lineno', '?')}"
        lines.append(f"  {number}. {where}: {item.get('reason', '')}")
        if item.get("line"):
            lines.append(f"       {item['line']}")
        for hint in item.get("hints") or []:
            lines.append(f"       hint: {hint}")
        fix = item.get("suggestion")
        if fix:
            lines.append(f"       suggested rewrite ({fix.get('pattern')}):")
            lines += [f"         {line}" for line in str(fix.get("after", "")).splitlines()]
    return lines


def verify_summary(verify: dict, runs: list[dict]) -> list[str]:
    if not verify:
        return ["Verify: not run"]
    verdict = "ok" if verify.get("ok") else "NOTHING COMPARED" if verify.get("verdict") == "nothing compared" \
        else "FAILED"
    lines = [f"Verify vs eager: {verdict} (max abs err {error_text(verify.get('max_abs_err'))}, "
             f"max rel err {error_text(verify.get('max_rel_err'))})"]
    if verify.get("problem"):
        lines.append(f"  {verify['problem']}")
    lines += train_format.gradient_lines(verify)
    for output_number, output in enumerate(verify.get("outputs") or []):
        if not output.get("ok"):
            lines.append(f"  output {output_number} {output.get('dtype', '')}{output.get('shape', '')}: "
                         f"max abs err {error_text(output.get('max_abs_err'))} "
                         f"(atol {output.get('atol')}, rtol {output.get('rtol')}) {output.get('problem', '')}")
    for run in runs:
        check = run.get("verify") or {}
        lines.append(f"  inputs {run.get('inputs', '?')}: {'ok' if check.get('ok') else 'FAILED'} "
                     f"(max abs err {error_text(check.get('max_abs_err'))}, "
                     f"{plural(run.get('new_graphs', 0), 'new graph')})")
    return lines


def timings_line(timings: dict) -> str:
    names = [s for s in STAGES if s in timings] + [s for s in timings if s not in STAGES]
    parts = [f"{name} {seconds(timings[name])}" for name in names]
    total = sum(v for v in timings.values() if isinstance(v, (int, float)))
    return "Seconds per stage: " + ", ".join(parts) + f"; total {total:.3f}s"


# --- bench -----------------------------------------------------------------------------------------------------


def _ms(value) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else "-"


def _ratio(value) -> str:
    return f"{value:.2f}x" if isinstance(value, (int, float)) else "-"


def geomean(values) -> float | None:
    values = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _ms_spread(case: dict, who: str) -> str:
    """"1.234±0.010": the median and its interquartile range, when the bench recorded one."""
    spread = case.get(f"{who}_iqr_ms")
    return _ms(case.get(f"{who}_ms")) + (f"±{spread:.3f}" if isinstance(spread, (int, float)) else "")


def _speedup(case: dict, who: str) -> float | None:
    eager, ms = case.get("eager_ms"), case.get(f"{who}_ms")
    return eager / ms if isinstance(eager, (int, float)) and isinstance(ms, (int, float)) and ms > 0 else None


def bench_table(cases: list[dict]) -> str:
    header = ["case", "eager ms", "glassbox ms", "inductor ms", "speedup over eager: glassbox / inductor",
              "glassbox/inductor", "compile s (ours cold/warm/fresh)", "inductor compile s"]
    rows = []
    notes = []
    for case in cases:
        if case.get("error"):
            rows.append([case.get("name", "?"), "-", "-", "-", "-", "-", "-", "-"])
            notes.append(f"{case.get('name', '?')}: {case['error']}")
            continue
        fresh = (case.get("compile_fresh") or {}).get("first_call_s")
        compile_text = " / ".join(map(seconds, (case.get("compile_s"), case.get("compile_warm_s"), fresh)))
        mode = case.get("mode", "default")
        rows.append([case.get("name", "?") + ("" if mode == "default" else f" ({mode})"), _ms_spread(case, "eager"),
                     _ms_spread(case, "glassbox"), _ms_spread(case, "inductor"),
                     f"{_ratio(_speedup(case, 'glassbox'))} / {_ratio(_speedup(case, 'inductor'))}",
                     _ratio(case.get("ratio_vs_inductor")), compile_text, seconds(case.get("inductor_compile_s"))])
        if case.get("inductor_error"):
            notes.append(f"{case.get('name', '?')}: Inductor failed: {case['inductor_error']}")
        for who, check in (case.get("verify") or {}).items():
            if not check.get("ok"):
                rows[-1][0] += " !"
                notes.append(f"{case.get('name', '?')}: {who} output differs from eager "
                             f"(max abs err {error_text(check.get('max_abs_err'))})")
    widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header))]
    lines = [" | ".join(str(cell).ljust(width) if i == 0 else str(cell).rjust(width)
                        for i, (cell, width) in enumerate(zip(row, widths))) for row in [header] + rows]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    mean = geomean(case.get("ratio_vs_inductor") for case in cases if not case.get("error"))
    lines.append("")
    lines.append(f"geomean glassbox/inductor: {_ratio(mean)}" + ("  (below 1x: Glassbox is faster)" if mean else ""))
    lines.append("speedup over eager = eager ms / ms: higher is better; ± is the interquartile range of the timed "
                 "blocks")
    threads = sorted({case.get("threads") for case in cases if case.get("threads")})
    if threads:
        lines.append(f"threads: {', '.join(map(str, threads))}")
    fresh = [case["compile_fresh"] for case in cases if case.get("compile_fresh")]
    if fresh:
        lines.append("fresh: a warm compile in a new process, after its imports; Glassbox's own stages took "
                     f"{max(f['ours_s'] for f in fresh):.3f}s at most, the rest is Dynamo and AOTAutograd")
    lines += [f"! {note}" for note in notes]
    return "\n".join(lines)
