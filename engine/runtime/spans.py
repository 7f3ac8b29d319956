"""Compile spans: when each stage and pass ran, for the compile's trace (Exploration.trace).

Note [Compile trace]
`timings` says how long each stage took in all (its own time, nested stages excluded); a trace says when:
every stage the runner runs (Compilation.run) and the passes inside the graph stages (each named rewrite,
fusion, split reductions, memory plan, kernels, wrapper, compile and load) are spans with a start and a
duration, in seconds since explore() began, nested as they ran (capture holds decompose holds rewrite..build
of each graph). Work the runtime does at a kernel's first launch is a span too, named per kernel in its args:
Triton's JIT build of the kernel ("build kernel (Triton JIT)", on a GPU) and autotuning ("autotune", in
max-autotune); they nest in the stage whose call launched the kernel first (capture, for the model's first
call). The spans live in the runtime (the lowest layer that makes them) so every layer above can open one. The collector is a context variable, so compile() outside explore() records nothing and pays a
lookup per span. The build's span says whether the compile cache had the kernels and, on a hit, how long the
cold build took when it was made (remembered beside the cache by its key: Note [What the cache saved]).
engine/tools/trace_file.py turns the spans, and a profiled run's kernels, into Chrome trace-event JSON.

Note [What the cache saved]
A cache hit costs a load; the build it skipped is what it saved. The cold build's seconds are written, on a
miss, under cache_dir()/build_seconds/<key of the source> (best effort: a read-only cache in a sandboxed
worker keeps none), and a later hit reads them back: saved = cold - this load.
"""
from __future__ import annotations

import hashlib
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from engine.record import TraceSpan

_SINK: ContextVar[tuple[list, float] | None] = ContextVar("glassbox_spans", default=None)


@contextmanager
def collecting() -> Iterator[list]:
    """Collect every span started inside, as dicts {name, cat, start_s, dur_s, args} (start_s from now)."""
    spans: list = []
    token = _SINK.set((spans, time.perf_counter()))
    try:
        yield spans
    finally:
        _SINK.reset(token)


@contextmanager
def span(name: str, category: str = "pass", **args) -> Iterator[dict]:
    """One span: yields its entry (args may be added to entry["args"]; dur_s is set when it ends)."""
    sink = _SINK.get()
    if sink is None:
        yield {"args": {}}
        return
    spans, origin = sink
    entry = {"name": name, "cat": category, "start_s": time.perf_counter() - origin, "dur_s": 0.0, "args": args}
    try:
        yield entry
    finally:
        entry["dur_s"] = time.perf_counter() - origin - entry["start_s"]
        spans.append(entry)


def finished(spans: list, number) -> list[TraceSpan]:
    """The spans in start order as record data: each one's graph (a stage's GraphRecord, or for a pass the graph
    of the stage around it) replaced by number(graph), its index in the record or None."""
    ordered = sorted(spans, key=lambda e: (e["start_s"], -e["dur_s"]))
    open_spans: list[tuple[float, object]] = []  # (end, graph) of the spans around the current one
    result = []
    for entry in ordered:
        while open_spans and open_spans[-1][0] < entry["start_s"] + entry["dur_s"] - 1e-9:
            open_spans.pop()
        graph = entry.get("graph", open_spans[-1][1] if open_spans else None)
        open_spans.append((entry["start_s"] + entry["dur_s"], graph))
        result.append(TraceSpan(name=entry["name"], cat=entry["cat"], start_s=entry["start_s"], dur_s=entry["dur_s"],
                                args=entry["args"], graph=number(graph)))
    return result


def _seconds_path(language: str, source: str):
    from engine.runtime.build import cache_dir

    key = hashlib.sha256(f"{language}\0{source}".encode()).hexdigest()[:32]
    return cache_dir() / "build_seconds" / key


def build_cost(language: str, source: str, cache_hit: bool, seconds: float) -> dict:
    """The build span's cache facts (Note [What the cache saved]): on a miss the cold seconds are remembered; on
    a hit, the remembered cold build and what the hit saved."""
    try:
        path = _seconds_path(language, source)
        if not cache_hit:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{seconds:.6f}")
            return {"cache_hit": False, "cold_s": seconds}
        cold = float(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return {"cache_hit": cache_hit}
    if cold is None:
        return {"cache_hit": True}
    return {"cache_hit": True, "cold_s": cold, "saved_s": max(cold - seconds, 0.0)}
