"""The Model code page: edit or paste a model file, change its input shapes, explore it."""
from __future__ import annotations

import streamlit as st

from app import inputs as input_specs
from app import state, ui
from app.components import code_editor
from app.safe_text import description_markdown


def _inputs_to_prefill() -> str | None:
    """The explored inputs' shapes, when the shapes box should show them (the user is not editing it)."""
    outcome = state.cached("explore")
    current = input_specs.format_inputs(outcome.inputs) if outcome is not None and outcome.inputs else ""
    shown = st.session_state.inputs_prefill
    if current and st.session_state.inputs_text in ("", shown) and current != shown:
        return current
    if outcome is not None and not current and shown and st.session_state.inputs_text == shown:
        return ""  # this code did not run (an error): the previous model's shapes are not its shapes
    return None


def _prefill_inputs() -> None:
    current = _inputs_to_prefill()
    if current is not None:  # before the widget exists in this run: a widget's value cannot change after
        st.session_state.inputs_text = current
        st.session_state.inputs_prefill = current


def _marked_lines() -> tuple[int | None, tuple[int, ...]]:
    """The explored code's problem line and graph-break lines, while the editor still holds that code."""
    outcome = state.cached("explore")
    if outcome is None or state.user_source() != (st.session_state.editor or ""):
        return None, ()
    problem_line = outcome.problem.lineno if outcome.problem is not None else None
    breaks = outcome.record.graph_breaks if outcome.record is not None else []
    return problem_line, tuple(b.lineno for b in breaks if isinstance(b.lineno, int))


def render() -> None:
    st.markdown("### Model code")
    st.caption("A model file defines `model` (an nn.Module instance or a function) and `example_inputs` (a tuple "
               "of tensors); optionally `description`, `dynamic_inputs` and `tolerance`. Edit a sample or paste "
               "your own, then Explore. It runs in a separate worker process with a time limit.")
    _prefill_inputs()
    marked = _marked_lines()
    code_editor.editor(*marked)
    shapes, dtype_help = st.columns([3, 2], vertical_alignment="bottom")
    shapes.text_input("Example input shapes and dtypes", key="inputs_text",
                      placeholder="e.g. float32[64, 256], int64[8]",
                      help="One dtype[sizes] per input, in order. Changing them rebuilds example_inputs with the "
                           "same value ranges; your code stays as it is.")
    dtype_help.caption("dtypes: " + ", ".join(input_specs.DTYPES))
    with st.container(horizontal=True):
        st.button("Explore", type="primary", key="explore_button", on_click=state.apply_editor)
        st.button("Reset to sample", key="reset_button", on_click=state.reset_editor)
    if st.session_state.input_error:
        st.error(st.session_state.input_error)
    description = state.description_of(st.session_state.editor or "")
    state.exploration()  # explore now (or fetch), so that a fresh result's lines are marked before it is shown
    if _inputs_to_prefill() is not None or _marked_lines() != marked:
        st.rerun()  # the first exploration of this code just told us its input shapes or its lines to mark
    record = ui.explored()
    if record is None:
        return
    breaks = record.graph_breaks
    kernels = len(record.kernels)
    matches = "match" if record.verify.ok else "DO NOT match"
    message = (f"Explored **{record.model}**: {len(record.graphs)} graph(s), {kernels} kernel(s), "
               f"{len(breaks)} graph break(s); outputs {matches} eager.")
    st.success(message)
    links = st.columns(3)
    links[0].page_link("views/explorer.py", label="Explore the stages", icon=":material/account_tree:")
    if breaks:
        links[1].page_link("views/breaks.py", label="See the graph breaks", icon=":material/call_split:")
    if description:
        with st.expander("Description", expanded=False):
            st.markdown(description_markdown(description))


render()
