"""Record -> rows (lists of dicts) for tables: kernels, fusion decisions, numerics, runs, recompiles, guards.

They read the typed record (engine/record.py) by attribute; only the record's free-form parts (a kernel's
`triton` and `template` reports, `verify`) are plain dicts."""
from __future__ import annotations

from engine.record import Exploration, FusionDecision, GraphRecord
from visualizers import teaching


def kernel_rows(graph: GraphRecord) -> list[dict]:
    rows = []
    for kernel in graph.kernels:
        ops = [op.replace("aten::", "") for op in kernel.ops]
        rows.append({
            "kernel": kernel.name, "kind": kernel.kind, "fused ops": len(ops), "ops": ", ".join(ops),
            "bytes moved": kernel.bytes, "reads": ", ".join(kernel.reads), "writes": ", ".join(kernel.writes),
            "from FX": ", ".join(kernel.fx_origins), "note": kernel.reason or "",
        })
    return rows


def launch_rows(graph: GraphRecord) -> list[dict]:
    """Triton kernels' launch configurations (kernels[].triton), when the backend records them."""
    rows = []
    for kernel in graph.kernels:
        triton = kernel.triton
        if triton is None:
            continue
        config = triton.get("config") or {}
        gpu = triton.get("gpu_config") or {}
        rows.append({"kernel": kernel.name, "form": triton.get("form"), "grid": triton.get("grid"),
                     "config": ", ".join(f"{k}={v}" for k, v in config.items()),
                     "GPU config": ", ".join(f"{k}={v}" for k, v in gpu.items()),
                     "rows x reduction": " x ".join(str(triton[k]) for k in ("rows", "red") if triton.get(k))})
    return rows


def template_rows(graph: GraphRecord) -> list[dict]:
    """GEMM template kernels (kernels[].template): which template, the GEMM, its tile config, the fused
    epilogue (ops and the FX nodes they come from) and why it was chosen."""
    rows = []
    for kernel in graph.kernels:
        template = kernel.template
        if template is None:
            continue
        spec = template.get("spec") or {}
        fused = template.get("fused_ops") or []
        batch = f"{spec.get('batch')} x " if (spec.get("batch") or 1) > 1 else ""
        rows.append({"kernel": kernel.name, "template": template.get("name"), "op": spec.get("op"),
                     "GEMM (MxNxK)": f"{batch}{spec.get('M')}x{spec.get('N')}x{spec.get('K')}",
                     "dtype": spec.get("dtype"),
                     "config": ", ".join(f"{k}={v}" for k, v in (template.get("config") or {}).items()),
                     "epilogue": ", ".join(str(o).replace("aten::", "") for op in fused for o in op.get("ops") or []),
                     "from FX": ", ".join(f for op in fused for f in op.get("fx_origins") or []),
                     "winner": (template.get("autotune") or {}).get("winner") or "", "why": template.get("reason")})
    return rows


def autotune_rows(graph: GraphRecord) -> list[dict]:
    """max-autotune's measured candidates of each template kernel (tile configs and the library call), which
    one default mode would run, and why the winner won (Note [Autotune against the default's pick])."""
    rows = []
    for kernel in graph.kernels:
        tuning = (kernel.template or {}).get("autotune") or {}
        for candidate in tuning.get("candidates") or []:
            winner = candidate.get("candidate") == tuning.get("winner")
            rows.append({"kernel": kernel.name, "candidate": candidate.get("candidate"),
                         "ms": candidate.get("ms"), "winner": winner,
                         "default's pick": candidate.get("candidate") == tuning.get("default_pick"),
                         "why": (tuning.get("why") or "") if winner else "", "error": candidate.get("error") or ""})
    return rows


def decisions(graph: GraphRecord, only_refused: bool = False) -> list[FusionDecision]:
    return [d for d in (graph.fusion.decisions if graph.fusion else []) if not (only_refused and d.fused)]


def decision_rows(graph: GraphRecord, only_refused: bool = False) -> list[dict]:
    # named by the ops the graph draws (and their FX nodes), then by the IR buffers the scheduler names
    return [{"fused": d.fused, "producer ops": teaching.describe_group(graph, d.producer),
             "consumer ops": teaching.describe_group(graph, d.consumer), "kind": d.kind, "why": d.reason,
             "producer": d.producer, "consumer": d.consumer} for d in decisions(graph, only_refused)]


def numerics_rows(verify: dict) -> list[dict]:
    rows = []
    for number, output in enumerate((verify or {}).get("outputs") or []):
        shape = output.get("shape")
        rows.append({"output": number, "ok": output.get("ok"),
                     "shape": "x".join(str(s) for s in shape) if isinstance(shape, list) else str(shape or ""),
                     "dtype": output.get("dtype"), "max abs error": output.get("max_abs_err"),
                     "max rel error": output.get("max_rel_err"), "atol": output.get("atol"),
                     "rtol": output.get("rtol")})
    return rows


def run_rows(record: Exploration) -> list[dict]:
    return [{"inputs": run.inputs, "new graphs (recompiles)": run.new_graphs, "ok": run.verify.get("ok"),
             "max abs error": run.verify.get("max_abs_err")} for run in record.runs]


def recompile_rows(record: Exploration) -> list[dict]:
    return [{"inputs": r.inputs, "reason": r.reason} for r in record.recompiles]


def guard_groups(guards: list[str]) -> dict[str, list[str]]:
    """Guards sorted into what a reader cares about: shapes and sizes, the inputs, the model, global state."""
    groups: dict[str, list[str]] = {"shapes and sizes": [], "inputs": [], "model and globals": [], "global state": []}
    for guard in guards or []:
        text = str(guard)
        if ":" not in text:  # a named check of global state (grad_mode, shape_env, ...)
            groups["global state"].append(text)
        elif "size()" in text or "stride()" in text or "shape_env" in text or "<=" in text:
            groups["shapes and sizes"].append(text)
        elif text.startswith("L[") or ": L[" in text[:4]:
            groups["inputs"].append(text)
        elif text.startswith("G[") or "_modules" in text or "L['self']" in text or "L['fn']" in text:
            groups["model and globals"].append(text)
        else:
            groups["global state"].append(text)
    return {k: v for k, v in groups.items() if v}


def human_bytes(count: float | int | None) -> str:
    if not isinstance(count, (int, float)):
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"
