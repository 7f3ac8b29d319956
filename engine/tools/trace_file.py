"""The compile and a run as a Chrome / Perfetto trace (trace-event JSON), and the compile's cost in numbers.

Note [Compile trace] in engine/runtime/spans.py says what the spans are. `trace_events(record)` is a pure function of
the record's JSON (no torch): process 1 is the compile (every stage and pass as a complete "X" event, nested
as they ran, on one thread), process 2 is the run, present when the record was profiled: each graph's one
instrumented call with its kernels on a timeline (graphs one after another, as the model runs them). Open the
file in ui.perfetto.dev or chrome://tracing. visualizers/compile_cost.py sums the same spans per stage, pass and
kernel, with the cache's part (hits, and what they saved)."""
from __future__ import annotations

COMPILE_PID, RUN_PID = 1, 2


def _label(entry: dict) -> str:
    graph = entry.get("graph")
    return entry["name"] + (f" (graph {graph})" if graph is not None and entry.get("cat") == "stage" else "")


def trace_events(record: dict) -> dict:
    """{"traceEvents": [...]} for chrome://tracing and Perfetto; times in microseconds."""
    events = [
        {"ph": "M", "pid": COMPILE_PID, "name": "process_name", "args": {"name": f"compile: {record.get('model')}"}},
        {"ph": "M", "pid": COMPILE_PID, "tid": 1, "name": "thread_name", "args": {"name": "Glassbox compiler"}},
    ]
    for entry in record.get("trace") or []:
        args = {k: v for k, v in (entry.get("args") or {}).items()}
        if entry.get("graph") is not None:
            args["graph"] = entry["graph"]
        events.append({"ph": "X", "pid": COMPILE_PID, "tid": 1, "cat": entry.get("cat", "pass"),
                       "name": _label(entry), "ts": entry["start_s"] * 1e6, "dur": max(entry["dur_s"], 0.0) * 1e6,
                       "args": args})
    offset_us = 0.0
    profiled = [g for g in record.get("graphs") or [] if (g.get("profile") or {}).get("timeline")]
    if profiled:
        events += [{"ph": "M", "pid": RUN_PID, "name": "process_name", "args": {"name": "run (one call per graph)"}},
                   {"ph": "M", "pid": RUN_PID, "tid": 1, "name": "thread_name", "args": {"name": "graphs"}},
                   {"ph": "M", "pid": RUN_PID, "tid": 2, "name": "thread_name", "args": {"name": "kernels"}}]
    for graph in profiled:
        kernels = {k["name"]: k for k in graph.get("kernels") or []}
        timeline = graph["profile"]["timeline"]
        call = next((t for t in timeline if t["kernel"] == "call"), None)
        for item in timeline:
            if item["kernel"] == "call":
                events.append({"ph": "X", "pid": RUN_PID, "tid": 1, "cat": "graph", "name": f"graph {graph['index']}",
                               "ts": offset_us, "dur": item["dur_ms"] * 1e3,
                               "args": {"phase": graph.get("phase"), "kernels": len(timeline) - 1}})
                continue
            kernel = kernels.get(item["kernel"], {})
            events.append({"ph": "X", "pid": RUN_PID, "tid": 2, "cat": kernel.get("kind", "kernel"),
                           "name": item["kernel"], "ts": offset_us + item["start_ms"] * 1e3,
                           "dur": max(item["dur_ms"], 0.0) * 1e3,
                           "args": {"graph": graph["index"], "kind": kernel.get("kind"), "ops": kernel.get("ops"),
                                    "median_ms": kernel.get("time_ms"), "gbps": kernel.get("gbps")}})
        offset_us += (call["dur_ms"] if call else 0.0) * 1e3 + 1.0
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"model": record.get("model"), "backend": record.get("backend"),
                          "device": record.get("device"), "written_by": "Glassbox (engine/tools/trace_file.py)"}}
