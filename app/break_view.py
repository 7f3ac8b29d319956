"""One graph break's fix, as the Graph breaks page shows it: Dynamo's type, explanation and hints, and the
suggested rewrite of the user's line (engine/capture.py Note [Dynamo's explanations], engine/break_fixes.py)."""
from __future__ import annotations

import streamlit as st

from app import ui
from app.safe_text import md_text
from engine.record import GraphBreakRecord


def show_fix(graph_break: GraphBreakRecord) -> None:
    if graph_break.gb_type:
        st.caption(f"Dynamo's graph-break type: {md_text(graph_break.gb_type)}"
                   + (f" ({md_text(graph_break.gb_id)})" if graph_break.gb_id else ""))
    if graph_break.explanation:
        st.markdown(md_text(graph_break.explanation))
    for hint in graph_break.hints:
        st.info(f"Hint: {md_text(hint)}", icon=":material/lightbulb:")
    fix = graph_break.suggestion  # engine/break_fixes.py's rewrite
    if fix is not None:
        st.markdown(f"**Suggested rewrite** ({md_text(fix.pattern)}): {md_text(fix.why)}")
        ui.show_code(f"{fix.before}\n# becomes\n{fix.after}", "python",
                     max_height=220)
