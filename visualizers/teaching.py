"""What happened to this model at each stage, in a few sentences generated from the record (not canned text).

Each function reads one graph (or the whole record) and returns short markdown sentences that name this model's
own ops, nodes, kernels and reasons: "amax + sub + exp + sum + div became one kernel (kernel_0): ...".
Fusion decisions speak of kernel groups by IR buffer names (buf3+buf4); `decision_ops` turns those into the
ATen ops and FX nodes a reader sees on the graphs.
"""
from __future__ import annotations

from collections import Counter

from engine import words
from engine.record import Exploration, GraphRecord, IRNode
from visualizers import graphs

GENERATED = ("pointwise", "reduction", "template", "scan")  # kernel kinds whose code we generate; the rest call a library
KIND_WORDS = {"extern": "library call", "fallback": "eager fallback", "template": "GEMM template"}  # as users say them


def kind_counts(kernels) -> str:
    """"241 library calls, 97 pointwise, 49 reduction": kernels counted by kind, in users' words."""
    counts = Counter(k.kind for k in kernels)
    return ", ".join(_plural(count, KIND_WORDS[kind]) if kind in KIND_WORDS else f"{count} {kind}"
                     for kind, count in counts.most_common())


def short_op(op) -> str:
    """aten.sum.dim_IntList -> sum (the overload says which signature, not what the op does)."""
    return str(op).replace("aten::", "aten.").removeprefix("aten.").split(".")[0]


def _ir_nodes(graph: GraphRecord) -> dict[str, IRNode]:
    return {n.name: n for n in graph.ir.nodes} if graph.ir else {}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def decision_ops(graph: GraphRecord, label: str, index: tuple | None = None) -> dict:
    """A fusion group label ("buf3+buf4") -> {"ir": [...], "aten": [...], "ops": [...], "fx": [...]}. `index`,
    from node_index(graph), saves rebuilding the graph's name maps on each call."""
    ir_nodes, aten = index or node_index(graph)
    names = graphs.decision_buffers(graph, label)
    aten_names = list(dict.fromkeys(a for n in names if n in ir_nodes for a in ir_nodes[n].aten_origins))
    ops = list(dict.fromkeys(short_op(aten[a].target) for a in aten_names if a in aten))
    fx = list(dict.fromkeys(f for a in aten_names if a in aten for f in aten[a].fx_origins))
    return {"ir": names, "aten": aten_names, "ops": ops, "fx": fx}


def node_index(graph: GraphRecord) -> tuple[dict, dict]:
    """The graph's loop-IR and ATen nodes by name."""
    return _ir_nodes(graph), {n.name: n for n in graph.aten}


def describe_group(graph: GraphRecord, label: str, index: tuple | None = None) -> str:
    """"buf3+buf4" as a reader sees it: "mul + add (FX: mul, add)"."""
    named = decision_ops(graph, label, index)
    ops = " + ".join(named["ops"]) or str(label)
    return f"{ops} (FX: {', '.join(named['fx'])})" if named["fx"] else ops


def capture_text(record: Exploration) -> list[str]:
    graphs, breaks = record.graphs, record.graph_breaks
    nodes = sum(sum(1 for n in g.fx if n.op in ("call_function", "call_method", "call_module")) for g in graphs)
    lines = [f"Dynamo traced the model into **{_plural(len(graphs), 'graph')}** with "
             f"{_plural(nodes, 'operation node')}."]
    for item in breaks:
        why = (item.gb_type or item.reason or "a graph break").split(" (Dynamo:")[0]
        where = item.lineno if item.lineno is not None else "?"
        lines.append(f"It broke the graph at line {where} (`{item.line.strip()}`): {why}.")
    if not breaks:
        lines.append("There is no graph break: the whole model is one graph, so fusion can work across all of it.")
    if record.recompiles:
        lines.append(f"It recompiled {_plural(len(record.recompiles), 'time')}, first because "
                     f"{record.recompiles[0].reason}")
    return lines


def aten_text(graph: GraphRecord) -> list[str]:
    fx_calls = [n for n in graph.fx if n.op not in ("placeholder", "output", "get_attr")]
    aten_calls = [n for n in graph.aten if n.op == "call_function"]
    lines = [f"AOTAutograd turned {_plural(len(fx_calls), 'FX operation')} into "
             f"{_plural(len(aten_calls), 'ATen call')}."]
    by_fx: dict[str, list[str]] = {}
    for node in aten_calls:
        for origin in node.fx_origins:
            by_fx.setdefault(origin, []).append(short_op(node.target))
    decomposed = [(fx, ops) for fx, ops in by_fx.items() if len(ops) > 1]
    alike: dict[tuple, list[str]] = {}  # the same decomposition in every layer is one sentence
    for fx, ops in decomposed:
        alike.setdefault(tuple(ops), []).append(fx)
    for ops, names in list(alike.items())[:4]:
        named = ", ".join(f"`{fx}`" for fx in names[:3])
        if len(names) > 3:
            named += f" and {len(names) - 3} more"
        each = " each" if len(names) > 1 else ""
        lines.append(f"{named}{each} decomposed into {len(ops)} ATen ops: {_counted(ops)}.")
    if not decomposed and aten_calls:
        lines.append("Each FX operation maps to one ATen op here: nothing needed decomposing.")
    return lines


def _counted(ops) -> str:
    """"unsqueeze, sub, unsqueeze, mul" -> "unsqueeze x2, sub, mul": each op once, in order, with its count."""
    counts = Counter(ops)
    return ", ".join(op + (f" x{counts[op]}" if counts[op] > 1 else "") for op in dict.fromkeys(ops))


def ir_text(graph: GraphRecord) -> list[str]:
    nodes = list(_ir_nodes(graph).values())
    kinds = Counter(n.kind for n in nodes)
    aten_calls = [n for n in graph.aten if n.op == "call_function"]
    covered = {a for n in nodes for a in n.aten_origins}
    views = [n for n in aten_calls if n.name not in covered]
    parts = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
    lines = [f"Lowering made {_plural(len(nodes), 'loop-IR node')} ({parts or 'none'})."]
    if views:
        lines.append(f"{_plural(len(views), 'ATen op')} ({', '.join(sorted({short_op(v.target) for v in views})[:5])}) "
                     "became no node at all: views and reshapes are index arithmetic inside the loops that read them.")
    index = node_index(graph)
    for node in nodes:
        if node.kind == "fallback":  # said as its op and FX node, as the graphs draw it, not as its buffer
            what = describe_group(graph, node.name, index)
            what = what if what != node.name else "An op"
            lines.append(f"{what} falls back to eager PyTorch: "
                         f"{plain_words(node.reason, graph, index).rstrip('.') or 'no lowering for it'}.")
    return lines


REFUSALS_TOLD = 3  # prose for the few largest refusals by bytes; the table holds the rest


def fusion_text(graph: GraphRecord) -> list[str]:
    """A few sentences, however big the graph: what the kernels are, the fusions that repeat most, and the
    largest refusals by the bytes they send through memory (the table lists every decision)."""
    kernels = graph.kernels
    decisions = graph.fusion.decisions if graph.fusion else []
    lines = [f"{_plural(len(_ir_nodes(graph)), 'loop node')} became **{_plural(len(kernels), 'kernel')}** "
             f"({kind_counts(kernels) or 'none'})."]
    fused = [k for k in kernels if k.kind in GENERATED and len(k.ir_nodes) > 1]  # a library call is no loop nest
    patterns = Counter(" + ".join(short_op(o) for o in k.ops) for k in fused)
    for pattern, count in patterns.most_common(3):
        example = next(k for k in fused if " + ".join(short_op(o) for o in k.ops) == pattern)
        times = f"{count} kernels compute" if count > 1 else "One kernel computes"
        lines.append(f"{times} {pattern} in one loop nest (e.g. `{example.name}`): its intermediates never go "
                     "to memory.")
    refused = [d for d in decisions if not d.fused]
    sizes = {b.name: b.bytes for b in (graph.memory.buffers if graph.memory else [])}

    def cost(decision) -> int:
        return sum(sizes.get(name, 0) for name in graphs.decision_buffers(graph, decision.producer))

    index = node_index(graph)
    alike: dict[tuple, list] = {}  # the same refusal in every layer is told once, with its count
    for decision in sorted(refused, key=cost, reverse=True):
        why = plain_words(decision.reason, graph, index).rstrip(".")
        same = tuple(tuple(decision_ops(graph, side, index)["ops"]) for side in (decision.producer, decision.consumer))
        alike.setdefault((same, why), []).append(decision)
    told = 0
    for (_, why), group in list(alike.items())[:REFUSALS_TOLD]:
        decision = group[0]
        pair = (describe_group(graph, decision.producer, index), describe_group(graph, decision.consumer, index))
        spent = cost(decision)
        notes = ([f"{_bytes(spent)} through memory"] if spent else []) + (
            [f"{len(group)} pairs alike"] if len(group) > 1 else [])
        moved = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"{pair[0]} and {pair[1]} stay apart{moved}: {why}.")
        told += len(group)
    if len(refused) > told:
        lines.append(f"{_plural(len(refused) - told, 'more refusal')} in the table below (filter by rule or module).")
    memory = graph.memory
    if memory and memory.peak_bytes and memory.unfused_peak_bytes:
        lines.append(f"Peak memory for intermediates: {_bytes(memory.peak_bytes)}, against "
                     f"{_bytes(memory.unfused_peak_bytes)} with one kernel per op.")
    return lines


def plain_words(text: str | None, graph: GraphRecord | None = None, index: tuple | None = None) -> str:
    """Record text for a user (engine/words.py): the engine's references to its own Notes ("(Note [Cat pieces])")
    left out and, given the graph, its buffer names ("buf238") said as the ops that compute them ("mm's result")."""
    return words.plain_words(text, None if graph is None else
                             lambda buffer: " + ".join(decision_ops(graph, buffer, index)["ops"]))


def _bytes(count: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def code_text(graph: GraphRecord) -> list[str]:
    generated = [k for k in graph.kernels if k.kind in GENERATED]
    library = [k for k in graph.kernels if k.kind in ("extern", "fallback")]
    spoken = graph.code.language if graph.code else ""
    language = {"cpp": "C++ (OpenMP)", "triton": "Triton"}.get(spoken, spoken or "code")
    lines = [f"{len(generated)} generated {language} kernel{'s' if len(generated) != 1 else ''} and "
             f"{_plural(len(library), 'library or eager call')}, run in order by the Python wrapper."]
    reused = [b for b in graph.memory.buffers if b.reuses] if graph.memory else []
    if reused:
        index = node_index(graph)
        # the example said as the ops (and FX nodes) whose results share the storage, not as the code's buffers
        pair = [decision_ops(graph, name, index) for name in (reused[0].name, reused[0].reuses)]
        said = [" + ".join(side["ops"]) + (f" (FX `{', '.join(side['fx'])}`)" if side["fx"] else "") for side in pair]
        example = (f": e.g. the result of {said[0]} takes over the storage of {said[1]} once that is dead"
                   if all(side["ops"] for side in pair) else "")
        lines.append(f"The wrapper reuses memory {_plural(len(reused), 'time')}{example}.")
    return lines


def run_text(record: Exploration) -> list[str]:
    verify = record.verify
    if verify.ok is None:
        return ["The compiled model was not run."]
    if verify.ok:
        return [f"The compiled model's outputs match eager PyTorch (largest difference {verify.max_abs_err or 0:.3g})."]
    return [f"The compiled outputs differ from eager: {verify.problem or 'see the numbers below'}."]


def bench_text(record: Exploration) -> list[str]:
    machine = record.machine
    kernels = [k for k in record.kernels if k.time_ms is not None]
    if not kernels:
        return ["No per-kernel profile in this exploration: the **Profile** page times every kernel."]
    slowest = max(kernels, key=lambda k: k.time_ms)
    line = (f"`{slowest.name}` ({' + '.join(short_op(o) for o in slowest.ops) or slowest.kind}) "
            f"takes the most time: {slowest.time_ms:.4f} ms")
    if slowest.share is not None:
        line += f", {slowest.share:.0%} of the call"
    if slowest.gbps and machine.copy_gbps:
        fraction = slowest.gbps / machine.copy_gbps
        line += (f", at {slowest.gbps:.1f} GB/s: {fraction:.0%} of this machine's copy bandwidth "
                 f"({machine.copy_gbps:.1f} GB/s)" if fraction <= 1 else
                 f", at {slowest.gbps:.1f} GB/s: faster than the measured memory copy "
                 f"({machine.copy_gbps:.1f} GB/s), so its data sits in the caches")
    return [line + "."]


def bench_case_lines(case: dict) -> list[str]:
    """What a bench case's figures rest on, in words: the threads and why, how busy the machine was, and each
    ratio the bench could not judge (Note [Fair timing] in engine/runtime/timing.py)."""
    lines = []
    rounds = len(case.get("eager_rounds_ms") or [])
    how = f"medians of {rounds} interleaved rounds, ± their interquartile range" if rounds else "medians"
    threads = case.get("threads_reason") or f"{case.get('threads', '?')} threads"
    lines.append(f"{how}; {threads}; device {case.get('device', '?')}.")
    during = case.get("others_cores_during")
    if isinstance(during, (int, float)):
        lines.append(f"Other processes kept {during:.1f} of {case.get('cpus', '?')} CPUs busy while timing "
                     f"(load average {case.get('load_avg_1m', 0):.2f}).")
    names = {"speedup_vs_eager": "Glassbox vs eager", "inductor_speedup_vs_eager": "Inductor vs eager",
             "ratio_vs_inductor": "Glassbox vs Inductor"}
    for key, verdict in (case.get("verdicts") or {}).items():
        if not verdict.get("judged"):
            lines.append(f"{names.get(key, key)}: too noisy to judge — the spreads allow anything from "
                         f"{verdict['low']:.2f}x to {verdict['high']:.2f}x. Run it again on a quieter machine.")
    return lines


def stage_text(record: Exploration, graph: GraphRecord | None, stage: str) -> list[str]:
    """The sentences for one stage of the app's stepper (capture, ATen, loop IR, fusion, code, run, bench)."""
    graph = graph or GraphRecord(index=0)
    table = {"capture": lambda: capture_text(record), "ATen": lambda: aten_text(graph),
             "loop IR": lambda: ir_text(graph), "fusion": lambda: fusion_text(graph), "code": lambda: code_text(graph),
             "run": lambda: run_text(record), "bench": lambda: bench_text(record)}
    return table[stage]() if stage in table else []
