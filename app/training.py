"""Training panes (explore with the sidebar's "Training step"): the partition under a forward graph, the
gradient checks under run. Thin: the record's data through visualizers/partition.py."""
from __future__ import annotations

import streamlit as st

from app import ui
from app.safe_text import md_text
from engine.record import GraphRecord, VerifyRecord
from visualizers import partition as partition_view


def partition_pane(graph: GraphRecord, key: str) -> None:
    partition = graph.partition
    if graph.phase == "backward":
        forward = "?" if partition.forward_graph is None else partition.forward_graph
        st.caption(f"Backward graph of graph {forward}: its kernels trace back to the "
                   "forward node (and your line) whose gradient they compute.")
        return
    if partition.saved is None:
        return
    st.markdown("**Partition: what the forward saves for the backward**")
    ours, plain = partition.saved_bytes or 0, partition.saved_all_bytes or 0
    left, right = st.columns(2)
    left.metric("Activation memory (our partition)", f"{ours / 1024:.1f} KiB")
    right.metric("Saving all the backward reads", f"{plain / 1024:.1f} KiB")
    if st.toggle("Draw the joint graph", key=f"{key}_joint"):
        ui.show_graph(partition_view.joint_dot(partition))
    st.dataframe(partition_view.saved_rows(partition), hide_index=True, width="stretch")
    recomputed = partition_view.recomputed_rows(partition)
    if recomputed:
        st.markdown("**Recomputed in the backward** instead of saved")
        st.dataframe(recomputed, hide_index=True, width="stretch")


def gradients_pane(verify: VerifyRecord) -> None:
    if verify.gradients is None:
        return
    st.markdown("**Training step: loss, gradients and buffers against eager**")
    for note in verify.notes or []:
        st.info(md_text(note))
    st.dataframe(partition_view.gradient_rows(verify), hide_index=True, width="stretch",
                 column_config={"max abs error": st.column_config.NumberColumn(format="%.3e"),
                                "max rel error": st.column_config.NumberColumn(format="%.3e")})
