"""The Graph breaks page: where Dynamo split the model, its guards and recompiles."""
from __future__ import annotations

import streamlit as st

from app import break_view, fix_pane, guards_pane, ui, whatif_pane
from app.safe_text import md_text
from visualizers import graphs, tables


def render() -> None:
    st.markdown("### Graph breaks, guards and recompiles")
    record = ui.explored()
    if record is None:
        return
    fix_pane.trial_banner(record)  # Note [Applying a rewrite]: before and after, keep or revert
    breaks = record.graph_breaks
    source = ui.record_source(record)
    count = len(record.graphs)
    recompiled = sum(run.new_graphs for run in record.runs)
    extra = f" (plus {recompiled} compiled again when the inputs changed)" if recompiled else ""
    if breaks:
        st.warning(f"Dynamo split this model at {len(breaks)} graph break(s) into {count - recompiled} graph(s)"
                   f"{extra}. Each graph is compiled on its own, so nothing fuses across a break.")
    else:
        st.success(f"No graph breaks: Dynamo captured the model as {max(count - recompiled, 0)} graph{extra}.")
    left, right = st.columns([1, 1], gap="medium")
    with left:
        st.markdown("**Your code**, break lines highlighted")
        ui.show_code(source, "python", hl_lines=[b.lineno for b in breaks if b.lineno], max_height=620)
    with right:
        for number, graph_break in enumerate(breaks, start=1):
            where = f"line {graph_break.lineno}" if graph_break.lineno else "unknown line"
            with st.container(border=True):
                st.markdown(f"**Break {number} — {where}**")
                if graph_break.line:
                    st.code(graph_break.line, language="python")
                reason, _, dynamo = graph_break.reason.partition(" (Dynamo: ")
                st.markdown(md_text(reason))
                if dynamo:
                    st.caption("Dynamo said: " + md_text(dynamo[:-1] if dynamo.endswith(")") else dynamo))
                break_view.show_fix(graph_break)
                fix_pane.apply_button(record, graph_break, number)
        recompiles = tables.recompile_rows(record)
        runs = tables.run_rows(record)
        st.markdown("**Recompiles when inputs change**")
        for row in recompiles:
            with st.container(border=True):
                st.markdown(f"**{md_text(row['inputs'])}** recompiled")
                st.caption(md_text(row["reason"]))
        if not recompiles and runs:
            st.caption("The other inputs in `dynamic_inputs` ran without a recompile"
                       + (" (dynamic shapes)." if record.options.dynamic else "."))
        elif not recompiles:
            st.caption("No recompiles. A model file's `dynamic_inputs` (other input shapes) shows them; "
                       "see the dynamic_seq and bucketing samples.")
        if runs:
            st.markdown("**Every input set** (`dynamic_inputs`)")
            st.dataframe(runs, hide_index=True, width="stretch",
                         column_config={"max abs error": st.column_config.NumberColumn(format="%.2e")})
    whatif_pane.render(record)  # Note [Recompile what-if]
    guards_pane.render(record.guards)  # Note [Guards and checks]
    if breaks:
        st.markdown("**The graphs and the breaks between them**")
        ui.show_graph(graphs.record_dot(record, "fx"))


render()
