"""The Explorer page: the stage stepper (capture -> ATen -> loop IR -> fusion -> code -> run -> bench),
any two stages side by side.

Note [Full width for big graphs]
Half a page is about 600 px: enough for a sample's graph, not for a 24-layer model's, whose folded view is
tens of module boxes with long names, and not for the fusion table's "why" column. A model whose ATen graph
is big enough for the zoomable viewer (graph_view.BIG_NODES) opens with one stage across the page and the
side-by-side stage below it; the toggle puts them back side by side."""
from __future__ import annotations

import streamlit as st

from app import stages, state, ui
from app.safe_text import description_markdown, html_text
from app.components import graph_view
from engine.record import Exploration
from visualizers import charts, graphs

CHART_CONFIG = {"displayModeBar": False}


def _step(offset: int) -> None:
    current = st.session_state.get("stage_left") or stages.STAGES[0]
    index = (stages.STAGES.index(current) + offset) % len(stages.STAGES)
    st.session_state.stage_left = stages.STAGES[index]


def _header(record: Exploration) -> None:
    kernels = record.kernels
    verify = record.verify
    timings = record.timings
    compile_s = sum(v for k, v in timings.items() if k != "run" and isinstance(v, (int, float)))
    left, right = st.columns([5, 4], vertical_alignment="top")
    with left:
        backend = state.BACKENDS.get(record.backend, record.backend)
        options = record.options
        dynamic = " · dynamic shapes" if options.dynamic else ""
        mode = f" · mode {options.mode}" if options.mode != "default" else ""
        train = " · training step" if options.train else ""
        name = record.model
        title = "your code (pasted)" if name == state.PASTED else name
        st.markdown(f"### {html_text(title)} <span style='font-size:0.9rem;color:#6b7280'>· "
                    f"{html_text(backend)} · {html_text(record.device)}{html_text(mode)}{dynamic}{train}"
                    "</span>",
                    unsafe_allow_html=True)  # Note [Record text]: every record field escaped
        columns = st.columns(4)
        columns[0].metric("graphs", len(record.graphs))
        columns[1].metric("graph breaks", len(record.graph_breaks))
        fallbacks = sum(1 for k in kernels if k.kind == "fallback")
        columns[2].metric("kernels", len(kernels), help=f"{fallbacks} fallback(s)" if fallbacks else None)
        answer = {"random": "random", "layout differs": "yes, layout differs",
                  "nothing compared": "nothing compared"}.get(verify.verdict)
        columns[3].metric("matches eager", answer or ("yes" if verify.ok else "NO"),
                          help=f"max abs error {verify.max_abs_err}; judged by: {verify.reference or '?'}")
        if record.description:
            with st.expander("About this model", expanded=True):
                st.markdown(description_markdown(record.description))
    with right:
        st.plotly_chart(charts.stage_times_figure(timings, height=130, legend=False), width="stretch",
                        key="header_stage_chart", config=CHART_CONFIG)
        st.caption(f"compiled in {compile_s:.2f} s; the bench stage times it against eager and Inductor")


def render() -> None:
    record = ui.explored()
    if record is None:
        return
    _header(record)
    st.session_state.setdefault("stage_left", "capture")
    st.session_state.setdefault("stage_right", "code")
    several = len(record.graphs) > 1
    picker, stepper, compare = st.columns([1.4, 6, 1.8] if several else [0.001, 7.4, 1.8],
                                          vertical_alignment="bottom")
    with picker:
        graph_index = ui.graph_picker(record, key="explorer_graph") or 0
    with stepper.container(horizontal=True, vertical_alignment="bottom", gap="small"):
        st.button("◀", key="stage_back", on_click=_step, args=(-1,), help="previous stage")
        st.segmented_control("Stage", stages.STAGES, key="stage_left", required=True,
                             help="Step through the compiler: each stage's artifact, from your code to timed kernels")
        st.button("▶", key="stage_next", on_click=_step, args=(1,), help="next stage")
    compare.selectbox("Side by side with", ["none"] + stages.STAGES, key="stage_right")
    with st.columns([2, 5])[0]:
        ui.node_finder(record, graph_index)
    left_stage = st.session_state.stage_left or "capture"
    right_stage = st.session_state.stage_right
    # Note [Full width for big graphs]: a big model's graph gets the page's whole width, the second stage below
    big = any(graphs.big(g, "aten", graph_view.BIG_NODES) for g in record.graphs)
    full = st.toggle("Full width", value=big, key=f"full_width_{big}",
                     help="One stage across the page (the side-by-side stage goes below it): on by default for "
                          "graphs too big to read in half a page.")
    if right_stage and right_stage != "none" and full:
        stages.render(left_stage, record, graph_index, "L")
        st.divider()
        stages.render(right_stage, record, graph_index, "R")
    elif right_stage and right_stage != "none":
        left, right = st.columns(2, gap="medium")
        with left:
            stages.render(left_stage, record, graph_index, "L")
        with right:
            stages.render(right_stage, record, graph_index, "R")
    else:
        stages.render(left_stage, record, graph_index, "L")


render()
