"""Readable text for the CLI: an exploration record stage by stage, and a benchmark table.

Pure functions over the record (an Exploration, or its JSON read back typed) and bench reports, like the
visualizers: what the CLI prints is exactly what the record holds, so a user can find every number again in `--json`.
"""
from __future__ import annotations

import math
from collections import Counter

from engine import words
from engine.record import (STAGE_NAMES, Exploration, GraphBreakRecord, GraphRecord, KernelRecord, MachineRecord,
                           ProfileRecord, RunRecord, VerifyRecord)
from engine.runtime.timing import TOO_NOISY
from engine.tools import train_format
from engine.tools.units import human_bytes

REFUSALS_SHOWN = 8  # without --verbose; a big model refuses hundreds of pairs


def plural(count: int, word: str, words: str | None = None) -> str:
    return f"{count} {word if count == 1 else (words or word + 's')}"


def short_op(target: str) -> str:
    """'aten::mul.Tensor' -> 'mul': the op's name without namespace and overload."""
    name = str(target).split("::")[-1]
    name = name.removeprefix("aten.")
    return name.split(".")[0]


def fused_ops(kernel: KernelRecord) -> str:
    ops = [short_op(op) for op in kernel.ops]
    return " + ".join(ops) if ops else ", ".join(kernel.ir_nodes) or "-"


def seconds(value) -> str:
    return f"{value:.3f}s" if isinstance(value, (int, float)) else "-"


def error_text(value) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else str(value)


def explore_summary(document: dict | Exploration, verbose: bool = False) -> str:
    """The exploration, one section per stage, in pipeline order."""
    record = document if isinstance(document, Exploration) else Exploration.from_json(document)
    lines = [f"Glassbox explore: {record.model}  (backend {record.backend}, device {record.device})"]
    if record.source.filename:
        lines.append(f"  file: {record.source.filename}")
    lines.append(f"Captured {plural(len(record.graphs), 'graph')}.")
    for graph in record.graphs:
        lines += [""] + graph_summary(graph, verbose)
    lines += [""] + breaks_summary(record.graph_breaks)
    lines.append(f"Guards: {len(record.guards)}")
    if verbose:
        lines += [f"  {guard}" for guard in record.guards]
    lines.append(f"Recompiles: {len(record.recompiles)}")
    for recompile in record.recompiles:
        lines.append(f"  on inputs {recompile.inputs}: {recompile.reason}")
    lines += verify_summary(record.verify, record.runs)
    lines += machine_line(record.machine)
    lines.append(timings_line(record.timings))
    for error in record.errors:
        where = f" (graph {error.graph})" if error.graph is not None else ""
        lines.append(f"Error [{error.kind}, {error.stage}{where}]: {error.message}")
    return "\n".join(lines)


def graph_summary(graph: GraphRecord, verbose: bool) -> list[str]:
    kernels = graph.kernels
    ir_nodes = graph.ir.nodes if graph.ir else []
    language = {"cpp": "C++ library", "triton": "Triton kernels"}.get(graph.code.language if graph.code else "",
                                                                     "code")
    cache = f" ({language} from the cache)" if graph.cache_hit else ""
    phase = f" ({graph.phase})" if graph.phase != "inference" else ""
    lines = [f"Graph {graph.index}{phase}: {len(graph.fx)} FX nodes -> {len(graph.aten)} ATen nodes -> "
             f"{plural(len(ir_nodes), 'IR node')} -> {plural(len(kernels), 'kernel')}{cache}"]
    if graph.fallback is not None:
        lines.append(f"  FELL BACK TO EAGER: our {graph.fallback.stage} stage raised {graph.fallback.type}: "
                     f"{graph.fallback.message}")
    width = max((len(k.name) for k in kernels), default=0)
    for kernel in kernels:
        lines.append(f"  {kernel.name:<{width}}  {kernel.kind:<9}  {fused_ops(kernel)}  [{human_bytes(kernel.bytes)}]"
                     f"{kernel_profile(kernel)}")
        choice = tiling_line(kernel, graph)
        if choice:
            lines.append(f"  {'':<{width}}  tiling: {choice}")
    lines += profile_lines(graph.profile)
    fallbacks = [k for k in kernels if k.kind == "fallback"]
    if fallbacks:
        lines.append(f"  Fallbacks to eager: {len(fallbacks)}")
        for kernel in fallbacks:
            lines.append(f"    {kernel.name}: {plain_words(kernel.reason, graph) or 'no reason recorded'}")
    else:
        lines.append("  Fallbacks to eager: none")
    for rewrite in graph.rewrites:  # Note [Rewrite stage]: every match and near-miss, with its user line
        where = f" (line {rewrite.source[-1].lineno})" if rewrite.source else ""
        verdict = "rewrote" if rewrite.applied else "refused"
        lines.append(f"  Rewrite {rewrite.rewrite} {verdict}{where}: "
                     f"{rewrite.replacement_text if rewrite.applied else rewrite.reason}")
    decisions = graph.fusion.decisions if graph.fusion else []
    fused = sum(1 for d in decisions if d.fused)
    lines.append(f"  Fusion decisions: {fused} fused, {len(decisions) - fused} refused")
    shown = decisions if verbose else [d for d in decisions if not d.fused]
    told = Counter()  # the same decision in every layer: one line, counted over the whole graph
    for decision in shown:
        verdict = "fused" if decision.fused else "refused"
        told[f"{verdict} {group_ops(graph, decision.producer)} -> {group_ops(graph, decision.consumer)}: "
             f"{plain_words(decision.reason, graph)}"] += 1
    kept = list(told.items()) if verbose else told.most_common(REFUSALS_SHOWN)
    for line, count in kept:
        lines.append(f"    {line}" + (f" (x{count})" if count > 1 else ""))
    hidden = len(decisions) - fused - sum(count for _, count in kept if not verbose)
    if not verbose and hidden > 0:
        lines.append(f"    ... {plural(hidden, 'more refusal')} (--verbose shows every decision)")
    if graph.memory is not None:
        lines.append(f"  Memory: peak {human_bytes(graph.memory.peak_bytes)} "
                     f"(unfused {human_bytes(graph.memory.unfused_peak_bytes)})")
    if graph.input_writes:  # Note [Input writes after the graph]
        lines.append(f"  Writes {plural(len(graph.input_writes), 'input')} in place after the graph, in one copy: "
                     f"{', '.join(graph.input_writes[:6])}" + (", ..." if len(graph.input_writes) > 6 else ""))
    return lines + train_format.partition_lines(graph, verbose)


def plain_words(text, graph: GraphRecord | None = None) -> str:
    """Record text for a user (engine/words.py): Note references left out and, given the graph, its buffer names
    ("buf238") said as the ops that compute them ("mm's result")."""
    return words.plain_words(text, None if graph is None else lambda buffer: " + ".join(op_names(graph, buffer)))


def tiling_line(kernel: KernelRecord, graph: GraphRecord | None = None) -> str:
    """A kernel's loop tiling (or a template's tile config) and why, in words (given the graph, its buffers said
    as the ops that compute them)."""
    tiling, template = kernel.tiling, kernel.template
    if tiling is not None and tiling.choice:
        details = ([f"run {tiling.run}"] if tiling.run else []) + (["columns True"] if tiling.columns else [])
        pieces = tiling.pieces if tiling.pieces is not None and tiling.pieces.pieces else None
        if pieces is not None:
            details.append(f"{len(pieces.pieces)} pieces along dim {pieces.dim}")
        reason = "; ".join(w for w in (plain_words(tiling.reason, graph),
                                       plain_words(pieces.reason if pieces else "", graph)) if w)
        return tiling.choice + (f" ({', '.join(details)})" if details else "") + (f" - {reason}" if reason else "")
    if template is not None and template.config:
        config = ", ".join(f"{k}={v}" for k, v in template.config.items())
        return f"{template.name} {config}" + (f" - {plain_words(template.reason, graph)}" if template.reason else "")
    return ""


def group_ops(graph: GraphRecord, label: str) -> str:
    """A fusion group as its ops ("mul + add"), not the scheduler's buffer names ("buf3+buf4")."""
    return " + ".join(op_names(graph, label)) or str(label)


def op_names(graph: GraphRecord, label: str) -> list[str]:
    """The ops a fusion group's buffers compute, in order; empty when the graph does not know them."""
    names = [part.strip() for part in str(label).split(" (")[0].split("+")]
    if "..." in names:  # a long group, elided: the kernel (or IR) run between its first and last buffers
        for order in [k.ir_nodes for k in graph.kernels] + [[n.name for n in (graph.ir.nodes if graph.ir else [])]]:
            if names[0] in order and names[-1] in order and order.index(names[0]) <= order.index(names[-1]):
                names = order[order.index(names[0]):order.index(names[-1]) + 1]
                break
    ir = {n.name: n for n in (graph.ir.nodes if graph.ir else [])}
    aten = {n.name: n for n in graph.aten}
    return list(dict.fromkeys(short_op(aten[a].target) for n in names if n in ir for a in ir[n].aten_origins
                              if a in aten))


def kernel_profile(kernel: KernelRecord) -> str:
    """With --profile: the kernel's median time, its spread, share of the call, GB/s and GFLOP/s."""
    if kernel.time_ms is None:
        return ""
    rates = [f"{value:.2f} {unit}" for value, unit in ((kernel.gbps, "GB/s"), (kernel.gflops, "GFLOP/s"))
             if value is not None]
    if kernel.roofline is not None:
        rates.append(f"{kernel.roofline.pct:.0f}% of roof ({kernel.roofline.bound}-bound)")
    return (f"  {kernel.time_ms:.4f} ms ±{kernel.time_iqr_ms or 0:.4f}"
            + (f" ({kernel.share:.0%} of the call)" if kernel.share is not None else "")
            + (f", {', '.join(rates)}" if rates else ""))


def profile_lines(profile: ProfileRecord) -> list[str]:
    if profile.call_ms is None:
        return []
    note = " (Triton interpreter: not GPU times)" if profile.interpreted else ""
    return [f"  Profile: call {profile.call_ms:.4f} ms ±{profile.call_iqr_ms or 0:.4f}; timed call = kernels "
            f"{profile.kernels_ms:.4f} ms + wrapper {profile.overhead_ms:.4f} ms; medians of "
            f"{profile.repeats or '?'} calls (± interquartile range){note}"]


def machine_line(machine: MachineRecord) -> list[str]:
    if machine.copy_gbps is None:
        return []
    return [f"Machine: copy {machine.copy_gbps:.1f} GB/s, matmul {machine.matmul_gflops:.1f} GFLOP/s "
            f"({machine.threads or '?'} threads; {machine.how or ''})"] + \
        ([f"Roofs: {peaks.gbps:.4g} GB/s, {peaks.fp32_gflops:.4g} GFLOP/s fp32"
          + (f", {peaks.tensor_gflops:.4g} GFLOP/s fp16/bf16 matmul" if peaks.part else "")
          + f" ({peaks.source}; {peaks.name})"]
         if (peaks := machine.peaks) and peaks.gbps and peaks.fp32_gflops else []) + \
        ([f"Warning: {machine.load_warning}"] if machine.load_warning else [])


def breaks_summary(breaks: list[GraphBreakRecord]) -> list[str]:
    lines = [f"Graph breaks: {len(breaks)}"]
    for number, item in enumerate(breaks, start=1):
        lines.append(f"  {number}. {item.filename or '?'}:{item.lineno or '?'}: {item.reason}")
        if item.line:
            lines.append(f"       {item.line}")
        for hint in item.hints:
            lines.append(f"       hint: {hint}")
        if item.suggestion:
            lines.append(f"       suggested rewrite ({item.suggestion.pattern}):")
            lines += [f"         {line}" for line in item.suggestion.after.splitlines()]
    return lines


def verify_summary(verify: VerifyRecord, runs: list[RunRecord]) -> list[str]:
    if verify.ok is None:
        return ["Verify: not run"]
    words = {"nothing compared": "NOTHING COMPARED", "random": "RANDOM (nothing could be checked)",
             "layout differs": "ok, but the LAYOUT DIFFERS from eager's"}
    verdict = words.get(verify.verdict, "ok" if verify.ok else "FAILED")
    lines = [f"Verify vs eager: {verdict} (max abs err {error_text(verify.max_abs_err)}, "
             f"max rel err {error_text(verify.max_rel_err)})"]
    if verify.reference:
        lines.append(f"  judged by: {verify.reference}")
    if verify.problem:
        lines.append(f"  {verify.problem}")
    lines += train_format.gradient_lines(verify)
    for output_number, output in enumerate(verify.outputs or []):
        if not output.ok:
            shape = "" if output.shape is None else output.shape
            lines.append(f"  output {output_number} {output.dtype or ''}{shape}: "
                         f"max abs err {error_text(output.max_abs_err)} "
                         f"(atol {output.atol}, rtol {output.rtol}) {output.problem or ''}")
    for run in runs:
        lines.append(f"  inputs {run.inputs}: {'ok' if run.verify.ok else 'FAILED'} "
                     f"(max abs err {error_text(run.verify.max_abs_err)}, "
                     f"{plural(run.new_graphs, 'new graph')})")
    return lines


def timings_line(timings: dict) -> str:
    names = [s for s in STAGE_NAMES if s in timings] + [s for s in timings if s not in STAGE_NAMES]
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


def _judged(case: dict, key: str, value) -> str:
    """A ratio as the bench judged it (Note [Fair timing]): "1.23x", or "too noisy to judge" when the runners'
    spreads were too wide for it; older reports without verdicts print the plain ratio."""
    verdict = (case.get("verdicts") or {}).get(key)
    if verdict is not None and not verdict.get("judged"):
        return "too noisy"
    return _ratio(value)


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
        settings = [case.get("mode", "default"), f"templates {case.get('templates', 'auto')}"]
        settings = [s for s in settings if s not in ("default", "templates auto")]
        fell_back = case.get("fallbacks") or []  # Note [A fallback is loud]: eager's time, not ours
        ours = "fell back" if fell_back else _judged(case, "speedup_vs_eager", _speedup(case, "glassbox"))
        rows.append([case.get("name", "?") + (f" ({', '.join(settings)})" if settings else ""), _ms_spread(case, "eager"),
                     _ms_spread(case, "glassbox"), _ms_spread(case, "inductor"),
                     f"{ours} / {_judged(case, 'inductor_speedup_vs_eager', _speedup(case, 'inductor'))}",
                     "fell back" if fell_back else _judged(case, "ratio_vs_inductor", case.get("ratio_vs_inductor")),
                     compile_text, seconds(case.get("inductor_compile_s"))])
        notes += [f"{case.get('name', '?')}: {text}" for text in fell_back + (case.get("eager_ops") or [])]
        if case.get("inductor_error"):
            notes.append(f"{case.get('name', '?')}: Inductor failed: {case['inductor_error']}")
        for who, check in (case.get("verify") or {}).items():
            if check.get("verdict") == "random":  # Note [Verdicts]: not a mismatch, nothing could be checked
                rows[-1][0] += " ?"
                notes.append(f"{case.get('name', '?')}: {who}: nothing could be checked, the model is random "
                             "(two eager runs disagree)")
            elif not check.get("ok"):
                rows[-1][0] += " !"
                notes.append(f"{case.get('name', '?')}: {who} output differs from eager "
                             f"(max abs err {error_text(check.get('max_abs_err'))})"
                             + (f": {check['problem']}" if check.get("problem") else ""))
    widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header))]
    lines = [" | ".join(str(cell).ljust(width) if i == 0 else str(cell).rjust(width)
                        for i, (cell, width) in enumerate(zip(row, widths))) for row in [header] + rows]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    mean = geomean(case.get("ratio_vs_inductor") for case in cases if not case.get("error")
                   and (case.get("verdicts") or {}).get("ratio_vs_inductor", {}).get("judged", True))
    lines.append("")
    lines.append(f"geomean glassbox/inductor: {_ratio(mean)}" + ("  (below 1x: Glassbox is faster)" if mean else ""))
    lines.append("speedup over eager = eager ms / ms: higher is better; ± is the interquartile range of the "
                 "interleaved rounds; \"too noisy\" where a spread is over a quarter of its median")
    for reason in dict.fromkeys(case.get("threads_reason") or f"{case.get('threads')} threads" for case in cases
                                if case.get("threads")):
        lines.append(f"threads: {reason}")
    for case in cases:
        noisy = [v["text"] for v in (case.get("verdicts") or {}).values() if not v.get("judged")]
        if noisy:
            lines.append(f"{case.get('name', '?')}: {TOO_NOISY}: the ratios could lie anywhere in "
                         + ", ".join(text.removeprefix(TOO_NOISY).strip() for text in noisy))
    fresh = [case["compile_fresh"] for case in cases if case.get("compile_fresh")]
    if fresh:
        lines.append("fresh: a warm compile in a new process, after its imports; Glassbox's own stages took "
                     f"{max(f['ours_s'] for f in fresh):.3f}s at most, the rest is Dynamo and AOTAutograd")
    lines += train_format.bench_lines(cases)  # training steps: the activations each compiler saves
    lines += [f"! {note}" for note in notes]
    return "\n".join(lines)
