"""The Training page: one training step of the model (forward, loss, backward) as the compiler sees it.

Forward and backward graphs side by side; the partition drawn on the joint graph (what the forward saves for
the backward, what the backward recomputes, each with the partitioner's reason); the activation memory that
costs; and a training step timed against eager and Inductor. Thin: the record's data through
visualizers/partition.py and visualizers/graphs.py.
"""
from __future__ import annotations

import streamlit as st

from app import state, training, ui
from app.safe_text import md_text
from engine.record import Exploration, GraphRecord, PartitionRecord
from visualizers import charts, graphs, teaching
from visualizers import partition as partition_view

CHART_CONFIG = {"displayModeBar": False}


def _turn_on() -> None:
    st.session_state.train = True  # on_click runs before the sidebar's toggle is drawn


def pairs(record: Exploration) -> list[tuple[GraphRecord, GraphRecord | None]]:
    """Each forward graph with its backward graph (a backward's partition names its forward)."""
    backward_of = {g.partition.forward_graph: g for g in record.graphs if g.phase == "backward"}
    return [(g, backward_of.get(g.index)) for g in record.graphs if g.phase == "forward"]


def _header(record: Exploration, forward: GraphRecord) -> None:
    verify = record.verify
    partition = forward.partition
    checked = ([verify.loss] if verify.loss else []) + (verify.gradients or [])
    passed = sum(1 for entry in checked if entry.ok)
    columns = st.columns(4)
    columns[0].metric("loss and gradients match eager", f"{passed} / {len(checked)}",
                      help="every parameter's gradient (by its path) and every floating input's, plus the loss")
    columns[1].metric("saved for the backward", ui.bytes_text(partition.saved_bytes),
                      help="activation memory of our partition (inputs and parameters cost nothing)")
    saved_all = partition.saved_all_bytes
    columns[2].metric("saving all the backward reads", ui.bytes_text(saved_all),
                      help="the same graph with no recomputation")
    columns[3].metric("recomputed in the backward", len(partition.recomputed or []),
                      help="cheap pointwise and view ops redone in the backward instead of saved")


VIEWER_NODES = 60  # forward and backward graphs of more nodes open in the zoomable viewer


def _graph_pane(graph: GraphRecord | None, title: str, key: str) -> None:
    st.markdown(f"**{title}**")
    if graph is None:
        st.info("No backward graph: nothing in this graph needs a gradient.")
        return
    kernels = graph.kernels
    st.caption(f"graph {graph.index}: {len(graph.aten)} ATen nodes, {len(kernels)} kernels "
               f"({sum(1 for k in kernels if k.kind == 'fallback')} fallback)")
    options = ui.collapse_controls(graph, "aten", key)
    options.kernels_as_clusters = st.toggle("Kernels as boxes", value=False, key=f"{key}_clusters",
                                            help="draw the fused kernels around their ops")
    ui.legend(set(graphs.aten_kinds(graph).values()))
    # a backward graph is wide (its saved values all enter at the top): past a few dozen nodes, scaled to fit it
    # is unreadable, so the zoomable viewer shows it at its natural size
    ui.show_graph(graphs.graph_dot(graph, "aten", options), len(graph.aten), big=VIEWER_NODES)


def _partition(partition: PartitionRecord, key: str) -> None:
    st.markdown("#### The partition on the joint graph")
    st.caption("AOTAutograd traces forward and backward as one joint graph; the partitioner (a min-cut, like "
               "Inductor's) cuts it in two. Hover a node for the reason it is where it is.")
    if partition.note:
        st.info(md_text(partition.note))
    st.html(partition_view.legend_html())
    joint = partition.joint or []
    if len(joint) > 400:
        st.caption(f"the first 400 of {len(joint)} joint nodes")
    with st.container(height=min(720, 160 + 60 * len(joint)), border=True):  # a big joint graph scrolls
        ui.show_graph(partition_view.joint_dot(partition))
    st.markdown(f"**Saved** ({len(partition.saved or [])} values)")
    st.dataframe(partition_view.saved_rows(partition), hide_index=True, width="stretch",
                 column_config={"reason": st.column_config.TextColumn(width="large")}, key=f"{key}_saved")
    recomputed = partition_view.recomputed_rows(partition)
    st.markdown(f"**Recomputed in the backward** ({len(recomputed)} ops)")
    if recomputed:
        st.dataframe(recomputed, hide_index=True, width="stretch",
                     column_config={"reason": st.column_config.TextColumn(width="large")}, key=f"{key}_recomputed")
    else:
        st.caption("nothing: every value the backward reads is saved")


def _bench_case(outcome) -> dict | None:
    cases = ((outcome.document or {}).get("cases") or []) if outcome is not None else []
    return cases[0] if cases else None


def _memory_and_bench(partition: PartitionRecord, key: str) -> None:
    st.markdown("#### Activation memory and a timed training step")
    bench = state.cached_bench()  # the bench of this request: a training step, as the toggle is on
    if st.button("Benchmark a training step: eager vs Glassbox vs Inductor", key=f"{key}_bench",
                 help="Runs in a worker: forward, loss, backward, each compiler taking turns; every gradient "
                      "checked first. Inductor's cold compile of both graphs takes a minute on a small CPU."):
        bench = state.run_bench(with_inductor=True)
    case = _bench_case(bench)
    if bench is not None and bench.problem is not None:
        ui.show_problem(bench.problem, state.user_source(), state.model_path_name())
    left, right = st.columns(2, gap="medium")
    left.plotly_chart(partition_view.memory_figure(partition, case), width="stretch", key=f"{key}_memory",
                      config=CHART_CONFIG)
    right.plotly_chart(partition_view.saved_figure(partition), width="stretch", key=f"{key}_saved_chart",
                       config=CHART_CONFIG)
    if case is None:
        st.caption("Timing is on demand (Inductor's cold compile is slow): press the button to time a step and "
                   "measure what each compiler's forward really keeps for its backward.")
        return
    if case.get("error"):
        st.error(case["error"])
        return
    left, right = st.columns(2, gap="medium")
    left.plotly_chart(charts.bench_figure(case), width="stretch", key=f"{key}_bench_chart", config=CHART_CONFIG)
    right.plotly_chart(charts.speedup_figure(case), width="stretch", key=f"{key}_speedup_chart",
                       config=CHART_CONFIG)
    for who, check in (case.get("verify") or {}).items():
        if not check.get("ok"):
            st.warning(f"{who}'s gradients differ from eager's (max rel error {check.get('max_rel_err'):.2e})")
    if case.get("inductor_error"):
        st.warning(f"Inductor failed: {case['inductor_error']}")
    st.caption("a training step per call (gradients cleared, forward, loss, backward), the compilers taking "
               "turns")
    for line in teaching.bench_case_lines(case):
        st.caption(line)


def render() -> None:
    if not st.session_state.train:
        st.markdown("### Training step")
        st.info("This page shows a training step: the forward and backward graphs AOTAutograd makes, what the "
                "forward saves for the backward, and a timed step. Turn on **Training step** in the sidebar, or:")
        st.button("Explore a training step", key="training_turn_on", on_click=_turn_on, type="primary")
        return
    record = ui.explored()
    if record is None:
        return
    found = pairs(record)
    if not found:
        st.warning("The exploration has no forward graph: Dynamo captured nothing to train (see Graph breaks).")
        return
    st.markdown(f"### Training step of {md_text(record.model)}")
    if len(found) > 1:
        choice = st.selectbox("Forward graph", range(len(found)), key="training_pair",
                              format_func=lambda i: f"graph {found[i][0].index} and its backward")
    else:
        choice = 0
    forward, backward = found[choice]
    _header(record, forward)
    _graph_pane(forward, "Forward graph", f"train_fwd_{choice}")  # one above the other: each the page's width
    _graph_pane(backward, "Backward graph", f"train_bwd_{choice}")
    partition = forward.partition
    _partition(partition, f"train_{choice}")
    _memory_and_bench(partition, f"train_{choice}")
    with st.expander("Loss and every gradient against eager", expanded=True):
        training.gradients_pane(record.verify)


render()
