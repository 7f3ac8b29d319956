"""Profile: every kernel timed inside its wrapper, a roofline against this machine's measured roofs, the memory
plan as buffer lifetimes, and the exploration to take away (offline HTML report, JSON record)."""
from __future__ import annotations

import streamlit as st

from app import compile_trace, heat_pane, state, ui
from app.safe_text import file_name, md_text
from visualizers import html_report, memory, roofline, teaching

st.markdown("### Per-kernel profile")
st.caption("Each kernel is timed inside the real wrapper (repeated calls: median and interquartile range; CUDA "
           "events on a GPU), with its GB/s, estimated FLOP/s and share of the call, against this machine's "
           "measured copy bandwidth and matmul throughput.")
outcome = state.cached("profile")
if st.button("Profile the kernels" if outcome is None else "Profile again", type="primary", key="profile_run"):
    outcome = state.run_profile()
if outcome is None:
    st.info("Press **Profile the kernels** (a worker explores the model and times each kernel: a few seconds).")
elif outcome.problem is not None and not outcome.record:
    ui.show_problem(outcome.problem, state.user_source(), state.model_path_name())
else:
    record = outcome.record
    machine = record.machine  # engine/runtime/profile.py's measured rates and roofs
    if machine.load_warning:
        st.warning(md_text(machine.load_warning))
    for line in teaching.bench_text(record):
        st.markdown(line)
    columns = st.columns(3)
    columns[0].metric("copy bandwidth", f"{machine.copy_gbps or 0:.1f} GB/s", help=machine.how)
    columns[1].metric("matmul", f"{machine.matmul_gflops or 0:.1f} GFLOP/s")
    calls = [g.profile.call_ms for g in record.graphs]
    columns[2].metric("call", f"{sum(c for c in calls if c):.4f} ms", help="the graphs' calls, medians")
    if any(g.profile.interpreted for g in record.graphs):
        st.warning("Triton on the CPU runs under its interpreter: these times say nothing about a GPU.")
    figure = roofline.kernel_time_figure(record)
    if figure is not None:
        st.plotly_chart(figure, key="profile_times", width="stretch")
    compile_trace.run_pane(record)  # one call's kernels on a timeline, and the trace to download
    heat_pane.render(record)  # Note [Time on lines]: time on the graph's nodes and the user's lines
    figure = roofline.roofline_figure(record)
    if figure is not None:
        st.plotly_chart(figure, key="profile_roofline", width="stretch")
    for graph in record.graphs:
        figure = memory.memory_timeline_figure(graph)
        if figure is not None:
            st.markdown(f"**Memory plan, graph {graph.index}**")
            st.plotly_chart(figure, key=f"profile_memory_{graph.index}", width="stretch")
    left, right = st.columns(2)
    name = record.model or "model"
    # the report renders the JSON document, as `python -m engine report record.json` does with a saved one
    left.download_button("Download the report (offline HTML)", html_report.report_html(record),
                         file_name=file_name(name) + "-glassbox.html", mime="text/html", key="download_report")
    right.download_button("Download the record (JSON)", record.dumps(indent=1), file_name=file_name(name) + ".json",
                          mime="application/json", key="download_json")
