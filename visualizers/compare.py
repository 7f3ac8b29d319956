"""A comparison (engine/tools/compare.py's JSON) as rows and highlighted diff text for the app's compare page."""
from __future__ import annotations

VERBS = {"same": "same", "merged": "merged in B", "split": "split in B", "added": "only in B", "removed": "only in A"}


def _names(value) -> str:
    return " + ".join(value) if isinstance(value, list) else str(value or "-")


def kernel_diff_rows(kernels: dict) -> list[dict]:
    rows = []
    for key, verb in VERBS.items():
        for item in kernels.get(key) or []:
            rows.append({"change": verb, "A": _names(item.get("a")), "B": _names(item.get("b")),
                         "ATen nodes": ", ".join(item.get("ops") or [])})
    return rows


def timing_rows(document: dict) -> list[dict]:
    """Per kernel time on each side (the profile), matched by name within each side."""
    rows = []
    for side in ("a", "b"):
        record = (document.get(side) or {}).get("record") or {}
        for graph in record.get("graphs") or []:
            for kernel in graph.get("kernels") or []:
                rows.append({"side": side.upper(), "graph": graph.get("index"), "kernel": kernel.get("name"),
                             "kind": kernel.get("kind"), "time ms": kernel.get("time_ms"),
                             "GB/s": kernel.get("gbps")})
    return rows


def speedup_sentence(timing: dict) -> str:
    a, b, speedup = timing.get("a_ms"), timing.get("b_ms"), timing.get("speedup_b_over_a")
    if not isinstance(speedup, (int, float)):
        return "No time for one of the sides."
    faster = "faster" if speedup >= 1 else "slower"
    return (f"A {a:.4f} ms, B {b:.4f} ms per call: B is {speedup:.3g}x the speed of A ({faster}; "
            "speedup = time of A / time of B, higher is better for B).")
