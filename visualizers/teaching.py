"""What happened to this model at each stage, in a few sentences generated from the record (not canned text).

Each function reads one graph (or the whole record) and returns short markdown sentences that name this model's
own ops, nodes, kernels and reasons: "amax + sub + exp + sum + div became one kernel (kernel_0): ...".
Fusion decisions speak of kernel groups by IR buffer names (buf3+buf4); `decision_ops` turns those into the
ATen ops and FX nodes a reader sees on the graphs.
"""
from __future__ import annotations

from collections import Counter


def _short(op) -> str:
    """aten.sum.dim_IntList -> sum (the overload says which signature, not what the op does)."""
    return str(op).replace("aten::", "aten.").removeprefix("aten.").split(".")[0]


def _ir_nodes(graph: dict) -> dict[str, dict]:
    return {n["name"]: n for n in (graph.get("ir") or {}).get("nodes") or []}


def decision_ops(graph: dict, label: str) -> dict:
    """A fusion group label ("buf3+buf4") -> {"ir": [...], "aten": [...], "ops": [...], "fx": [...]}."""
    ir_nodes, aten = _ir_nodes(graph), {n["name"]: n for n in graph.get("aten") or []}
    names = [part for part in str(label).split("+") if part]
    aten_names = list(dict.fromkeys(a for n in names for a in (ir_nodes.get(n) or {}).get("aten_origins") or []))
    ops = list(dict.fromkeys(_short(aten[a]["target"]) for a in aten_names if a in aten))
    fx = list(dict.fromkeys(f for a in aten_names for f in (aten.get(a) or {}).get("fx_origins") or []))
    return {"ir": names, "aten": aten_names, "ops": ops, "fx": fx}


def describe_group(graph: dict, label: str) -> str:
    """"buf3+buf4" as a reader sees it: "mul + add (FX: mul, add)"."""
    named = decision_ops(graph, label)
    ops = " + ".join(named["ops"]) or str(label)
    return f"{ops} (FX: {', '.join(named['fx'])})" if named["fx"] else ops


def capture_text(record: dict) -> list[str]:
    graphs, breaks = record.get("graphs") or [], record.get("graph_breaks") or []
    nodes = sum(sum(1 for n in g.get("fx") or [] if n.get("op") == "call_function" or n.get("op") == "call_method"
                    or n.get("op") == "call_module") for g in graphs)
    lines = [f"Dynamo traced the model into **{len(graphs)} graph{'s' if len(graphs) != 1 else ''}** with "
             f"{nodes} operation node{'s' if nodes != 1 else ''}."]
    for item in breaks:
        why = str(item.get("gb_type") or item.get("reason") or "a graph break").split(" (Dynamo:")[0]
        lines.append(f"It broke the graph at line {item.get('lineno', '?')} (`{item.get('line', '').strip()}`): {why}.")
    if not breaks:
        lines.append("There is no graph break: the whole model is one graph, so fusion can work across all of it.")
    recompiles = record.get("recompiles") or []
    if recompiles:
        lines.append(f"It recompiled {len(recompiles)} time{'s' if len(recompiles) != 1 else ''}, first because "
                     f"{recompiles[0].get('reason', '')}")
    return lines


def aten_text(graph: dict) -> list[str]:
    fx_calls = [n for n in graph.get("fx") or [] if n.get("op") not in ("placeholder", "output", "get_attr")]
    aten_calls = [n for n in graph.get("aten") or [] if n.get("op") == "call_function"]
    lines = [f"AOTAutograd turned {len(fx_calls)} FX operation{'s' if len(fx_calls) != 1 else ''} into "
             f"{len(aten_calls)} ATen call{'s' if len(aten_calls) != 1 else ''}."]
    by_fx: dict[str, list[str]] = {}
    for node in aten_calls:
        for origin in node.get("fx_origins") or []:
            by_fx.setdefault(origin, []).append(_short(node.get("target")))
    decomposed = [(fx, ops) for fx, ops in by_fx.items() if len(ops) > 1]
    for fx, ops in decomposed[:4]:
        lines.append(f"`{fx}` decomposed into {len(ops)} ATen ops: {', '.join(ops)}.")
    if not decomposed and aten_calls:
        lines.append("Each FX operation maps to one ATen op here: nothing needed decomposing.")
    return lines


def ir_text(graph: dict) -> list[str]:
    nodes = list(_ir_nodes(graph).values())
    kinds = Counter(n.get("kind") for n in nodes)
    aten_calls = [n for n in graph.get("aten") or [] if n.get("op") == "call_function"]
    covered = {a for n in nodes for a in n.get("aten_origins") or []}
    views = [n for n in aten_calls if n["name"] not in covered]
    parts = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
    lines = [f"Lowering made {len(nodes)} loop-IR node{'s' if len(nodes) != 1 else ''} ({parts or 'none'})."]
    if views:
        lines.append(f"{len(views)} ATen op{'s' if len(views) != 1 else ''} ({', '.join(sorted({_short(v['target']) for v in views})[:5])}) "
                     "became no node at all: views and reshapes are index arithmetic inside the loops that read them.")
    for node in nodes:
        if node.get("kind") == "fallback":
            lines.append(f"`{node['name']}` falls back to eager PyTorch: {node.get('reason') or 'no lowering for it'}.")
    return lines


def fusion_text(graph: dict) -> list[str]:
    kernels = graph.get("kernels") or []
    decisions = (graph.get("fusion") or {}).get("decisions") or []
    ir_count = len(_ir_nodes(graph))
    lines = [f"{ir_count} loop node{'s' if ir_count != 1 else ''} became **{len(kernels)} kernel"
             f"{'s' if len(kernels) != 1 else ''}**."]
    fused_reasons = {}
    for decision in decisions:
        if decision.get("fused"):
            fused_reasons.setdefault(decision.get("consumer"), decision.get("reason"))
    for kernel in kernels:
        ops = [_short(o) for o in kernel.get("ops") or []]
        if len(kernel.get("ir_nodes") or []) > 1:
            reasons = [d.get("reason") for d in decisions if d.get("fused") and
                       set(str(d.get("consumer")).split("+")) & set(kernel.get("ir_nodes") or [])]
            why = f" because {reasons[0]}" if reasons else ""
            lines.append(f"{' + '.join(ops)} became one kernel (`{kernel['name']}`){why}: one pass over memory "
                         "instead of one per op.")
    refused = [d for d in decisions if not d.get("fused")]
    for decision in refused[:3]:
        lines.append(f"{describe_group(graph, decision.get('producer'))} and "
                     f"{describe_group(graph, decision.get('consumer'))} stay apart: {decision.get('reason')}.")
    if len(refused) > 3:
        lines.append(f"... and {len(refused) - 3} more refusals (see the table).")
    memory = graph.get("memory") or {}
    if memory.get("peak_bytes") and memory.get("unfused_peak_bytes"):
        lines.append(f"Peak memory for intermediates: {memory['peak_bytes']:,} bytes, against "
                     f"{memory['unfused_peak_bytes']:,} with one kernel per op.")
    return lines


def code_text(graph: dict) -> list[str]:
    code = graph.get("code") or {}
    kernels = [k for k in graph.get("kernels") or [] if k.get("kind") in ("pointwise", "reduction", "template")]
    library = [k for k in graph.get("kernels") or [] if k.get("kind") in ("extern", "fallback")]
    language = {"cpp": "C++ (OpenMP)", "triton": "Triton"}.get(code.get("language"), code.get("language") or "code")
    lines = [f"{len(kernels)} generated {language} kernel{'s' if len(kernels) != 1 else ''} and "
             f"{len(library)} library or eager call{'s' if len(library) != 1 else ''}, run in order by the "
             "Python wrapper."]
    reused = [b for b in (graph.get("memory") or {}).get("buffers") or [] if b.get("reuses")]
    if reused:
        lines.append(f"The wrapper reuses memory {len(reused)} time{'s' if len(reused) != 1 else ''} "
                     f"(e.g. `{reused[0]['name']}` takes `{reused[0]['reuses']}`'s storage once it is dead).")
    return lines


def run_text(record: dict) -> list[str]:
    verify = record.get("verify") or {}
    if not verify:
        return ["The compiled model was not run."]
    if verify.get("ok"):
        return [f"The compiled model's outputs match eager PyTorch (largest difference {verify.get('max_abs_err', 0):.3g})."]
    return [f"The compiled outputs differ from eager: {verify.get('problem') or 'see the numbers below'}."]


def bench_text(record: dict) -> list[str]:
    machine = record.get("machine") or {}
    kernels = [k for g in record.get("graphs") or [] for k in g.get("kernels") or []
               if isinstance(k.get("time_ms"), (int, float))]
    if not kernels:
        return ["No per-kernel profile in this exploration (explore with the profile on)."]
    slowest = max(kernels, key=lambda k: k["time_ms"])
    line = (f"`{slowest['name']}` ({' + '.join(_short(o) for o in slowest.get('ops') or []) or slowest.get('kind')}) "
            f"takes the most time: {slowest['time_ms']:.4f} ms")
    if isinstance(slowest.get("share"), (int, float)):
        line += f", {slowest['share']:.0%} of the call"
    if slowest.get("gbps") and machine.get("copy_gbps"):
        fraction = slowest["gbps"] / machine["copy_gbps"]
        line += (f", at {slowest['gbps']:.1f} GB/s: {fraction:.0%} of this machine's copy bandwidth "
                 f"({machine['copy_gbps']:.1f} GB/s)" if fraction <= 1 else
                 f", at {slowest['gbps']:.1f} GB/s: faster than the measured memory copy "
                 f"({machine['copy_gbps']:.1f} GB/s), so its data sits in the caches")
    lines = [line + "."]
    if machine.get("load_warning"):
        lines.append(f"Careful: {machine['load_warning']}.")
    return lines


def stage_text(record: dict, graph: dict | None, stage: str) -> list[str]:
    """The sentences for one stage of the app's stepper (capture, ATen, loop IR, fusion, code, run, bench)."""
    graph = graph or {}
    table = {"capture": lambda: capture_text(record), "ATen": lambda: aten_text(graph),
             "loop IR": lambda: ir_text(graph), "fusion": lambda: fusion_text(graph), "code": lambda: code_text(graph),
             "run": lambda: run_text(record), "bench": lambda: bench_text(record)}
    return table[stage]() if stage in table else []

