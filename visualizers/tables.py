"""Record -> rows (lists of dicts) for tables: kernels, fusion decisions, numerics, runs, recompiles, guards.

They read the typed record (engine/record.py) by attribute; only the record's free-form parts (configs, the
runtime's autotune reports, `verify`) are plain dicts."""
from __future__ import annotations

from engine.record import Exploration, FusionDecision, GraphRecord, TilingRecord, VerifyRecord
from visualizers import graphs, teaching


def user_text(text: str | None, graph: GraphRecord | None = None, index: tuple | None = None) -> str:
    """Record text for a user: the engine's references to its own Notes ("(Note [Cat pieces])") left out and,
    given the graph, its buffer names said as the ops that compute them."""
    return teaching.plain_words(text, graph, index)


def tiling_details(tiling: TilingRecord) -> list[str]:
    """The tiling's extras in words: its run, column tiles, the pieces of a cut."""
    details = [f"run {tiling.run}"] if tiling.run else []
    details += ["columns True"] if tiling.columns else []
    if tiling.pieces is not None and tiling.pieces.pieces:
        details.append(f"{len(tiling.pieces.pieces)} pieces along dim {tiling.pieces.dim}")
    return details


def tiling_text(tiling: TilingRecord | None, graph: GraphRecord | None = None,
                index: tuple | None = None) -> tuple[str, str]:
    """A kernel's tiling as (choice, why): "2d tiles 32x32", "row, split in 4"; with the pieces of a cut. Given
    the graph, the why names the ops whose results it reads, not their buffers ("buf18")."""
    if tiling is None:
        return "", ""
    choice = tiling.choice
    details = tiling_details(tiling)
    why = [user_text(tiling.reason, graph, index)]
    if tiling.pieces is not None and tiling.pieces.pieces:
        why.append(user_text(tiling.pieces.reason, graph, index))
    return (choice + (f" ({', '.join(details)})" if details else "")), "; ".join(w for w in why if w)


def kernel_module(graph: GraphRecord, kernel, paths: dict | None = None) -> str:
    """The deepest module all of a kernel's ATen ops run in ("" when they span the top level)."""
    paths = graphs.module_paths(graph, "aten") if paths is None else paths
    return graphs.common_module([paths.get(a, "") for a in kernel.aten_origins])


def kernel_rows(graph: GraphRecord) -> list[dict]:
    """One row per kernel: what it computes, the bytes it moves, how its loops are tiled and why, its module,
    and its time when profiled."""
    rows = []
    paths = graphs.module_paths(graph, "aten")
    index = teaching.node_index(graph)
    for kernel in graph.kernels:
        ops = [teaching.short_op(op) for op in kernel.ops]
        tiling, why = tiling_text(kernel.tiling, graph, index)
        template = kernel.template
        if template is not None and not tiling:
            tiling = ", ".join(f"{k}={v}" for k, v in template.config.items())
            why = user_text(template.reason, graph, index)
        rows.append({
            "kernel": kernel.name, "kind": kernel.kind, "fused ops": len(ops), "ops": " + ".join(ops),
            "bytes moved": kernel.bytes, "tiling": tiling, "tiling: why": why,
            "module": kernel_module(graph, kernel, paths), "ms": kernel.time_ms, "± ms": kernel.time_iqr_ms,
            "from FX": ", ".join(kernel.fx_origins), "note": user_text(kernel.reason, graph, index),
        })
    return rows


def launch_rows(graph: GraphRecord) -> list[dict]:
    """Triton kernels' launch configurations (kernels[].triton), when the backend records them."""
    rows = []
    for kernel in graph.kernels:
        triton = kernel.triton
        if triton is None:
            continue
        rows.append({"kernel": kernel.name, "form": triton.form, "grid": triton.grid,
                     "config": ", ".join(f"{k}={v}" for k, v in triton.config.items()),
                     "GPU config": ", ".join(f"{k}={v}" for k, v in triton.gpu_config.items()),
                     "rows x reduction": " x ".join(size for size in (triton.rows, triton.red) if size)})
    return rows


def template_rows(graph: GraphRecord) -> list[dict]:
    """GEMM template kernels (kernels[].template): which template, the GEMM, its tile config, the fused
    epilogue (ops and the FX nodes they come from) and why it was chosen."""
    rows = []
    for kernel in graph.kernels:
        template = kernel.template
        if template is None:
            continue
        spec = template.spec
        fused = template.fused_ops or []
        batch = f"{spec.batch} x " if spec.batch > 1 else ""
        rows.append({"kernel": kernel.name, "template": template.name, "op": spec.op,
                     "GEMM (MxNxK)": f"{batch}{spec.M}x{spec.N}x{spec.K}",
                     "dtype": spec.dtype,
                     "config": ", ".join(f"{k}={v}" for k, v in template.config.items()),
                     "epilogue": ", ".join(str(o).replace("aten::", "") for op in fused for o in op.ops),
                     "from FX": ", ".join(f for op in fused for f in op.fx_origins),
                     "winner": (template.autotune.winner if template.autotune else None) or "", "why": template.reason})
    return rows


def autotune_rows(graph: GraphRecord) -> list[dict]:
    """max-autotune's measured candidates of each template kernel (tile configs and the library call), which
    one default mode would run, and why the winner won (Note [Autotune against the default's pick])."""
    rows = []
    for kernel in graph.kernels:
        tuning = kernel.template.autotune if kernel.template is not None else None
        for candidate in (tuning.candidates if tuning else None) or []:
            winner = candidate.candidate == tuning.winner
            rows.append({"kernel": kernel.name, "candidate": candidate.candidate, "ms": candidate.ms, "winner": winner,
                         "default's pick": candidate.candidate == tuning.default_pick,
                         "why": (tuning.why or "") if winner else "", "error": candidate.error or ""})
    return rows


def decisions(graph: GraphRecord, only_refused: bool = False) -> list[FusionDecision]:
    return [d for d in (graph.fusion.decisions if graph.fusion else []) if not (only_refused and d.fused)]


def decision_bytes(graph: GraphRecord, decision: FusionDecision) -> int:
    """What a refusal costs: the bytes of the producer's buffers that go through memory (the memory plan's)."""
    sizes = {b.name: b.bytes for b in (graph.memory.buffers if graph.memory else [])}
    return sum(sizes.get(name, 0) for name in graphs.decision_buffers(graph, decision.producer))


def decision_rows(graph: GraphRecord, only_refused: bool = False) -> list[dict]:
    # named by the ops the graph draws (and their FX nodes), then by the IR buffers the scheduler names
    paths = graphs.module_paths(graph, "aten")
    rows = []
    for d in decisions(graph, only_refused):
        consumer = teaching.decision_ops(graph, d.consumer)
        rows.append({"fused": d.fused, "producer ops": teaching.describe_group(graph, d.producer),
                     "consumer ops": teaching.describe_group(graph, d.consumer), "kind": d.kind,
                     "rule": d.rule, "why": teaching.plain_words(d.reason, graph),
                     "module": graphs.common_module([paths.get(a, "") for a in consumer["aten"]]),
                     "bytes": decision_bytes(graph, d) if not d.fused else 0,
                     "producer": d.producer, "consumer": d.consumer})
    return rows


def filtered(rows: list[dict], kinds: list[str] | None = None, rules: list[str] | None = None,
             module: str = "", only_refused: bool = False) -> list[int]:
    """The indexes of the rows that pass the table filters: kinds (kernel_rows), rules and refusals only
    (decision_rows), a module path prefix (both; layers.3 keeps layers.3.mlp, not layers.30)."""
    kept = []
    for number, row in enumerate(rows):
        if kinds and row["kind"] not in kinds:
            continue
        if rules and row["rule"] not in rules:
            continue
        if only_refused and row["fused"]:
            continue
        path = row["module"] or ""
        if module and not (path == module or path.startswith(module + ".")):
            continue
        kept.append(number)
    return kept


def numerics_rows(verify: VerifyRecord) -> list[dict]:
    rows = []
    for number, output in enumerate(verify.outputs or []):
        shape = output.shape
        rows.append({"output": number if output.path is None else output.path, "ok": output.ok,
                     "judged by": output.judged_by or "",
                     "shape": "x".join(str(s) for s in shape) if isinstance(shape, list) else "",
                     "dtype": output.dtype, "max abs error": output.max_abs_err,
                     "max rel error": output.max_rel_err, "atol": output.atol, "rtol": output.rtol})
    return rows


def run_rows(record: Exploration) -> list[dict]:
    return [{"inputs": run.inputs, "new graphs (recompiles)": run.new_graphs, "ok": run.verify.ok,
             "max abs error": run.verify.max_abs_err} for run in record.runs]


def recompile_rows(record: Exploration) -> list[dict]:
    return [{"inputs": r.inputs, "reason": r.reason} for r in record.recompiles]


GLOBAL_STATE = ("grad_mode", "deterministic_algorithms", "global_state", "torch_function_state",
                "utils_device", "top_saved_tensors_hooks", "autocast", "default_device")
GUARD_KINDS = ("shapes and sizes", "inputs", "global state", "module hooks (none registered)",
               "object identity (type and id)", "attributes and closures", "other")


def guard_kind(guard: str) -> str:
    """What a Dynamo guard checks, in a reader's words (Dynamo prints them as code)."""
    text = str(guard).strip()
    subject, colon, body = text.partition(": ")
    if text == "shape_env" or "size()" in text or "stride()" in text or "sym_size" in text or \
            (colon and "<=" in body and "L[" in body):
        return "shapes and sizes"
    if text.startswith(GLOBAL_STATE) or any(word in text.split(" ")[0] for word in GLOBAL_STATE):
        return "global state"
    if text.startswith("empty_nn_module_hooks_dict"):
        return "module hooks (none registered)"
    if "___check_type_id" in body or "___check_obj_id" in body:
        return "object identity (type and id)"
    if colon and subject.startswith("L[") and "._modules" not in subject and "L['self']" not in subject:
        return "inputs"
    if text.startswith(("guard on", "closure_match")) or body.startswith(("hasattr", "dict", "not ", "len", "list")) \
            or subject.startswith(("G[", "L['self']", "L['fn']")):
        return "attributes and closures"
    return "other"


def guard_groups(guards: list[str]) -> dict[str, list[str]]:
    """Guards sorted by what they check (guard_kind), in GUARD_KINDS order, empty kinds left out."""
    groups: dict[str, list[str]] = {kind: [] for kind in GUARD_KINDS}
    for guard in guards or []:
        groups[guard_kind(guard)].append(str(guard))
    return {k: v for k, v in groups.items() if v}


def guard_summary(guards: list[str]) -> str:
    """One line: how many guards of each kind ("1 shapes and sizes, 1914 module hooks (none registered), ...")."""
    return ", ".join(f"{len(items)} {kind}" for kind, items in guard_groups(guards).items())


def human_bytes(count: float | int | None) -> str:
    if not isinstance(count, (int, float)):
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"
