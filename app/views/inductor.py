"""The Inductor page: real torch.compile on the same model beside Glassbox."""
from __future__ import annotations

import streamlit as st

from app import state, ui
from app.safe_text import md_text
from engine.record import InductorRecord


def inductor_report(document: dict | None) -> InductorRecord | None:
    """app/inductor_worker.py's document, typed: engine/reference.py's report (the record's `inductor`), when
    Inductor compiled the model."""
    if not isinstance(document, dict) or document.get("ok") is not True:
        return None
    try:
        return InductorRecord.from_json({key: value for key, value in document.items() if key not in ("ok", "device")})
    except (TypeError, ValueError) as error:  # the job ran model code: its document may be anything
        st.error(f"Inductor's report is malformed: {md_text(str(error))}")
        return None


def render() -> None:
    st.markdown("### Inductor beside Glassbox")
    st.caption("Real torch.compile (Inductor) on the same model and inputs, in a worker: its output code, kernels "
               "and cold compile time, next to ours.")
    record = ui.explored()
    if record is None:
        return
    outcome = state.cached("inductor")
    if st.button("Compile with Inductor" if outcome is None else "Compile with Inductor again", type="primary",
                 key="inductor_button", help="10-40 s on a small CPU: Inductor builds its C++ or Triton kernels"):
        outcome = state.run_inductor()
    document = outcome.document if outcome is not None else None
    ours = record.kernels
    ours_compile = sum(seconds for stage, seconds in record.timings.items() if stage != "run")
    left, right = st.columns(2, gap="medium")
    with left:
        st.markdown("**Glassbox**")
        columns = st.columns(2)
        columns[0].metric("kernels", len(ours))
        columns[1].metric("compile", f"{ours_compile:.2f} s")
        st.dataframe([{"graph": g.index, "kernel": k.name, "kind": k.kind,
                       "ops": ", ".join(op.replace("aten::", "") for op in k.ops)}
                      for g in record.graphs for k in g.kernels], hide_index=True,
                     width="stretch", height=min(36 * (len(ours) + 1) + 2, 300))
        graph_index = ui.graph_picker(record, key="inductor_graph") or 0
        code = record.graphs[graph_index].code if record.graphs else None
        if code is not None:
            start = code.prelude_lines + 1
            ui.show_code("\n".join(code.source.splitlines()[start - 1:]), code.language or "cpp",
                         first_line=start, caption="our kernels", max_height=520)
            ui.show_code(code.wrapper, "python", caption="our wrapper", max_height=320)
    with right:
        st.markdown("**Inductor**")
        if outcome is None:
            st.info("Press **Compile with Inductor** to run it (on demand: it is slow to compile).")
        elif outcome.problem is not None:
            ui.show_problem(outcome.problem, state.user_source(), state.model_path_name())
        report = inductor_report(document)
        if report is not None:
            kernels, externs = report.kernels or [], report.extern_calls or []
            columns = st.columns(2)
            columns[0].metric("kernels", len(kernels), help=f"plus {len(externs)} library calls" if externs else None)
            columns[1].metric("compile (cold)", f"{report.compile_s or 0:.2f} s")
            st.dataframe([{"kernel": k.name, "language": k.language, "graph": k.graph} for k in kernels]
                         + [{"kernel": name, "language": "library call", "graph": None} for name in externs],
                         hide_index=True, width="stretch", height=min(36 * (len(kernels) + len(externs) + 1) + 2, 300))
            codes = report.code or []
            if codes:
                which = st.selectbox("Output code", list(range(len(codes))), key="inductor_code",
                                     format_func=lambda i: f"graph {i}") if len(codes) > 1 else 0
                view = st.segmented_control("Show", ["kernels", "call", "whole output code"], default="kernels",
                                            key="inductor_view", required=True)
                if view == "kernels":
                    for kernel in (k for k in kernels if k.graph == which):
                        ui.show_code(kernel.source, kernel.language, max_height=520,
                                     caption=f"{kernel.name} ({kernel.language})")
                elif view == "call":
                    ui.show_code((report.calls or [""] * len(codes))[which], "python",
                                 caption="Inductor's call(): allocates and runs the kernels", max_height=520)
                else:
                    ui.show_code(codes[which], "python", max_height=640,
                                 caption=f"Inductor's output code (torch {report.torch_version})")

render()
