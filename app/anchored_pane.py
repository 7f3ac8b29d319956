"""The code and loop-IR stages' explanations anchored to lines (visualizers/anchors.py): pick a sentence and the
lines it talks about are highlighted; pick any line and it says which IR node, ATen and FX nodes and user lines
it came from."""
from __future__ import annotations

import streamlit as st

from app import ui
from app.safe_text import md_text
from engine.record import GraphRecord
from visualizers import anchors
from visualizers import code as code_html


def _light_up(sentences: list[dict], pick, key: str, listing: list[str], language: str, what: str,
              echo: bool = False) -> tuple[int, int, int]:
    """A picker of `sentences` (st.radio or st.selectbox), then the listing around the chosen one's lines with
    those lines lit (the sentence itself above them with `echo`): (chosen, first line, last line)."""
    chosen = pick("Pick a sentence: its lines light up", range(len(sentences)), key=key,
                  format_func=lambda i: sentences[i]["text"])
    if echo:
        st.markdown(md_text(sentences[chosen]["text"]))
    first, last = sentences[chosen]["lines"]
    start = max(first - 2, 1)
    ui.show_code("\n".join(listing[start - 1:last + 1]), language, first_line=start,
                 hl_lines=list(range(first, last + 1)), max_height=360, caption=f"lines {first}–{last} of {what}")
    return chosen, first, last


def render(graph: GraphRecord, language: str, key: str, own_file: str | None = None) -> None:
    sentences = anchors.kernel_sentences(graph, own_file)
    if not sentences:
        return
    with st.expander("Explain the code, anchored to its lines", expanded=False):
        source = (graph.code.source if graph.code else "").splitlines()
        chosen, first, last = _light_up(sentences, st.radio, f"{key}_anchor", source, language, "the module")
        traced = [p.line for p in (graph.code.provenance if graph.code else []) if first <= p.line <= last]
        line = st.number_input("Which generated line? (its origin)", min_value=first, max_value=last,
                               value=traced[0] if traced else first, key=f"{key}_anchor_line_{chosen}")
        origin = anchors.line_origin(graph, int(line))
        if origin is None:
            st.caption(f"Line {line} is the kernel's scaffolding (signature, loops, stores): no single IR node.")
            return
        code = " ".join(origin["text"].replace("`", "'").split())[:120]
        st.markdown(f"Line {line} `{code}` comes from IR node "
                    f"**{md_text(origin['ir_node'])}**, ATen {md_text(', '.join(origin['aten_nodes']) or '-')}, "
                    f"FX {md_text(', '.join(origin['fx_nodes']) or '-')}")
        for number, text in origin["user_text"].items():
            st.code(f"{number}: {text}", language="python")


def render_ir(graph: GraphRecord, key: str, own_file: str | None = None) -> None:
    """The loop-IR stage's sentences, one per IR node, each lighting up the listing's lines it talks about; and
    any line of the listing traced to its IR node, ATen and FX nodes, kernel and the user's line."""
    sentences = anchors.ir_sentences(graph, own_file)
    if not sentences:
        return
    with st.expander("Explain the loop IR, anchored to its lines", expanded=False):
        listing = code_html.ir_listing(graph)[0].splitlines()
        chosen, first, last = _light_up(sentences, st.selectbox, f"{key}_ir_anchor", listing, "ir",
                                        "the loop IR listing", echo=True)
        line = st.number_input("Which line of the listing? (its origin)", min_value=first, max_value=last,
                               value=first, key=f"{key}_ir_anchor_line_{chosen}")
        origin = anchors.ir_line_origin(graph, int(line))
        if origin is None:
            return
        text = " ".join(origin["text"].replace("`", "'").split())[:120]
        st.markdown(f"Line {line} `{text}` belongs to IR node **{md_text(origin['ir_node'])}** (kernel "
                    f"{md_text(origin['kernel'] or '-')}), from ATen "
                    f"{md_text(', '.join(origin['aten_nodes']) or '-')}, "
                    f"FX {md_text(', '.join(origin['fx_nodes']) or '-')}")
        for number, user_text in origin["user_text"].items():
            st.code(f"{number}: {user_text}", language="python")
