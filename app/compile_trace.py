"""Compile cost and the trace (Note [Compile trace] in engine/runtime/spans.py): the bench stage's compile timeline and
cache facts, the profile page's run timeline, and the trace-event JSON to download (ui.perfetto.dev)."""
from __future__ import annotations

import json

import streamlit as st

from app.safe_text import file_name
from engine.record import Exploration
from engine.tools.trace_file import trace_events
from visualizers.compile_cost import build_words, compile_cost, cost_rows
from visualizers import timeline


def _download(document: dict, name: str, key: str) -> None:
    st.download_button("Download the trace (Chrome / Perfetto JSON)", json.dumps(document), mime="application/json",
                       file_name=file_name(name) + "-trace.json", key=key, icon=":material/download:",
                       help="Open it in ui.perfetto.dev or chrome://tracing: the compile's stages and passes, and "
                            "(after profiling) a run's kernels")


def compile_pane(record: Exploration, key: str) -> None:
    data = record.to_json()
    figure = timeline.compile_timeline_figure(record)
    if figure is None:
        return
    cost = compile_cost(record)
    st.plotly_chart(figure, width="stretch", key=f"{key}_compile_timeline", config={"displayModeBar": False})
    words = [f"graph {b.graph}: " + (build_words(b, digits=2) if b.cache_hit else f"cold build, {b.seconds:.2f} s")
             for b in cost.builds]
    st.caption(f"Compile {cost.total_s:.2f} s in all; kernels built: " + ("; ".join(words) or "none") + ".")
    with st.expander("Compile cost per stage, pass and kernel, and the cache"):
        st.dataframe([{"what": row["what"], "kind": row["kind"], "ms": round(row["seconds"] * 1e3, 2)}
                      for row in cost_rows(cost)], hide_index=True, width="stretch")
    _download(trace_events(data), record.model or "model", f"{key}_trace_download")


def run_pane(record: Exploration) -> None:
    data = record.to_json()
    figure = timeline.run_timeline_figure(record)
    if figure is None:
        return
    st.plotly_chart(figure, width="stretch", key="profile_run_timeline")
    _download(trace_events(data), record.model or "model", "profile_trace_download")
