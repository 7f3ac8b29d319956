"""A comparison (engine/tools/compare.py's JSON) as rows and highlighted diff text for the app's compare page."""
from __future__ import annotations

from dataclasses import dataclass, fields

from engine.record import ErrorRecord, Exploration, KernelRecord

VERBS = {"same": "same", "merged": "merged in B", "split": "split in B", "changed": "changed",
         "added": "only in B", "removed": "only in A"}


def _names(names: list[str]) -> str:
    return " + ".join(names) if names else "-"


@dataclass
class Ratio:
    """A ratio of two medians and whether their spreads let it be judged (Note [Fair timing])."""
    ratio: float
    low: float
    high: float
    judged: bool
    text: str


@dataclass
class CompareTiming:
    a_ms: float | None = None
    b_ms: float | None = None
    a_iqr_ms: float | None = None
    b_iqr_ms: float | None = None
    speedup_b_over_a: float | None = None  # time of A / time of B
    verdict: Ratio | None = None
    untimed: str | None = None  # why a side has no time per call


@dataclass
class Pairing:
    """Kernels of A and of B that compute the same nodes (Note [Matching kernels across two compiles])."""
    change: str  # same | merged | split | changed | added | removed
    a: list[str]
    b: list[str]
    ops: list[str]
    how: str = ""  # for a change: how the sides differ (their kinds, their code, the nodes only one computes)


@dataclass
class Comparison:
    """engine/tools/compare.py's JSON document, typed for the pages: each side's label, record and errors, the
    kernels paired across the sides, the code diff and the timing."""
    labels: dict[str, str]
    records: dict[str, Exploration | None]
    errors: dict[str, list[ErrorRecord]]
    counts: list[int]
    pairings: list[Pairing]
    code_diff: str
    timing: CompareTiming

    @classmethod
    def from_json(cls, document: dict) -> "Comparison":
        document = {"kernels": {}, "timing": {}, "errors": {}, "code_diff": "", **document}
        kernels = {"count": [0, 0], **(document["kernels"] or {})}
        timing = {key: value for key, value in (document["timing"] or {}).items()
                  if key in {f.name for f in fields(CompareTiming)}}
        verdict = timing.pop("verdict", None)
        sides = {side: {"label": side.upper(), "record": None, **(document.get(side) or {})} for side in ("a", "b")}
        return cls(labels={side: value["label"] for side, value in sides.items()},
                   records={side: Exploration.from_json(value["record"]) if value["record"] else None
                            for side, value in sides.items()},
                   errors={side: [ErrorRecord.from_json(e) for e in (document["errors"] or {}).get(side) or []]
                           for side in ("a", "b")},
                   counts=kernels["count"],
                   pairings=[Pairing(change, _listed(item, "a"), _listed(item, "b"), list(item.get("ops") or []),
                                     str(item.get("how") or ""))
                             for change in VERBS for item in kernels.get(change) or []],
                   code_diff=document["code_diff"] or "",
                   timing=CompareTiming(**timing, verdict=Ratio(**verdict) if verdict else None))


def _listed(item: dict, side: str) -> list[str]:
    names = item[side] if side in item else None
    return names if isinstance(names, list) else [names] if names else []


def _kernel_index(comparison: Comparison, side: str) -> dict[str, KernelRecord]:
    record = comparison.records[side]
    return {k.name: k for k in record.kernels} if record is not None else {}


def _ops(kernel: KernelRecord) -> str:
    return " + ".join(str(o).replace("aten::", "").replace("aten.", "").split(".")[0] for o in kernel.ops)


def _time(times: list[float | None]) -> float | None:
    return sum(times) if times and all(t is not None for t in times) else None


def kernel_diff_rows(comparison: Comparison) -> list[dict]:
    """One row per pairing of kernels across the sides (matched by the nodes they compute), with what each
    computes and, from the profile, its time and spread."""
    index_a, index_b = (_kernel_index(comparison, side) for side in ("a", "b"))
    rows = []
    for pairing in comparison.pairings:
        in_a = [index_a[n] for n in pairing.a if n in index_a]
        in_b = [index_b[n] for n in pairing.b if n in index_b]
        rows.append({"change": VERBS[pairing.change], "what differs": pairing.how,
                     "A": _names(pairing.a), "A ops": " | ".join(_ops(k) for k in in_a),
                     "B": _names(pairing.b), "B ops": " | ".join(_ops(k) for k in in_b),
                     "A ms": _time([k.time_ms for k in in_a]), "A ±": _time([k.time_iqr_ms for k in in_a]),
                     "B ms": _time([k.time_ms for k in in_b]), "B ±": _time([k.time_iqr_ms for k in in_b]),
                     "ATen nodes": ", ".join(pairing.ops)})
    return rows


def timing_rows(comparison: Comparison) -> list[dict]:
    """Per kernel time on each side (the profile), matched by name within each side."""
    rows = []
    for side in ("a", "b"):
        record = comparison.records[side]
        for graph in record.graphs if record is not None else []:
            for kernel in graph.kernels:
                rows.append({"side": side.upper(), "graph": graph.index, "kernel": kernel.name,
                             "kind": kernel.kind, "time ms": kernel.time_ms,
                             "±": kernel.time_iqr_ms, "GB/s": kernel.gbps})
    return rows


def speedup_sentence(timing: CompareTiming) -> str:
    a, b, speedup = timing.a_ms, timing.b_ms, timing.speedup_b_over_a
    if speedup is None:
        return f"No time per call for one side: {timing.untimed}." if timing.untimed else \
            "No time for one of the sides."
    spread = lambda value: f" ±{value:.4f}" if value is not None else ""  # noqa: E731
    times = f"A {a:.4f}{spread(timing.a_iqr_ms)} ms, B {b:.4f}{spread(timing.b_iqr_ms)} ms per call"
    verdict = timing.verdict
    if verdict is not None and not verdict.judged:
        if verdict.low < 0.1 or verdict.high > 10:  # "anywhere from 0.00x to 4975x" says nothing
            return (f"{times}: too noisy to judge which is faster (the rounds spread so widely that B could be "
                    "over ten times faster or slower).")
        return (f"{times}: too noisy to judge which is faster (B/A speedup anywhere from {verdict.low:.2f}x "
                f"to {verdict.high:.2f}x).")
    if verdict is not None and verdict.low <= 1 <= verdict.high:  # the quartiles' range holds "the same"
        return (f"{times}: no difference beyond the spread (B/A speedup between {verdict.low:.2f}x and "
                f"{verdict.high:.2f}x).")
    faster = "faster" if speedup >= 1 else "slower"
    return (f"{times}: B is {speedup:.3g}x the speed of A ({faster}; "
            "speedup = time of A / time of B, higher is better for B).")
