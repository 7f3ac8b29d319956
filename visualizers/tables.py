"""Record -> rows (lists of dicts) for tables: kernels, fusion decisions, numerics, runs, recompiles, guards."""
from __future__ import annotations


def kernel_rows(graph: dict) -> list[dict]:
    rows = []
    for kernel in graph.get("kernels") or []:
        ops = [str(o).replace("aten::", "") for o in kernel.get("ops") or []]
        rows.append({
            "kernel": kernel.get("name"), "kind": kernel.get("kind"), "fused ops": len(ops),
            "ops": ", ".join(ops), "bytes moved": kernel.get("bytes") or 0,
            "reads": ", ".join(kernel.get("reads") or []), "writes": ", ".join(kernel.get("writes") or []),
            "from FX": ", ".join(kernel.get("fx_origins") or []), "note": kernel.get("reason") or "",
        })
    return rows


def launch_rows(graph: dict) -> list[dict]:
    """Triton kernels' launch configurations (kernels[].triton), when the backend records them."""
    rows = []
    for kernel in graph.get("kernels") or []:
        triton = kernel.get("triton")
        if not isinstance(triton, dict):
            continue
        config = triton.get("config") or {}
        gpu = triton.get("gpu_config") or {}
        rows.append({"kernel": kernel.get("name"), "form": triton.get("form"), "grid": triton.get("grid"),
                     "config": ", ".join(f"{k}={v}" for k, v in config.items()),
                     "GPU config": ", ".join(f"{k}={v}" for k, v in gpu.items()),
                     "rows x reduction": " x ".join(str(triton[k]) for k in ("rows", "red") if triton.get(k))})
    return rows


def template_rows(graph: dict) -> list[dict]:
    """GEMM template kernels (kernels[].template): which template, the GEMM, its tile config, the fused
    epilogue (ops and the FX nodes they come from) and why it was chosen."""
    rows = []
    for kernel in graph.get("kernels") or []:
        template = kernel.get("template")
        if not isinstance(template, dict):
            continue
        spec = template.get("spec") or {}
        fused = template.get("fused_ops") or []
        batch = f"{spec.get('batch')} x " if (spec.get("batch") or 1) > 1 else ""
        rows.append({"kernel": kernel.get("name"), "template": template.get("name"), "op": spec.get("op"),
                     "GEMM (MxNxK)": f"{batch}{spec.get('M')}x{spec.get('N')}x{spec.get('K')}",
                     "dtype": spec.get("dtype"),
                     "config": ", ".join(f"{k}={v}" for k, v in (template.get("config") or {}).items()),
                     "epilogue": ", ".join(str(o).replace("aten::", "") for op in fused for o in op.get("ops") or []),
                     "from FX": ", ".join(f for op in fused for f in op.get("fx_origins") or []),
                     "winner": (template.get("autotune") or {}).get("winner") or "", "why": template.get("reason")})
    return rows


def autotune_rows(graph: dict) -> list[dict]:
    """max-autotune's measured candidates of each template kernel (tile configs and the library call)."""
    rows = []
    for kernel in graph.get("kernels") or []:
        tuning = (kernel.get("template") or {}).get("autotune") or {}
        for candidate in tuning.get("candidates") or []:
            rows.append({"kernel": kernel.get("name"), "candidate": candidate.get("candidate"),
                         "ms": candidate.get("ms"), "winner": candidate.get("candidate") == tuning.get("winner"),
                         "error": candidate.get("error") or ""})
    return rows


def decision_rows(graph: dict, only_refused: bool = False) -> list[dict]:
    rows = []
    for decision in (graph.get("fusion") or {}).get("decisions") or []:
        if only_refused and decision.get("fused"):
            continue
        rows.append({"fused": bool(decision.get("fused")), "producer": decision.get("producer"),
                     "consumer": decision.get("consumer"), "kind": decision.get("kind"),
                     "why": decision.get("reason")})
    return rows


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


def run_rows(record: dict) -> list[dict]:
    rows = []
    for run in record.get("runs") or []:
        verify = run.get("verify") or {}
        rows.append({"inputs": run.get("inputs"), "new graphs (recompiles)": run.get("new_graphs"),
                     "ok": verify.get("ok"), "max abs error": verify.get("max_abs_err")})
    return rows


def recompile_rows(record: dict) -> list[dict]:
    return [{"inputs": r.get("inputs"), "reason": r.get("reason")} for r in record.get("recompiles") or []]


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
