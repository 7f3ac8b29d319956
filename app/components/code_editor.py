"""The model code editor: Ace (streamlit-ace) with Python highlighting, line numbers, Tab indents and the
explored code's problem line and graph-break lines marked in the gutter; a plain text box as the fallback.

Note [Code editor component]
streamlit-ace (MIT) bundles Ace and its Python mode in the wheel and is served by the Streamlit server itself,
so it works with no network (a browser test checks that it fetches nothing but localhost). streamlit-code-editor
was the other candidate (MIT, newer) but it fetches a Google font on every load, which an offline or private
server must not do; Monaco components load Monaco from a CDN. The component is an iframe that keeps its own
text, so the app's copy (session key "editor", shared with the plain text box) is the source of truth:
- the editor is seeded with that text and remounted (a fresh key) whenever the text changed outside it (a
  sample picked, Reset, a shared link, the plain box), whenever the marks change (after an Explore), and when
  the previous script run drew no editor (another page was shown: Streamlit dropped its state; state.init
  counts the runs); a remount starts from the app's current text, so no edit is lost;
- between remounts its seed stays fixed: passing each returned text back in would race the user's typing.
AppTest cannot drive an iframe component, and a user may prefer a plain box (screen readers, huge pastes):
the "Plain text box" toggle shows st.text_area on the same key.
"""
from __future__ import annotations

import streamlit as st

try:
    from streamlit_ace import st_ace
except ImportError:  # requirements.txt installs it; without it the plain text box still works
    st_ace = None

PLAIN_KEY = "plain_editor"


def marks(problem_line: int | None, break_lines: list[int], line_count: int) -> tuple[list, list]:
    """Ace annotations (gutter icons with a tooltip) and full-line markers: the problem line red, breaks amber."""
    annotations, markers = [], []
    for line in sorted(set(break_lines)):
        if 0 < line <= line_count and line != problem_line:
            annotations.append({"row": line - 1, "column": 0, "type": "warning",
                                "text": "graph break here (see the Graph breaks page)"})
            markers.append({"startRow": line - 1, "endRow": line - 1, "startCol": 0, "endCol": 1,
                            "className": "ace_step", "type": "fullLine"})
    if problem_line and 0 < problem_line <= line_count:
        annotations.append({"row": problem_line - 1, "column": 0, "type": "error",
                            "text": "the exploration stopped here (details below)"})
        markers.append({"startRow": problem_line - 1, "endRow": problem_line - 1, "startCol": 0, "endCol": 1,
                        "className": "ace_error-marker", "type": "fullLine"})
    return annotations, markers


def editor(problem_line: int | None = None, break_lines: tuple[int, ...] = (), height: int = 560) -> str:
    """Draw the editor for st.session_state.editor and return its text (Note [Code editor component])."""
    state = st.session_state
    plain = st_ace is None or st.toggle("Plain text box", key=PLAIN_KEY,
                                        help="A plain text area instead of the code editor (no highlighting)")
    if plain:
        st.text_area("Edit or paste Python", key="editor", height=height,
                     help="Ctrl+Enter applies the edit; Explore runs it.")
        state.editor_seen = None  # the code editor remounts from this text when switched back
        return state.editor or ""
    text = state.editor = state.editor or ""  # re-set: a key the plain box last owned would be dropped
    wanted = marks(problem_line, list(break_lines), len(text.splitlines()))
    key = state.editor_key
    revisit = state.editor_drawn_in != state.runs - 1  # the last run drew no editor
    if key is None or revisit or state.editor_seen != text or state.editor_marks != wanted:
        state.editor_mounts = state.editor_mounts + 1
        key = state.editor_key = f"code_editor_{state.editor_mounts}"
        state.editor_seed, state.editor_marks, state.editor_seen = text, wanted, text
    state.editor_drawn_in = state.runs
    annotations, markers = state.editor_marks
    value = st_ace(value=state.editor_seed, language="python", theme="chrome", keybinding="vscode",
                   height=height, font_size=13, tab_size=4, show_gutter=True, wrap=False,
                   annotations=annotations, markers=markers, auto_update=True, key=key)
    if isinstance(value, str) and value != state.editor_seen:
        state.editor = state.editor_seen = value
    return state.editor or ""
