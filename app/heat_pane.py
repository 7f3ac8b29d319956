"""Metrics where the code is (Note [Time on lines] in visualizers/heat.py): the profiled kernels' time painted on
each graph's ATen nodes and summed onto the user's source lines. Shown on the Profile page after profiling."""
from __future__ import annotations

import streamlit as st

from app import ui
from engine.record import Exploration
from visualizers import heat, overlay


def render(record: Exploration) -> None:
    lines = heat.line_heat(record)
    if not any(heat.node_heat(g) for g in record.graphs):
        return
    st.markdown("**Where the time goes** — each kernel's measured time on the nodes it computes, and on your lines")
    items = "".join(f"<span style='background:{fill};border:1px solid {border};border-radius:4px;padding:1px 6px;"
                    f"margin-right:8px;font-size:0.8rem'>{label}</span>" for fill, border, label in heat.legend())
    st.html(f"<div>{items}</div>")
    caption = heat.roof_caption(record)
    if caption:
        st.caption(caption)
    # one above the other, each the page's width: a real model's graph and its library's lines need it
    for graph in record.graphs:
        paint, notes = heat.graph_paint(graph)
        if paint:
            st.caption(f"graph {graph.index}: each kernel a box in the heat of its time, with its GB/s, "
                       "GFLOP/s and % of roof; its ATen nodes inside")
            ui.show_graph(overlay.overlay_dot(graph, "aten", paint, notes, clusters=heat.graph_clusters(graph)),
                          len(graph.aten))
    source = record.source.text
    if source and lines:
        st.caption("your source: each line's share of the kernels' time, bytes and FLOPs (a kernel's split over "
                   "its lines), and its kernels' % of roof")
        st.html(f"<div style='max-height:640px;overflow:auto'>{heat.source_heat_html(source, lines)}</div>")
    library = heat.library_heat_html(record)
    if library:
        st.caption("the library code your model is built from: its hottest lines per file, the same figures")
        st.html(f"<div style='max-height:640px;overflow:auto'>{library}</div>")
