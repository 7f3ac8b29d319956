"""The run stage's numerics bisect (Note [Numerics bisect] in engine/divergence.py): where on the graph our
values first leave eager's, coloured per ATen node, with the first culprit kernel and the user's line."""
from __future__ import annotations

from pathlib import PurePath

import streamlit as st

from app import ui
from app.safe_text import md_code, md_text
from engine.record import Exploration, GraphRecord
from visualizers import overlay


def _legend() -> None:
    items = "".join(f"<span style='background:{fill};border:1px solid {border};border-radius:4px;padding:1px 6px;"
                    f"margin-right:8px;font-size:0.8rem'>{label}</span>" for fill, border, label in overlay.bisect_legend())
    st.html(f"<div>{items}</div>")


def render(record: Exploration, graph: GraphRecord | None, key: str) -> None:
    if graph is None:
        return
    bisect = graph.bisect
    if bisect.status is None:  # it did not run
        if record.verify.ok and not record.verify.max_abs_err:
            st.caption("Numerics bisect: the outputs are exactly eager's, so there is nothing to bisect.")
        return
    st.markdown(f"**Numerics bisect, graph {graph.index}** — each kernel's outputs against eager's ATen values")
    if bisect.status == "failed":
        st.warning(f"The bisect could not run: {md_text(bisect.reason or '')}")
        return
    culprit = bisect.culprit
    if bisect.status == "clean":
        st.success(f"A clean graph: all {bisect.compared or 0} compared kernel outputs are exact or within "
                   "tolerance of eager's.")
    elif culprit:
        line = culprit.user_line
        where = (f" — {md_text(PurePath(line.filename).name)}, line {line.lineno}: {md_code(line.line)}"
                 if line else "")
        st.error(f"Diverges first at **{md_text(culprit.kernel)}** ({md_text(' + '.join(culprit.ops))}): "
                 f"max abs error {culprit.max_abs_err:.3g} while its inputs are off by at most "
                 f"{culprit.input_max_abs_err:.3g}{where}. Kernels after it that read its values diverge "
                 "downstream.")
    paint, notes, bold = overlay.bisect_paint(graph)
    _legend()
    ui.show_graph(overlay.overlay_dot(graph, "aten", paint, notes, bold), len(graph.aten))
    rows = [{"kernel": k.kernel, "kind": k.kind, "status": k.status,
             "inputs' max abs error": k.input_max_abs_err, "max abs error": k.max_abs_err}
            for k in bisect.kernels or []]
    if rows:
        st.dataframe(rows, hide_index=True, width="stretch", key=f"{key}_bisect_table",
                     column_config={"inputs' max abs error": st.column_config.NumberColumn(format="%.3e"),
                                    "max abs error": st.column_config.NumberColumn(format="%.3e")})
