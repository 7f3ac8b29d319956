"""Graph-break fixes applied in place (Note [Applying a rewrite] in engine/tools/apply_fix.py): "Apply this
rewrite" puts a concrete suggestion into the code (the editor's text too), the page explores it, and a banner
shows before and after (graph breaks, graphs, kernels, compile seconds, the call's run time against eager,
numerics) with Keep and Revert."""
from __future__ import annotations

import streamlit as st

from app import state
from engine.record import Exploration, GraphBreakRecord, Suggestion
from engine.tools.apply_fix import FixError, apply_fix, concrete, summary


def _run_time(side: dict) -> str:
    """A call's time (Note [Call time]): ours with its spread, and eager / ours as judged."""
    if side.get("run_ms") is None:
        return "not timed"
    return f"{side['run_ms']:.3g} ms ± {side['run_iqr_ms'] / 2:.2g}"


def _apply(number: int, lineno: int, suggestion: Suggestion, before: dict) -> None:
    session = st.session_state
    applied = session.applied
    try:
        fixed = apply_fix(applied["source"], lineno, suggestion)
    except FixError as error:
        session.fix_error = str(error)
        return
    session.fix_error = ""
    session.fix_trial = {"source": applied["source"], "label": applied["label"], "inputs": applied["inputs"],
                         "before": before, "break": number, "line": lineno, "pattern": suggestion.pattern}
    session.editor = fixed  # the editor shows the fixed code (Note [Code editor component])
    session.applied = {"source": fixed, "label": state.PASTED, "inputs": applied["inputs"]}


def _keep() -> None:
    st.session_state.fix_trial = None


def _revert() -> None:
    session = st.session_state
    trial = session.fix_trial or {}
    if trial:
        session.editor = trial["source"]
        session.applied = {"source": trial["source"], "label": trial["label"], "inputs": trial["inputs"]}
    session.fix_trial = None


def apply_button(record: Exploration, graph_break: GraphBreakRecord, number: int) -> None:
    if not concrete(graph_break.suggestion) or not graph_break.lineno or st.session_state.fix_trial:
        return
    st.button("Apply this rewrite", key=f"apply_fix_{number}", icon=":material/auto_fix_high:",
              on_click=_apply, args=(number, graph_break.lineno, graph_break.suggestion, summary(record.to_json())),
              help="Puts the rewrite into your code, explores it, and shows before and after; keep or revert it")


def trial_banner(record: Exploration) -> None:
    if st.session_state.fix_error:
        st.warning(st.session_state.fix_error)
    trial = st.session_state.fix_trial
    if not trial:
        return
    before, after = trial["before"], summary(record.to_json())
    rows = [{"": label, "before": before[key], "after": after[key]}
            for key, label in (("graph_breaks", "graph breaks"), ("graphs", "graphs"), ("kernels", "kernels"),
                               ("compile_s", "compile seconds"), ("matches_eager", "matches eager"))
            if key in before]  # a trial begun before compile seconds were summed has none
    rows[-1:-1] = [{"": "run time per call", "before": _run_time(before), "after": _run_time(after)},
                 {"": "eager / compiled (same rounds)", "before": before.get("speedup") or "not timed",
                  "after": after.get("speedup") or "not timed"}]
    better = after["graph_breaks"] < before["graph_breaks"] and after["matches_eager"]
    (st.success if better else st.warning)(
        f"Applied the rewrite of break {trial['break']} (line {trial['line']}, {trial['pattern']}): graph breaks "
        f"{before['graph_breaks']} → {after['graph_breaks']}, graphs {before['graphs']} → {after['graphs']}"
        + (f", eager / compiled {before.get('speedup') or 'not timed'} → {after['speedup']}"  # each timed in its
           if after.get("speedup") else "")  # own rounds with eager: comparable across the two jobs' loads
        + ("" if after["matches_eager"] else "; the outputs no longer match eager") + ".")
    left, middle, right = st.columns([5, 1, 1], vertical_alignment="center")
    left.dataframe([{k: str(v) for k, v in row.items()} for row in rows], hide_index=True, width="stretch",
                   column_config={"": st.column_config.TextColumn(width=200),  # the sides: the rest, shared
                                  **{side: st.column_config.TextColumn(width=260) for side in ("before", "after")}})
    middle.button("Keep", key="fix_keep", type="primary", on_click=_keep)
    right.button("Revert", key="fix_revert", on_click=_revert)
