"""A comparison (engine/tools/compare.py's JSON) as rows and highlighted diff text for the app's compare page."""
from __future__ import annotations

from engine.record import Exploration, KernelRecord

VERBS = {"same": "same", "merged": "merged in B", "split": "split in B", "changed": "changed",
         "added": "only in B", "removed": "only in A"}


def _names(value) -> str:
    return " + ".join(value) if isinstance(value, list) else str(value or "-")


def side_record(document: dict, side: str) -> Exploration | None:
    """One side's record in a comparison document, typed (None when that side has none)."""
    data = (document.get(side) or {}).get("record")
    return Exploration.from_json(data) if data else None


def _kernel_index(document: dict, side: str) -> dict[str, KernelRecord]:
    record = side_record(document, side)
    return {k.name: k for k in record.kernels} if record is not None else {}


def _ops(kernel: KernelRecord) -> str:
    return " + ".join(str(o).replace("aten::", "").replace("aten.", "").split(".")[0] for o in kernel.ops)


def _time(times: list[float | None]) -> float | None:
    return sum(times) if times and all(t is not None for t in times) else None


def kernel_diff_rows(kernels: dict, document: dict | None = None) -> list[dict]:
    """One row per pairing of kernels across the sides (matched by the nodes they compute), with what each
    computes and, from the profile, its time and spread."""
    index_a, index_b = (_kernel_index(document or {}, side) for side in ("a", "b"))
    rows = []
    for key, verb in VERBS.items():
        for item in kernels.get(key) or []:
            names_a = item.get("a") if isinstance(item.get("a"), list) else [item["a"]] if item.get("a") else []
            names_b = item.get("b") if isinstance(item.get("b"), list) else [item["b"]] if item.get("b") else []
            in_a = [index_a[n] for n in names_a if n in index_a]
            in_b = [index_b[n] for n in names_b if n in index_b]
            ms_a, ms_b = _time([k.time_ms for k in in_a]), _time([k.time_ms for k in in_b])
            rows.append({"change": verb, "A": _names(item.get("a")), "A ops": " | ".join(_ops(k) for k in in_a),
                         "B": _names(item.get("b")), "B ops": " | ".join(_ops(k) for k in in_b),
                         "A ms": ms_a, "A ±": _time([k.time_iqr_ms for k in in_a]),
                         "B ms": ms_b, "B ±": _time([k.time_iqr_ms for k in in_b]),
                         "ATen nodes": ", ".join(item.get("ops") or [])})
    return rows


def timing_rows(document: dict) -> list[dict]:
    """Per kernel time on each side (the profile), matched by name within each side."""
    rows = []
    for side in ("a", "b"):
        record = side_record(document, side)
        for graph in record.graphs if record is not None else []:
            for kernel in graph.kernels:
                rows.append({"side": side.upper(), "graph": graph.index, "kernel": kernel.name,
                             "kind": kernel.kind, "time ms": kernel.time_ms,
                             "±": kernel.time_iqr_ms, "GB/s": kernel.gbps})
    return rows


def speedup_sentence(timing: dict) -> str:
    a, b, speedup = timing.get("a_ms"), timing.get("b_ms"), timing.get("speedup_b_over_a")
    if not isinstance(speedup, (int, float)):
        return "No time for one of the sides."
    spread = lambda key: f" ±{timing[key]:.4f}" if isinstance(timing.get(key), (int, float)) else ""  # noqa: E731
    times = f"A {a:.4f}{spread('a_iqr_ms')} ms, B {b:.4f}{spread('b_iqr_ms')} ms per call"
    verdict = timing.get("verdict") or {}
    if verdict and not verdict.get("judged"):
        return (f"{times}: too noisy to judge which is faster (B/A speedup anywhere from {verdict['low']:.2f}x "
                f"to {verdict['high']:.2f}x).")
    faster = "faster" if speedup >= 1 else "slower"
    return (f"{times}: B is {speedup:.3g}x the speed of A ({faster}; "
            "speedup = time of A / time of B, higher is better for B).")
