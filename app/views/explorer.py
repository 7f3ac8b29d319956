"""The Explorer page: the stage stepper (capture -> ATen -> loop IR -> fusion -> code -> run -> bench),
any two stages side by side."""
from __future__ import annotations

import streamlit as st

from app import stages, state, ui
from app.safe_text import description_markdown, html_text
from visualizers import charts

CHART_CONFIG = {"displayModeBar": False}


def _step(offset: int) -> None:
    current = st.session_state.get("stage_left") or stages.STAGES[0]
    index = (stages.STAGES.index(current) + offset) % len(stages.STAGES)
    st.session_state.stage_left = stages.STAGES[index]


def _header(record: dict) -> None:
    kernels = [k for g in record.get("graphs") or [] for k in g.get("kernels") or []]
    verify = record.get("verify") or {}
    timings = record.get("timings") or {}
    compile_s = sum(v for k, v in timings.items() if k != "run" and isinstance(v, (int, float)))
    left, right = st.columns([5, 4], vertical_alignment="top")
    with left:
        backend = state.BACKENDS.get(record.get("backend"), record.get("backend"))
        dynamic = " · dynamic shapes" if (record.get("options") or {}).get("dynamic") else ""
        st.markdown(f"### {html_text(record.get('model', 'model'))} <span style='font-size:0.9rem;color:#6b7280'>· "
                    f"{html_text(backend)} · {html_text(record.get('device', ''))}{dynamic}</span>",
                    unsafe_allow_html=True)  # Note [Record text]: every record field escaped
        columns = st.columns(4)
        columns[0].metric("graphs", len(record.get("graphs") or []))
        columns[1].metric("graph breaks", len(record.get("graph_breaks") or []))
        fallbacks = sum(1 for k in kernels if k.get("kind") == "fallback")
        columns[2].metric("kernels", len(kernels), help=f"{fallbacks} fallback(s)" if fallbacks else None)
        columns[3].metric("matches eager", "yes" if verify.get("ok") else "NO",
                          help=f"max abs error {verify.get('max_abs_err')}")
        if record.get("description"):
            with st.expander("About this model", expanded=True):
                st.markdown(description_markdown(record["description"]))
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
    several = len(record.get("graphs") or []) > 1
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
    if right_stage and right_stage != "none":
        left, right = st.columns(2, gap="medium")
        with left:
            stages.render(left_stage, record, graph_index, "L")
        with right:
            stages.render(right_stage, record, graph_index, "R")
    else:
        stages.render(left_stage, record, graph_index, "L")


render()
